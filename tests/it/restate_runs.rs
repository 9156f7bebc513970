//! Agent runs on Restate (`toolstack::agent::restate`), against a real
//! `restate-server`: a run of two model turns with a tool call answers
//! through the ingress; and a service killed while its tools run is
//! replaced by a new one on the same address, where the run goes on
//! without asking the model again for the turn that completed, runs the
//! idempotent call again, and answers the other "may have run".
//!
//! Without the server binary the tests say SKIPPED loudly (and fail when
//! `TOOLSTACK_REQUIRE_RESTATE` is set): see `restate_server.rs`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolstack::agent::restate::{self, RestateRuns};
use toolstack::agent::Agent;
use toolstack::model::{ScriptedModel, Turn};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};
use toolstack_demo::restate_server::RestateProcess;

use super::restate_server::start;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Rows {
    #[allow(dead_code)]
    rows: u32,
}

/// A service process of its own: its runtime, dropped to kill it (its
/// connections and the steps running on them die with it).
pub(super) struct Service {
    runtime: Option<tokio::runtime::Runtime>,
    pub(super) addr: SocketAddr,
}

impl Service {
    /// Serves `agent`'s runs on `addr` (port 0: a free one).
    pub(super) fn start(agent: Agent<ScriptedModel>, addr: SocketAddr) -> Service {
        Service::serving(RestateRuns::new(agent), addr)
    }

    /// Serves `runs` on `addr` (port 0: a free one).
    pub(super) fn serving<M>(runs: RestateRuns<M>, addr: SocketAddr) -> Service
    where
        M: toolstack::model::ModelService + Sync + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the service");
        // A killed service's listener closes as its runtime winds down,
        // in the background: its address is free a moment later.
        let waited = Instant::now();
        let listener = loop {
            let _entered = runtime.enter();
            match restate::listen(addr) {
                Ok(listener) => break listener,
                Err(e) if waited.elapsed() < Duration::from_secs(10) => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("the service's address {addr}: {e}"),
            }
        };
        let addr = listener.local_addr().expect("its address");
        runtime.spawn(runs.serve(listener));
        Service {
            runtime: Some(runtime),
            addr,
        }
    }

    pub(super) fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// As a SIGKILL would: every task of the process stops where it is.
    pub(super) fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The ingress's answer to `POST path` with `body`, JSON (`null`: none;
/// no body at all: a `GET`).
pub(super) async fn call(
    restate: &RestateProcess,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let url = format!("{}{path}", restate.ingress_url());
    let request = match body {
        // A handler that takes no input: a POST with no body.
        Some(Value::Null) => client.post(&url),
        Some(body) => client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string()),
        None => client.get(&url),
    };
    let response = request
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status().as_u16();
    let text = response.text().await.expect("the answer's body");
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_two_turns_with_a_tool_answers_through_the_ingress() {
    let Some(restate) = start("restate_runs_answer") else {
        return;
    };
    let model = ScriptedModel::new([
        Turn::new().tool_call("add", r#"{"a":2,"b":3}"#),
        Turn::new().text("It is 5."),
    ]);
    let adds = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&adds);
    let tools = Toolbox::new().tool(tool::from_fn("add", move |Add { a, b }| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>(a + b) }
    }));
    let service = Service::start(
        Agent::new(model.clone(), tools),
        "127.0.0.1:0".parse().unwrap(),
    );
    restate
        .register(&service.uri())
        .expect("the service registers");
    let input = json!({"messages": [{"role": "user", "content": "2+3?"}]});
    let (status, output) = call(&restate, "/AgentRuns/run-1/run", Some(input)).await;
    assert_eq!(status, 200, "{output}");
    assert_eq!(output["text"], "It is 5.", "{output}");
    assert_eq!(output["stop"], "finished", "{output}");
    let messages = output["messages"].as_array().expect("the messages");
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "tool" && m["content"] == "5"),
        "the tool's result is in the conversation: {output}"
    );
    assert_eq!(model.turns_played(), 2);
    assert_eq!(adds.load(Ordering::SeqCst), 1);
}

/// Waits until `count` reaches `at least`.
async fn started(count: &AtomicUsize, at_least: usize, what: &str) {
    let waited = Instant::now();
    while count.load(Ordering::SeqCst) < at_least {
        assert!(waited.elapsed() < Duration::from_secs(30), "{what} starts");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A toolbox of one tool that counts its runs and hangs while `hang` is
/// set.
fn hanging(
    name: &'static str,
    answer: &'static str,
    runs: &Arc<AtomicUsize>,
    hang: &Arc<AtomicBool>,
    idempotent: bool,
) -> Toolbox {
    let (runs, hang) = (Arc::clone(runs), Arc::clone(hang));
    let tool = tool::from_fn(name, move |_: Rows| {
        runs.fetch_add(1, Ordering::SeqCst);
        let hang = hang.load(Ordering::SeqCst);
        async move {
            if hang {
                std::future::pending::<()>().await;
            }
            Ok::<_, ToolError>(answer)
        }
    })
    .with_annotations(ToolAnnotations::new().idempotent(idempotent));
    Toolbox::new().tool(tool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_service_is_replaced_without_asking_again_or_writing_twice() {
    let Some(restate) = start("restate_runs_replay") else {
        return;
    };
    let model = ScriptedModel::new([
        Turn::new().tool_call("write", r#"{"rows":1}"#),
        Turn::new().tool_call("read", r#"{"rows":2}"#),
        Turn::new().text("done"),
    ]);
    // Each tool hangs in the process killed while it runs.
    let (hang_write, hang_read) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(true)),
    );
    let (writes, reads) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tools = Toolbox::new()
        .merge(hanging("write", "written", &writes, &hang_write, false))
        .merge(hanging("read", "read 2 rows", &reads, &hang_read, true));
    let agent = Agent::new(model.clone(), tools);
    let mut service = Service::start(agent.clone(), "127.0.0.1:0".parse().unwrap());
    let addr = service.addr;
    restate
        .register(&service.uri())
        .expect("the service registers");
    let input = json!({"messages": [{"role": "user", "content": "write, then read"}]});
    let (status, sent) = call(&restate, "/AgentRuns/run-2/run/send", Some(input)).await;
    assert!(status == 202 || status == 200, "{status} {sent}");

    // Killed while the write (not idempotent) runs; the run is pinned to
    // its deployment: the new process serves at the same address.
    started(&writes, 1, "the write").await;
    service.kill();
    hang_write.store(false, Ordering::SeqCst);
    let mut service = Service::start(agent.clone(), addr);
    // Killed again while the read (idempotent) runs.
    started(&reads, 1, "the read").await;
    service.kill();
    hang_read.store(false, Ordering::SeqCst);
    let _service = Service::start(agent, addr);

    let (status, output) = call(&restate, "/restate/workflow/AgentRuns/run-2/attach", None).await;
    assert_eq!(status, 200, "{output}");
    assert_eq!(output["text"], "done", "{output}");
    assert_eq!(
        model.turns_played(),
        3,
        "a turn that completed before a kill is not asked again: {output}"
    );
    assert_eq!(
        writes.load(Ordering::SeqCst),
        1,
        "the write is not run again"
    );
    assert_eq!(
        reads.load(Ordering::SeqCst),
        2,
        "the idempotent read runs again"
    );
    let results: Vec<&str> = output["messages"]
        .as_array()
        .expect("the messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(results.len(), 2, "{output}");
    assert!(
        results[0].contains("the call may have run"),
        "the write is answered 'may have run': {results:?}"
    );
    assert_eq!(results[1], "read 2 rows", "{results:?}");
}

/// What a turn costs on Restate: runs of 10 and 100 turns, each a model
/// step and an (idempotent) tool step, through the ingress, against the
/// same run in process. Prints µs per turn; run it by hand:
/// `cargo test -p toolstack --features restate --test it restate_runs::cost -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn cost_of_a_turn() {
    let Some(restate) = start("restate_runs_cost") else {
        return;
    };
    let script = |turns: usize| {
        let mut script: Vec<Turn> = (0..turns - 1)
            .map(|_| Turn::new().tool_call("add", r#"{"a":2,"b":3}"#))
            .collect();
        script.push(Turn::new().text("done"));
        ScriptedModel::new(script)
    };
    let tools = || {
        Toolbox::new().tool(
            tool::from_fn(
                "add",
                |Add { a, b }| async move { Ok::<_, ToolError>(a + b) },
            )
            .with_annotations(ToolAnnotations::new().idempotent(true)),
        )
    };
    let mut service: Option<Service> = None;
    for (round, turns) in [10usize, 100, 10, 100].into_iter().enumerate() {
        let model = script(turns);
        let agent = Agent::new(model.clone(), tools())
            .max_steps(turns + 1)
            .max_tool_calls(turns);
        let started = Instant::now();
        let done = futures_util::StreamExt::collect::<Vec<_>>(
            agent.run(vec![toolstack::model::Message::user("go")]),
        )
        .await;
        let here = started.elapsed();
        assert!(matches!(
            done.last(),
            Some(toolstack::agent::AgentEvent::Done(_))
        ));
        let model = script(turns);
        let agent = Agent::new(model.clone(), tools())
            .max_steps(turns + 1)
            .max_tool_calls(turns);
        drop(service.take());
        let fresh = Service::start(agent, "127.0.0.1:0".parse().unwrap());
        restate
            .register(&fresh.uri())
            .expect("the service registers");
        service = Some(fresh);
        let input = json!({"messages": [{"role": "user", "content": "go"}]});
        let started = Instant::now();
        let path = format!("/AgentRuns/cost-{round}/run");
        let (status, output) = call(&restate, &path, Some(input)).await;
        let durable = started.elapsed();
        assert_eq!(status, 200, "{output}");
        assert_eq!(output["text"], "done", "{output}");
        println!(
            "{turns} turns: in process {:.0} µs/turn, on Restate {:.0} µs/turn",
            here.as_micros() as f64 / turns as f64,
            durable.as_micros() as f64 / turns as f64
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_made_before_a_kill_is_not_asked_for_again() {
    use toolstack::agent::compaction::Summarize;
    let Some(restate) = start("restate_runs_summary") else {
        return;
    };
    // The history is past the budget from the start: the summarizer is
    // asked before the first turn, once.
    let summarizer = ScriptedModel::new([Turn::new().text("they talked at length")]);
    let model = ScriptedModel::new([
        Turn::new().tool_call("read", r#"{"rows":2}"#),
        Turn::new().text("done"),
    ]);
    let hang = Arc::new(AtomicBool::new(true));
    let reads = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(
        model.clone(),
        hanging("read", "read 2 rows", &reads, &hang, true),
    )
    .compaction(500, Summarize::new(summarizer.clone(), 1));
    let mut service = Service::start(agent.clone(), "127.0.0.1:0".parse().unwrap());
    let addr = service.addr;
    restate
        .register(&service.uri())
        .expect("the service registers");
    let long = "a long answer. ".repeat(400);
    let input = json!({"messages": [
        {"role": "user", "content": "tell me everything"},
        {"role": "assistant", "content": long},
        {"role": "user", "content": "and then?"},
        {"role": "assistant", "content": "nothing more"},
        {"role": "user", "content": "now read"},
    ]});
    let (status, sent) = call(&restate, "/AgentRuns/summary-1/run/send", Some(input)).await;
    assert!(status == 202 || status == 200, "{status} {sent}");

    // Killed while the read runs, after the summary and the first turn.
    started(&reads, 1, "the read").await;
    assert_eq!(summarizer.turns_played(), 1, "summarized before the turn");
    service.kill();
    hang.store(false, Ordering::SeqCst);
    let _service = Service::start(agent, addr);

    let (status, output) = call(
        &restate,
        "/restate/workflow/AgentRuns/summary-1/attach",
        None,
    )
    .await;
    assert_eq!(status, 200, "{output}");
    assert_eq!(output["text"], "done", "{output}");
    assert_eq!(
        summarizer.turns_played(),
        1,
        "the summary made before the kill is read back, not asked for again"
    );
    assert_eq!(model.turns_played(), 2);
    let text = output["messages"].to_string();
    assert!(text.contains("they talked at length"), "{output}");
}
