//! MCP round trips over an in-memory pipe: toolstack's server and client
//! against a hand-written rmcp server and rmcp's own client call, in one
//! run.
//!
//! `cargo bench --features mcp --bench mcp` runs criterion, then prints a
//! best-of summary with ratios to the hand-written rmcp baseline.

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, Criterion};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use toolstack::mcp::rmcp;
use toolstack::mcp::{McpClient, McpServer};
use toolstack::{tool, ToolError, ToolRequest, ToolResult, Toolbox};
use tower::ServiceExt as _;

use toolstack_demo::add::{add, Add, ARGS};

/// The baseline: an rmcp server whose `call_tool` parses the arguments,
/// adds, and answers with the sum as text — what one writes by hand.
#[derive(Clone)]
struct HandWritten;

impl ServerHandler for HandWritten {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = serde_json::Value::Object(params.arguments.unwrap_or_default());
        let args: Add = serde_json::from_value(args)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let text = serde_json::to_string(&add(args))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

fn toolbox() -> Toolbox {
    Toolbox::new().tool(tool::from_fn("add", |args: Add| async move {
        Ok::<_, ToolError>(add(args))
    }))
}

fn params() -> CallToolRequestParams {
    let args = serde_json::from_str(ARGS).expect("an object");
    CallToolRequestParams::new("add").with_arguments(args)
}

async fn raw_client<S>(server: S) -> RunningService<RoleClient, ()>
where
    S: ServerHandler + Send + Sync + 'static,
{
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = server.serve(server_io).await.expect("server starts");
        let _ = running.waiting().await;
    });
    ().serve(client_io).await.expect("client connects")
}

/// toolstack's server on a pipe the way `serve_stdio` serves stdin and
/// stdout: `serve_io`, each line read under its bound and looked at for a
/// 2025-11-25 task before rmcp reads it.
fn serve_ours(server: McpServer) -> tokio::io::DuplexStream {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_io);
    tokio::spawn(server.serve_io(read, write));
    client_io
}

async fn our_server_raw_client(server: McpServer) -> RunningService<RoleClient, ()> {
    ().serve(serve_ours(server)).await.expect("client connects")
}

async fn ours(server: McpServer) -> McpClient {
    let client_io = serve_ours(server);
    McpClient::connect(client_io)
        .await
        .expect("client connects")
}

struct Setup {
    runtime: tokio::runtime::Runtime,
    baseline: RunningService<RoleClient, ()>,
    our_server: RunningService<RoleClient, ()>,
    remote: Toolbox,
}

fn setup() -> Setup {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (baseline, our_server, remote) = runtime.block_on(async {
        let baseline = raw_client(HandWritten).await;
        let our_server = our_server_raw_client(McpServer::new(toolbox())).await;
        let remote = ours(McpServer::new(toolbox()))
            .await
            .toolbox()
            .await
            .expect("tools listed");
        (baseline, our_server, remote)
    });
    Setup {
        runtime,
        baseline,
        our_server,
        remote,
    }
}

fn call_baseline(s: &Setup) -> usize {
    s.runtime.block_on(async {
        let result = s.baseline.call_tool(params()).await.expect("a result");
        result.content.len()
    })
}

fn call_our_server(s: &Setup) -> usize {
    s.runtime.block_on(async {
        let result = s.our_server.call_tool(params()).await.expect("a result");
        result.content.len()
    })
}

fn call_end_to_end(s: &Setup) -> usize {
    s.runtime.block_on(async {
        let stream = s
            .remote
            .clone()
            .oneshot(ToolRequest::new("add", ARGS))
            .await
            .expect("opened");
        ToolResult::collect(stream).await.content.len()
    })
}

fn bench(c: &mut Criterion) {
    let s = setup();
    assert_eq!(call_baseline(&s), 1);
    assert_eq!(call_our_server(&s), 1);
    assert_eq!(call_end_to_end(&s), 1);
    let mut group = c.benchmark_group("mcp_in_memory");
    group.bench_function("rmcp_hand_written_server", |b| b.iter(|| call_baseline(&s)));
    group.bench_function("toolstack_server", |b| b.iter(|| call_our_server(&s)));
    group.bench_function("toolstack_server_and_client", |b| {
        b.iter(|| call_end_to_end(&s))
    });
    group.finish();
}

fn summary() {
    let s = setup();
    const CALLS: usize = 2_000;
    let best = |f: &dyn Fn(&Setup) -> usize| {
        (0..5)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..CALLS {
                    black_box(f(&s));
                }
                start.elapsed().as_secs_f64() / CALLS as f64
            })
            .fold(f64::MAX, f64::min)
    };
    let base = best(&call_baseline);
    let server = best(&call_our_server);
    let both = best(&call_end_to_end);
    println!("\nsummary (best of 5 rounds of {CALLS} calls, in-memory pipe)");
    println!("| variant | µs/call | ratio |");
    println!("|---|---|---|");
    for (name, t) in [
        ("hand-written rmcp server, rmcp client", base),
        (
            "toolstack McpServer (serve_io, as on stdio), rmcp client",
            server,
        ),
        ("toolstack McpServer, toolstack McpClient tool", both),
    ] {
        println!("| {name} | {:.1} | {:.2}× |", t * 1e6, t / base);
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    summary();
}
