//! A run's tool calls on Restate (`toolstack::agent::restate`), against a
//! real `restate-server`: the calls of one step run at once; a call a
//! person is asked about waits on a durable promise, suspended — its
//! service process can die while it waits, and the answer, given while
//! no process serves the run and kept across a restart of the server
//! itself, is carried on by a new one —; the first decision binds; the
//! runs waiting are counted, and a call that finds no room is denied
//! before anyone is asked; nobody answering in time denies the call.
//!
//! Without the server binary the tests say SKIPPED loudly (and fail when
//! `TOOLSTACK_REQUIRE_RESTATE` is set): see `restate_server.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolstack::agent::restate::RestateRuns;
use toolstack::agent::Agent;
use toolstack::approval::{ApprovalRequest, Decision};
use toolstack::model::{ScriptedModel, Turn};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};
use toolstack_demo::restate_server::RestateProcess;
use toolstack_layers::approval::ApprovalLayer;

use super::restate_runs::{call, Service};
use super::restate_server::start;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Path {
    #[allow(dead_code)]
    path: String,
}

/// A loopback address with a free port.
fn free() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// The tool `delete` (not idempotent), which counts its runs, behind an
/// approval layer whose own approver denies: only the person can allow it.
fn guarded(deletes: &Arc<AtomicUsize>) -> Toolbox {
    let deletes = Arc::clone(deletes);
    let delete = tool::from_fn("delete", move |_: Path| {
        deletes.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>("deleted") }
    })
    .with_annotations(ToolAnnotations::new().idempotent(false));
    Toolbox::new().layered(
        delete,
        ApprovalLayer::new(|_: &ApprovalRequest| async { Decision::deny("no approver") })
            .caller_decides(),
    )
}

/// A run that deletes once, then says `done`.
fn deleting() -> ScriptedModel {
    ScriptedModel::new([
        Turn::new().tool_call("delete", r#"{"path":"/tmp/x"}"#),
        Turn::new().text("done"),
    ])
}

/// What the call `key` (`{run}:{call}`) asks the person, once it does.
async fn asked(restate: &RestateProcess, key: &str) -> Value {
    let waited = Instant::now();
    loop {
        let (status, asked) = call(
            restate,
            &format!("/AgentToolCalls/{key}/asked"),
            Some(json!(null)),
        )
        .await;
        if status == 200 && !asked.is_null() {
            return asked;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the call {key} asks the person: {status} {asked}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The status of the `run` invocations of `service` keyed `key`, by the
/// admin API's SQL.
async fn statuses(restate: &RestateProcess, service: &str, key: &str) -> Vec<String> {
    let query = format!(
        "SELECT status FROM sys_invocation WHERE target_service_name = '{service}' AND target_service_key = '{key}' AND target_handler_name = 'run'"
    );
    let response = reqwest::Client::new()
        .post(format!("{}/query", restate.admin_url()))
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .body(json!({ "query": query }).to_string())
        .send()
        .await
        .expect("the admin API answers");
    let text = response.text().await.expect("the rows");
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    body["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("rows: {body}"))
        .iter()
        .filter_map(|row| row["status"].as_str().map(str::to_owned))
        .collect()
}

/// Waits until the `run` of `service` keyed `key` is suspended.
async fn suspended(restate: &RestateProcess, service: &str, key: &str) {
    let waited = Instant::now();
    loop {
        let now = statuses(restate, service, key).await;
        if !now.is_empty() && now.iter().all(|status| status == "suspended") {
            return;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "{service}/{key} suspends while it waits: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The run's answer, once it ends.
async fn output(restate: &RestateProcess, run: &str) -> Value {
    let (status, output) = call(
        restate,
        &format!("/restate/workflow/AgentRuns/{run}/attach"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{output}");
    output
}

/// The tool results of a run's answer, in order.
fn results(output: &Value) -> Vec<String> {
    output["messages"]
        .as_array()
        .expect("the messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_of_a_step_run_at_once() {
    let Some(restate) = start("restate_calls_at_once") else {
        return;
    };
    let model = ScriptedModel::new([
        Turn::new()
            .tool_call("meet", r#"{"path":"a"}"#)
            .tool_call("meet", r#"{"path":"b"}"#),
        Turn::new().text("done"),
    ]);
    // Each call waits, up to 10 s, for the other to have started: run one
    // after the other, each would give up alone.
    let arrived = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&arrived);
    let meet = tool::from_fn("meet", move |_: Path| {
        let arrived = Arc::clone(&counted);
        async move {
            arrived.fetch_add(1, Ordering::SeqCst);
            let waited = Instant::now();
            while arrived.load(Ordering::SeqCst) < 2 {
                if waited.elapsed() > Duration::from_secs(10) {
                    return Ok::<_, ToolError>("alone");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok("together")
        }
    })
    .with_annotations(ToolAnnotations::new().idempotent(true));
    let service = Service::start(Agent::new(model, Toolbox::new().tool(meet)), free());
    restate
        .register(&service.uri())
        .expect("the service registers");
    let input = json!({"messages": [{"role": "user", "content": "meet"}]});
    let (status, output) = call(&restate, "/AgentRuns/meet-1/run", Some(input)).await;
    assert_eq!(status, 200, "{output}");
    assert_eq!(results(&output), ["together", "together"], "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_call_suspends_and_its_first_decision_binds() {
    let Some(restate) = start("restate_approval_binds") else {
        return;
    };
    let deletes = Arc::new(AtomicUsize::new(0));
    // One script for every process: a restarted one goes on where the
    // killed one was.
    let model = deleting();
    let runs = || {
        RestateRuns::new(Agent::new(model.clone(), guarded(&deletes)))
            .suspend_after(Duration::from_secs(1))
    };
    let mut service = Service::serving(runs(), free());
    let addr = service.addr;
    restate
        .register(&service.uri())
        .expect("the service registers");
    let input = json!({"messages": [{"role": "user", "content": "delete /tmp/x"}]});
    let (status, sent) = call(&restate, "/AgentRuns/approve-1/run/send", Some(input)).await;
    assert!(status == 202 || status == 200, "{status} {sent}");

    let key = "approve-1:call_0_0";
    let request = asked(&restate, key).await;
    assert_eq!(request["tool"], "delete", "{request}");
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        0,
        "not run before the answer"
    );
    // No process holds the run nor the call while they wait: both are
    // suspended, and the service can die.
    suspended(&restate, "AgentToolCalls", key).await;
    suspended(&restate, "AgentRuns", "approve-1").await;
    service.kill();
    let _service = Service::serving(runs(), addr);

    let allow = json!({"decision": "allow", "by": {"caller": "the user"}});
    let (status, bound) = call(
        &restate,
        &format!("/AgentToolCalls/{key}/decide"),
        Some(allow),
    )
    .await;
    assert_eq!(status, 200, "{bound}");
    assert_eq!(bound["decision"], "allow", "{bound}");
    // A second answer changes nothing, and is told the decision.
    let deny = json!({"decision": {"deny": {"reason": "changed my mind"}}, "by": {"caller": "someone else"}});
    let (status, bound) = call(
        &restate,
        &format!("/AgentToolCalls/{key}/decide"),
        Some(deny),
    )
    .await;
    assert_eq!(status, 200, "{bound}");
    assert_eq!(
        bound["decision"], "allow",
        "the first decision binds: {bound}"
    );

    let output = output(&restate, "approve-1").await;
    assert_eq!(output["text"], "done", "{output}");
    assert_eq!(results(&output), ["deleted"], "{output}");
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        1,
        "run once, after the answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_given_while_no_process_serves_survives_a_restart_of_restate() {
    let Some(mut restate) = start("restate_approval_restart") else {
        return;
    };
    let deletes = Arc::new(AtomicUsize::new(0));
    // One script for every process: a restarted one goes on where the
    // killed one was.
    let model = deleting();
    let runs = || {
        RestateRuns::new(Agent::new(model.clone(), guarded(&deletes)))
            .suspend_after(Duration::from_secs(1))
    };
    let mut service = Service::serving(runs(), free());
    let addr = service.addr;
    restate
        .register(&service.uri())
        .expect("the service registers");
    let input = json!({"messages": [{"role": "user", "content": "delete /tmp/x"}]});
    let (status, sent) = call(&restate, "/AgentRuns/restart-1/run/send", Some(input)).await;
    assert!(status == 202 || status == 200, "{status} {sent}");
    let key = "restart-1:call_0_0";
    asked(&restate, key).await;
    suspended(&restate, "AgentToolCalls", key).await;
    service.kill();

    // Answered while no process serves the run (sent: Restate keeps the
    // answer until a process takes it); then the server itself is killed
    // and restarted on its data directory.
    let deny =
        json!({"decision": {"deny": {"reason": "not that file"}}, "by": {"caller": "the user"}});
    let path = format!("/AgentToolCalls/{key}/decide/send");
    let (status, sent) = call(&restate, &path, Some(deny)).await;
    assert!(status == 202 || status == 200, "{status} {sent}");
    restate.kill();
    restate
        .restart()
        .expect("restate-server restarts on its data directory");
    let _service = Service::serving(runs(), addr);

    let output = output(&restate, "restart-1").await;
    assert_eq!(output["text"], "done", "{output}");
    let results = results(&output);
    assert_eq!(results.len(), 1, "{output}");
    assert!(
        results[0].contains("denied by the user: not that file"),
        "the model reads the denial: {results:?}"
    );
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        0,
        "a denied call never runs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_room_a_call_is_denied_before_asking_and_nobody_answering_denies_it() {
    let Some(restate) = start("restate_approval_room") else {
        return;
    };
    let deletes = Arc::new(AtomicUsize::new(0));
    // One script for both runs: the first takes turn 0 and waits; the
    // second takes turn 1 (its call `call_1_0`), then turn 2; the first
    // ends with turn 3.
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", r#"{"path":"/tmp/x"}"#),
        Turn::new().tool_call("delete", r#"{"path":"/tmp/y"}"#),
        Turn::new().text("done"),
        Turn::new().text("done"),
    ]);
    let runs = RestateRuns::new(Agent::new(model, guarded(&deletes)))
        .max_waiting_runs(1)
        .approval_timeout(Duration::from_secs(3));
    let service = Service::serving(runs, free());
    restate
        .register(&service.uri())
        .expect("the service registers");
    let input = json!({"messages": [{"role": "user", "content": "delete /tmp/x"}]});
    let (status, _) = call(&restate, "/AgentRuns/room-1/run/send", Some(input.clone())).await;
    assert!(status == 202 || status == 200);
    asked(&restate, "room-1:call_0_0").await;
    let (_, count) = call(&restate, "/AgentWaiting/runs/count", Some(json!(null))).await;
    assert_eq!(count, 1, "one run waits");

    // The second run finds no room: denied at once, never asked.
    let (status, denied) = call(&restate, "/AgentRuns/room-2/run", Some(input)).await;
    assert_eq!(status, 200, "{denied}");
    let second = results(&denied);
    assert_eq!(second.len(), 1, "{denied}");
    assert!(
        second[0].contains("1 runs already wait for a person's approval"),
        "the model reads why: {second:?}"
    );

    // Nobody answers the first: denied after its timeout, and a late
    // answer is told so.
    let (_, never) = call(
        &restate,
        "/AgentToolCalls/room-2:call_1_0/asked",
        Some(json!(null)),
    )
    .await;
    assert!(never.is_null(), "the person is never asked: {never}");
    let first = output(&restate, "room-1").await;
    let results = results(&first);
    assert!(
        results[0].contains("nobody answered within 3 s"),
        "{results:?}"
    );
    let allow = json!({"decision": "allow", "by": {"caller": "the user"}});
    let (status, bound) = call(
        &restate,
        "/AgentToolCalls/room-1:call_0_0/decide",
        Some(allow),
    )
    .await;
    assert_eq!(status, 200, "{bound}");
    assert!(
        bound["decision"]["deny"].is_object(),
        "the timeout binds: {bound}"
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    // The seat is given back.
    let waited = Instant::now();
    loop {
        let (_, count) = call(&restate, "/AgentWaiting/runs/count", Some(json!(null))).await;
        if count == 0 {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the seat comes back: {count}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
