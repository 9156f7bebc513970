//! A durable run's events out of Restate (`RestateRuns::events`), against
//! a real `restate-server`: the run's handler, its model turns and its
//! tool calls' workflows write to one log, which a reader in any process
//! reads — each event once, though Restate replays the run after a
//! suspension and after a kill; a model turn cut by a kill is written
//! again as a new attempt, after a `TurnDiscarded` that voids the first.
//!
//! Without the server binary the tests say SKIPPED loudly (and fail when
//! `TOOLSTACK_REQUIRE_RESTATE` is set): see `restate_server.rs`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolstack::agent::restate::RestateRuns;
use toolstack::agent::run_events::{MemoryRunEvents, RunEvents};
use toolstack::agent::{Agent, AgentEvent};
use toolstack::approval::{ApprovalRequest, Decision};
use toolstack::model::{ChatRequest, FinishReason, ModelDelta, ScriptedModel, Turn};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};
use toolstack_layers::approval::ApprovalLayer;

use super::restate_runs::{call, Service};
use super::restate_server::start;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Path {
    #[allow(dead_code)]
    path: String,
}

/// Every event of `run` in `log`, waiting up to 30 s for its end.
async fn events(log: &MemoryRunEvents, run: &str) -> Vec<AgentEvent> {
    let (mut all, mut after) = (Vec::new(), None);
    let waited = Instant::now();
    loop {
        let page = log
            .read(run, after.as_ref(), 1_000, Duration::from_millis(200))
            .await
            .expect("the log reads");
        for (cursor, record) in page.events {
            all.push(record.into_event());
            after = Some(cursor);
        }
        if page.ended {
            return all;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the run's events end: {all:?}"
        );
    }
}

/// The text the deltas of `events` make, taking a `TurnDiscarded` as the
/// protocol does: the answer written so far is void.
fn text(events: &[AgentEvent]) -> String {
    let mut text = String::new();
    for event in events {
        match event {
            AgentEvent::TextDelta(delta) => text.push_str(delta),
            AgentEvent::TurnDiscarded { .. } => text.clear(),
            AgentEvent::ToolCall(_) => text.push('|'),
            _ => {}
        }
    }
    text
}

fn count(events: &[AgentEvent], what: impl Fn(&AgentEvent) -> bool) -> usize {
    events.iter().filter(|e| what(e)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_replayed_after_a_suspension_and_a_kill_writes_each_event_once() {
    let Some(restate) = start("restate_events_once") else {
        return;
    };
    let log = MemoryRunEvents::new();
    let model = ScriptedModel::new([
        Turn::new()
            .text("Deleting it.")
            .tool_call("delete", r#"{"path":"/tmp/x"}"#),
        Turn::new().text("Done."),
    ]);
    let deletes = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&deletes);
    let delete = tool::from_fn("delete", move |_: Path| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>("deleted") }
    })
    .with_annotations(ToolAnnotations::new().idempotent(false));
    let tools = Toolbox::new().layered(
        delete,
        ApprovalLayer::new(|_: &ApprovalRequest| async { Decision::deny("no approver") })
            .caller_decides(),
    );
    let agent = Agent::new(model, tools);
    let runs = || {
        RestateRuns::new(agent.clone())
            .suspend_after(Duration::from_secs(1))
            .events(log.clone())
    };
    let mut service = Service::serving(runs(), "127.0.0.1:0".parse().unwrap());
    let addr = service.addr;
    restate
        .register(&service.uri())
        .expect("the service registers");
    let input = json!({"messages": [{"role": "user", "content": "delete /tmp/x"}]});
    let (status, sent) = call(&restate, "/AgentRuns/events-1/run/send", Some(input)).await;
    assert!(status == 202 || status == 200, "{status} {sent}");

    // The person is asked through the log; the run suspends, its process
    // dies, and the answer is carried on by a new one: every execution
    // replays the run from its start.
    let waited = Instant::now();
    let asked = loop {
        let page = log
            .read("events-1", None, 1_000, Duration::from_millis(200))
            .await
            .expect("the log reads");
        let asked = page
            .events
            .iter()
            .find_map(|(_, record)| match record.clone().into_event() {
                AgentEvent::ApprovalRequested { call_id, .. } => Some(call_id),
                _ => None,
            });
        if let Some(asked) = asked {
            break asked;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the person is asked"
        );
    };
    assert_eq!(asked, "call_0_0");
    tokio::time::sleep(Duration::from_secs(3)).await;
    service.kill();
    let _service = Service::serving(runs(), addr);
    let allow = json!({"decision": "allow", "by": {"caller": "the user"}});
    let (status, bound) = call(
        &restate,
        "/AgentToolCalls/events-1:call_0_0/decide",
        Some(allow),
    )
    .await;
    assert_eq!(status, 200, "{bound}");

    let events = events(&log, "events-1").await;
    assert_eq!(text(&events), "Deleting it.|Done.", "{events:?}");
    for (what, n) in [
        (
            "ToolCall",
            count(&events, |e| matches!(e, AgentEvent::ToolCall(_))),
        ),
        (
            "ApprovalRequested",
            count(&events, |e| {
                matches!(e, AgentEvent::ApprovalRequested { .. })
            }),
        ),
        (
            "ApprovalDecided",
            count(&events, |e| matches!(e, AgentEvent::ApprovalDecided { .. })),
        ),
        (
            "ToolResult",
            count(&events, |e| matches!(e, AgentEvent::ToolResult { .. })),
        ),
        ("Done", count(&events, |e| matches!(e, AgentEvent::Done(_)))),
    ] {
        assert_eq!(n, 1, "{what} is written once: {events:?}");
    }
    assert!(
        matches!(events.last(), Some(AgentEvent::Done(_))),
        "{events:?}"
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_by_a_kill_is_voided_and_written_again() {
    let Some(restate) = start("restate_events_turn") else {
        return;
    };
    let log = MemoryRunEvents::new();
    // The model streams "Hello, " and, in the first process, hangs there.
    let hang = Arc::new(AtomicBool::new(true));
    let begun = Arc::new(AtomicUsize::new(0));
    let model = {
        let (hang, begun) = (Arc::clone(&hang), Arc::clone(&begun));
        tower::service_fn(move |_: ChatRequest| {
            begun.fetch_add(1, Ordering::SeqCst);
            let hang = hang.load(Ordering::SeqCst);
            let first = futures_util::stream::iter([Ok::<_, ToolError>(ModelDelta::Text(
                "Hello, ".into(),
            ))]);
            let rest = futures_util::stream::iter([
                Ok(ModelDelta::Text("world.".into())),
                Ok(ModelDelta::Finish(FinishReason::Stop)),
            ]);
            let rest: futures_util::stream::BoxStream<'static, _> = match hang {
                true => Box::pin(futures_util::stream::pending()),
                false => Box::pin(rest),
            };
            std::future::ready(Ok::<_, ToolError>(futures_util::StreamExt::chain(
                first, rest,
            )))
        })
    };
    let agent = Agent::new(model, Toolbox::new());
    let runs = || RestateRuns::new(agent.clone()).events(log.clone());
    let mut service = Service::serving(runs(), "127.0.0.1:0".parse().unwrap());
    let addr = service.addr;
    restate
        .register(&service.uri())
        .expect("the service registers");
    let input = json!({"messages": [{"role": "user", "content": "hi"}]});
    let (status, sent) = call(&restate, "/AgentRuns/events-2/run/send", Some(input)).await;
    assert!(status == 202 || status == 200, "{status} {sent}");

    // Killed mid-answer, once "Hello, " is in the log.
    let waited = Instant::now();
    loop {
        let page = log
            .read("events-2", None, 1_000, Duration::from_millis(100))
            .await
            .expect("the log reads");
        if !page.events.is_empty() {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the answer begins"
        );
    }
    service.kill();
    hang.store(false, Ordering::SeqCst);
    let _service = Service::serving(runs(), addr);

    let events = events(&log, "events-2").await;
    assert_eq!(
        begun.load(Ordering::SeqCst),
        2,
        "the cut turn is asked again"
    );
    assert_eq!(
        count(&events, |e| matches!(e, AgentEvent::TurnDiscarded { .. })),
        1,
        "{events:?}"
    );
    assert_eq!(text(&events), "Hello, world.", "{events:?}");
}
