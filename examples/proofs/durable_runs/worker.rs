//! A worker process (`--worker NAME`): the AI SDK chat endpoint over an
//! agent whose runs are journaled in the store its flags name, with one
//! model and one tool — a write that waits for approval and leaves a line
//! in the ledger before it takes its time.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use toolstack::agent::store::RunStore;
use toolstack::agent::Agent;
use toolstack::approval::{ApprovalRequest, Decision};
use toolstack::http::ai_sdk::ChatEndpoint;
use toolstack::model::{ChatRequest, Message, ModelDelta, ScriptedModel, Turn};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};
use toolstack_layers::approval::ApprovalLayer;

use crate::flag;

/// The model of every chat: asked once, it writes the chat's row; asked
/// after the write's result, it says what became of it.
#[derive(Clone)]
struct RowWriter;

impl tower::Service<ChatRequest> for RowWriter {
    type Response = futures_util::stream::BoxStream<'static, Result<ModelDelta, ToolError>>;
    type Error = ToolError;
    type Future = futures_util::future::Ready<Result<Self::Response, ToolError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ToolError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let row = request
            .messages
            .iter()
            .find_map(|m| match m {
                Message::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let turn = match request.messages.last() {
            Some(Message::Tool { content, .. }) => Turn::new().text(format!("{row}: {content}")),
            _ => Turn::new().tool_call("write", json!({ "row": row }).to_string()),
        };
        let answer = ScriptedModel::new([turn]).call(request).into_inner();
        // One call id per chat, so the ledger can tell the runs apart.
        futures_util::future::ready(answer.map(move |deltas| {
            deltas
                .map(move |delta| match delta {
                    Ok(ModelDelta::ToolCall(mut call)) => {
                        if call.id.is_some() {
                            call.id = Some(format!("call-{row}"));
                        }
                        Ok(ModelDelta::ToolCall(call))
                    }
                    other => other,
                })
                .boxed()
        }))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Row {
    row: String,
}

/// `write`: appends its row to the ledger (synced), then takes its time.
fn toolbox(ledger: PathBuf, write_ms: u64) -> Toolbox {
    let write = tool::from_fn("write", move |Row { row }: Row| {
        let ledger = ledger.clone();
        async move {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&ledger)
                .map_err(|e| ToolError::failed(format!("the ledger: {e}")))?;
            // One write per line: appends from many calls and processes
            // never interleave within it.
            file.write_all(format!("{row}\n").as_bytes())
                .map_err(|e| ToolError::failed(e.to_string()))?;
            file.sync_all()
                .map_err(|e| ToolError::failed(e.to_string()))?;
            tokio::time::sleep(Duration::from_millis(write_ms)).await;
            Ok::<_, ToolError>(format!("wrote {row}"))
        }
    })
    .with_annotations(ToolAnnotations::new().destructive(true));
    let nobody = |_: &ApprovalRequest| async { Decision::deny("nobody here") };
    Toolbox::new().layered(write, ApprovalLayer::new(nobody).caller_decides())
}

pub(crate) async fn worker(name: &str, args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let ledger = PathBuf::from(flag(args, "--ledger", String::new()));
    let write_ms: u64 = flag(args, "--write-ms", 1_500);
    let lease = Duration::from_millis(flag(args, "--lease-ms", 2_000));
    let store: Arc<dyn RunStore> = match flag(args, "--store", String::new()).as_str() {
        "redis" => {
            let url: String = flag(args, "--url", String::new());
            Arc::new(toolstack::agent::store::redis::RedisStore::connect(&url).await?)
        }
        "sqlite" => {
            let path: String = flag(args, "--path", String::new());
            Arc::new(toolstack::agent::store::sqlite::SqliteStore::open(path)?)
        }
        other => return Err(format!("--store redis|sqlite, not {other:?}").into()),
    };
    let agent = Agent::new(RowWriter, toolbox(ledger, write_ms))
        .store(store)
        .process_id(name.to_owned())
        .lease(lease);
    let app = axum::Router::new().nest("/api/chat", ChatEndpoint::new(agent).into_router());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("listening on {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}
