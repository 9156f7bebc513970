//! The AI SDK chat endpoint read by the real client: `web/check-chat.mjs`
//! drives it with the `ai` package (pinned in `web/package.json` and its
//! lock file, on the Node 22 of the npm package `node`) — its
//! `DefaultChatTransport`, `readUIMessageStream` and `AbstractChat`, the
//! engine of `useChat` — and prints the messages the SDK assembled.
//!
//! Needs `web/node_modules` (`npm ci` in `web/`, which `.ci/run` does);
//! without it the test says SKIPPED loudly, and fails when
//! `TOOLSTACK_REQUIRE_WEB` is set (CI sets it once the install worked).
//!
//! The script has no waits of its own: the test bounds its run, generously
//! for a debug build on a loaded machine (it takes seconds), so that a
//! stream that never ends fails, saying what it waited for, instead of
//! holding CI up.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toolstack::agent::store::sqlite::SqliteStore;
use toolstack::agent::Agent;
use toolstack::approval::Decision;
use toolstack::http::ai_sdk::{ChatEndpoint, MemoryChunkLog};
use toolstack::model::{ScriptedModel, Turn};
use toolstack::{tool, ToolError, Toolbox};
use toolstack_layers::approval::ApprovalLayer;
use tower::ServiceExt;

use crate::process;
use process::output_within;

fn node() -> Option<PathBuf> {
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web");
    let node = web.join("node_modules/.bin/node");
    let ready = node.exists() && web.join("node_modules/ai/package.json").exists();
    if !ready {
        let why = "web/node_modules is missing (run `npm ci` in web/)";
        assert!(
            std::env::var_os("TOOLSTACK_REQUIRE_WEB").is_none(),
            "TOOLSTACK_REQUIRE_WEB is set but {why}"
        );
        // Straight to stderr: the harness captures `eprintln!`, and a
        // skipped test must say so where the user sees it.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "!! SKIPPED: the AI SDK client test did NOT run: {why}"
        );
        return None;
    }
    Some(node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_client_assembles_what_the_endpoint_streams() {
    let Some(node) = node() else { return };

    let plain = ScriptedModel::new([
        Turn::new()
            .text("Counting, then failing.")
            .tool_call("count", r#"{"to":3}"#)
            .tool_call("fail", "{}"),
        Turn::new().text("Counted to 3; the other tool failed."),
    ]);
    let fail = tool::from_fn("fail", |_: Value| async {
        Err::<String, _>(ToolError::failed("the disk is on fire"))
    });
    let tools = Toolbox::new()
        .tool(toolstack_demo::tools::count())
        .tool(fail);

    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let delete = tool::from_fn("delete_rows", move |_: Value| {
        let runs = Arc::clone(&counted);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("deleted 2 rows")
        }
    });
    let nobody = |_: &toolstack::approval::ApprovalRequest| async { Decision::deny("nobody here") };
    let guarded = Toolbox::new().layered(delete, ApprovalLayer::new(nobody).caller_decides());
    let approval = ScriptedModel::new([
        Turn::new().tool_call("delete_rows", r#"{"older_than":"2020"}"#),
        Turn::new().text("Deleted."),
    ]);

    // The endpoint the `restart` scenario replaces mid-chat: a new one
    // over the same SQLite file, as a restarted server would make.
    let runs_file = std::env::temp_dir().join(format!(
        "toolstack-ai-sdk-client-{}-{:?}.db",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    let restart_runs = Arc::new(AtomicUsize::new(0));
    let restartable = {
        let (runs_file, restart_runs) = (runs_file.clone(), Arc::clone(&restart_runs));
        move |turns: Vec<Turn>| -> axum::Router {
            let counted = Arc::clone(&restart_runs);
            let delete = tool::from_fn("delete_rows", move |_: Value| {
                let runs = Arc::clone(&counted);
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, ToolError>("deleted 2 rows")
                }
            });
            let nobody =
                |_: &toolstack::approval::ApprovalRequest| async { Decision::deny("nobody here") };
            let guarded =
                Toolbox::new().layered(delete, ApprovalLayer::new(nobody).caller_decides());
            let store = SqliteStore::open(&runs_file).unwrap();
            ChatEndpoint::new(Agent::new(ScriptedModel::new(turns), guarded).store(store))
                .into_router()
        }
    };
    let current = Arc::new(std::sync::Mutex::new(restartable(vec![
        Turn::new().tool_call("delete_rows", r#"{"older_than":"2020"}"#)
    ])));
    let forward = {
        let current = Arc::clone(&current);
        tower::service_fn(move |request: axum::extract::Request| {
            let app = current.lock().unwrap().clone();
            app.oneshot(request)
        })
    };
    let restart = {
        let current = Arc::clone(&current);
        move || async move {
            // The old endpoint is dropped: only the file keeps its runs.
            *current.lock().unwrap() = restartable(vec![Turn::new().text("Deleted.")]);
            "restarted"
        }
    };
    let resumable_model = ScriptedModel::new([
        Turn::new().text("Sleeping first.").tool_call("slow", "{}"),
        Turn::new().text("Slept well."),
    ]);
    // The tool finishes only once the reloaded page has reconnected (its
    // `GET …/stream` reached the endpoint): the answer is in progress then.
    let reconnected = Arc::new(tokio::sync::Semaphore::new(0));
    let slow = {
        let reconnected = Arc::clone(&reconnected);
        Toolbox::new().tool(tool::from_fn("slow", move |_: Value| {
            let reconnected = Arc::clone(&reconnected);
            async move {
                let _after = reconnected.acquire().await.expect("the gate stays");
                Ok::<_, ToolError>("slept")
            }
        }))
    };
    let on_reconnect = {
        let reconnected = Arc::clone(&reconnected);
        tower::util::MapRequestLayer::new(move |request: axum::extract::Request| {
            if request.method() == axum::http::Method::GET {
                reconnected.add_permits(1);
            }
            request
        })
    };

    // Signed requests: a forged answer first, then a genuine one.
    let signed_runs = Arc::new(AtomicUsize::new(0));
    let signed = {
        let counted = Arc::clone(&signed_runs);
        let delete = tool::from_fn("delete_rows", move |_: Value| {
            let runs = Arc::clone(&counted);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>("deleted 2 rows")
            }
        });
        let nobody =
            |_: &toolstack::approval::ApprovalRequest| async { Decision::deny("nobody here") };
        let guarded = Toolbox::new().layered(delete, ApprovalLayer::new(nobody).caller_decides());
        let model = ScriptedModel::new([
            Turn::new().tool_call("delete_rows", r#"{"older_than":"2020"}"#),
            Turn::new().tool_call("delete_rows", r#"{"older_than":"2020"}"#),
            Turn::new().text("Deleted."),
        ]);
        let keys = toolstack::approval::ApprovalKeys::new("k1", [5u8; 32]).unwrap();
        ChatEndpoint::new(Agent::new(model, guarded))
            .sign_approvals(keys)
            .into_router()
    };

    // The conversation kept on the server: the model is recorded.
    let persisted_seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let persisted = {
        let seen = Arc::clone(&persisted_seen);
        let model = tower::ServiceBuilder::new()
            .map_request(move |request: toolstack::model::ChatRequest| {
                seen.lock().unwrap().push(request.messages.to_vec());
                request
            })
            .service(ScriptedModel::new([
                Turn::new().text("Hello, Ada."),
                Turn::new().text("You are Ada."),
            ]));
        ChatEndpoint::new(Agent::new(model, Toolbox::new()))
            .server_history()
            .into_router()
    };

    let app = axum::Router::new()
        .nest("/persisted", persisted)
        .nest("/signed", signed)
        .nest(
            "/plain",
            ChatEndpoint::new(Agent::new(plain, tools)).into_router(),
        )
        .nest(
            "/approval",
            ChatEndpoint::new(Agent::new(approval, guarded)).into_router(),
        )
        .nest_service("/restartable", forward)
        .route("/restart", axum::routing::post(restart))
        .nest(
            "/resumable",
            ChatEndpoint::new(Agent::new(resumable_model, slow))
                .resumable_streams(MemoryChunkLog::new())
                .into_router()
                .layer(on_reconnect),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web/check-chat.mjs");
    let output = tokio::task::spawn_blocking(move || {
        output_within(
            Command::new(node).arg(script).arg(base),
            Duration::from_secs(180),
            "web/check-chat.mjs to read both chats with the AI SDK client",
        )
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "node failed: {stderr}");
    let results: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)));

    // The conversation kept on the server: the client sent only its new
    // message, the model read the whole conversation, and a tampered
    // history was refused.
    let persisted = &results["persisted"];
    assert_eq!(
        persisted["finishes"],
        serde_json::json!([{"finishReason": "stop"}, {"finishReason": "stop"}]),
        "{persisted}"
    );
    let messages = persisted["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{persisted}");
    assert_eq!(
        messages[3]["parts"].as_array().unwrap().last().unwrap()["text"],
        "You are Ada."
    );
    let seen = persisted_seen.lock().unwrap().clone();
    assert_eq!(
        seen.last().unwrap(),
        &vec![
            toolstack::model::Message::user("I am Ada."),
            toolstack::model::Message::assistant("Hello, Ada."),
            toolstack::model::Message::user("Who am I?"),
        ]
    );
    assert_eq!(persisted["refused"]["status"], 409, "{persisted}");
    assert_eq!(persisted["refused"]["body"]["kind"], "history_mismatch");
    assert_eq!(seen.len(), 2, "the tampered request reached no model");

    // The stream, as `readUIMessageStream` assembled it.
    let stream = &results["stream"];
    assert_eq!(stream["errors"], serde_json::json!([]), "{stream}");
    let message = &stream["message"];
    assert_eq!(message["role"], "assistant");
    let parts = message["parts"].as_array().unwrap();
    let kinds: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "step-start",
            "text",
            "tool-count",
            "tool-fail",
            "data-progress",
            "step-start",
            "text"
        ],
        "{message}"
    );
    assert_eq!(parts[1]["text"], "Counting, then failing.");
    assert_eq!(parts[1]["state"], "done");
    let count = &parts[2];
    assert_eq!(count["state"], "output-available");
    assert_eq!(count["input"], serde_json::json!({"to": 3}));
    assert_eq!(count["output"], serde_json::json!([1, 2, 3]));
    assert_eq!(
        count.get("preliminary"),
        None,
        "the final output is not preliminary"
    );
    let fail = &parts[3];
    assert_eq!(fail["state"], "output-error");
    assert!(fail["errorText"]
        .as_str()
        .unwrap()
        .contains("the disk is on fire"));
    let progress = &parts[4];
    assert_eq!(progress["data"]["progress"], 3.0);
    assert_eq!(progress["data"]["total"], 3.0);
    assert_eq!(parts[6]["text"], "Counted to 3; the other tool failed.");
    // Each streamed item was shown as a preliminary output, in order.
    let preliminary: Vec<&Value> = stream["preliminary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["output"])
        .collect();
    assert_eq!(
        preliminary,
        [
            &serde_json::json!(1),
            &serde_json::json!(2),
            &serde_json::json!(3)
        ]
    );
    assert_eq!(message["metadata"]["stop"], "finished");

    // The approval, through `AbstractChat` (the engine of `useChat`).
    let approval = &results["approval"];
    assert_eq!(approval["error"], Value::Null, "{approval}");
    let requested = &approval["requested"]["parts"];
    let asked = requested
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-delete_rows")
        .unwrap();
    assert_eq!(asked["state"], "approval-requested");
    assert_eq!(asked["input"], serde_json::json!({"older_than": "2020"}));
    let finishes = approval["finishes"].as_array().unwrap();
    assert_eq!(finishes[0]["finishReason"], "tool-calls");
    assert_eq!(finishes[1]["finishReason"], "stop");
    let messages = approval["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        2,
        "the answer continued the same assistant message"
    );
    let parts = messages[1]["parts"].as_array().unwrap();
    let done = parts
        .iter()
        .find(|p| p["type"] == "tool-delete_rows")
        .unwrap();
    assert_eq!(done["state"], "output-available");
    assert_eq!(done["output"], "deleted 2 rows");
    assert_eq!(done["approval"]["approved"], true);
    assert_eq!(parts.last().unwrap()["text"], "Deleted.");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the approved call ran once");

    // The approval across a restart: the new endpoint found the run in the
    // file and ran the write once.
    let restart = &results["restart"];
    assert_eq!(restart["error"], Value::Null, "{restart}");
    let finishes = restart["finishes"].as_array().unwrap();
    assert_eq!(finishes[0]["finishReason"], "tool-calls", "{restart}");
    assert_eq!(finishes[1]["finishReason"], "stop", "{restart}");
    let parts = restart["messages"][1]["parts"].as_array().unwrap();
    let done = parts
        .iter()
        .find(|p| p["type"] == "tool-delete_rows")
        .unwrap();
    assert_eq!(done["state"], "output-available", "{restart}");
    assert_eq!(done["output"], "deleted 2 rows");
    assert_eq!(parts.last().unwrap()["text"], "Deleted.");
    assert_eq!(
        restart_runs.load(Ordering::SeqCst),
        1,
        "the write ran once, after the restart"
    );
    let _ = std::fs::remove_file(&runs_file);

    // Signed approvals through the SDK's client: the request's signature
    // travels back with the answer; an answer whose call was altered in
    // the client is refused, and only the genuine one runs.
    let signed = &results["signed"];
    let asked = signed["forged"]["requested"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-delete_rows")
        .unwrap();
    assert!(
        asked["approval"]["signature"]
            .as_str()
            .is_some_and(|s| s.starts_with("k1.")),
        "the client kept no signature: {asked}"
    );
    let forged = signed["forged"]["finishes"].as_array().unwrap();
    let refusal = forged[1]["error"].as_str().unwrap_or_default();
    assert!(
        refusal.contains("other arguments than the call that waits"),
        "{signed}"
    );
    let genuine = &signed["genuine"];
    assert_eq!(genuine["error"], Value::Null, "{genuine}");
    assert_eq!(genuine["finishes"][1]["finishReason"], "stop", "{genuine}");
    assert_eq!(
        signed_runs.load(Ordering::SeqCst),
        1,
        "only the genuine answer ran the write"
    );

    // The reloaded page: the whole answer, assembled by the SDK from the
    // replayed and the live chunks.
    let resume = &results["resume"];
    assert_eq!(resume["head"]["type"], "start", "{resume}");
    assert_eq!(resume["finish"]["finishReason"], "stop", "{resume}");
    assert_eq!(resume["status"], "ready", "{resume}");
    assert_eq!(
        resume["after"],
        Value::Null,
        "nothing in progress after the end: {resume}"
    );
    let messages = resume["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{resume}");
    let parts = messages[1]["parts"].as_array().unwrap();
    let texts: Vec<&str> = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Sleeping first.", "Slept well."], "{resume}");
    let slept = parts.iter().find(|p| p["type"] == "tool-slow").unwrap();
    assert_eq!(slept["state"], "output-available", "{resume}");
    assert_eq!(slept["output"], "slept");
}

/// The signatures `ApprovalKeys` makes, checked by the AI SDK's own
/// server-side verification (`web/check-signature.mjs`: `generateText`
/// with `experimental_toolApprovalSecret` runs an approved call only if
/// its signature matches): the same scheme, the same canonical JSON —
/// numbers as JavaScript writes them, keys in UTF-16 order.
#[test]
fn approval_signatures_verify_with_the_ai_sdks_own_check() {
    let Some(node) = node() else { return };
    let secret = "a secret of at least thirty-two bytes!";
    let keys = toolstack::approval::ApprovalKeys::new("k1", secret).unwrap();
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for (arguments, shown) in [
        (r#"{"older_than": 2020}"#, None),
        (
            r#"{"z": 0.1, "a": 1e21, "n": [1, 2.50, -0.0, 1.5e-7, 123456789012345678], "s": "x\ny\u0001\"é"}"#,
            None,
        ),
        // Keys where UTF-16 order and byte order differ.
        (r#"{"\uff01": 1, "😀": 2, "Z": 3}"#, None),
        // Signed for these arguments, shown with others: refused.
        (r#"{"older_than": 2020}"#, Some(r#"{"older_than": 1990}"#)),
    ] {
        let approval_id = format!("0123456789abcdef0123456789abcdef:call_{}", cases.len());
        let call_id = format!("call_{}", cases.len());
        let signed = keys.sign(&approval_id, &call_id, "delete_rows", arguments);
        let mac = signed.split_once('.').unwrap().1;
        let input: Value = serde_json::from_str(shown.unwrap_or(arguments)).unwrap();
        cases.push(serde_json::json!({
            "approvalId": approval_id, "toolCallId": call_id, "toolName": "delete_rows",
            "input": input, "signature": mac,
        }));
        expected.push(if shown.is_some() {
            "AI_InvalidToolApprovalSignatureError"
        } else {
            "ran"
        });
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web/check-signature.mjs");
    let argument = serde_json::json!({"secret": secret, "cases": cases}).to_string();
    let output = output_within(
        Command::new(node).arg(script).arg(argument),
        Duration::from_secs(60),
        "web/check-signature.mjs to verify the signatures with the AI SDK",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "node failed: {stderr}");
    let results: Vec<String> = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)));
    assert_eq!(results, expected);
}
