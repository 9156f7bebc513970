//! The approval layer: allow, deny (a typed error the model reads),
//! modify (re-validated); which calls ask; a human-long wait that a
//! timeout below does not count; the decision on the span; the agent's
//! events; a dropped call.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};
use toolstack::agent::{Agent, AgentEvent};
use toolstack::approval::{ApprovalRequest, Decision};
use toolstack::model::{Message, ScriptedModel, Turn};
use toolstack::{
    tool, BoxTool, ErrorKind, ToolAnnotations, ToolError, ToolRequest, ToolResult, Toolbox,
};
use toolstack_layers::approval::ApprovalLayer;
use toolstack_layers::timeout::TimeoutLayer;
use tower::{ServiceBuilder, ServiceExt};

#[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
#[schemars(crate = "toolstack::schemars")]
struct Sql {
    sql: String,
}

/// `execute_sql`, destructive, counting its runs; and `read_rows`, read-only.
fn tools(runs: Arc<AtomicUsize>) -> (BoxTool, BoxTool) {
    let writes = runs.clone();
    let execute = tool::from_fn("execute_sql", move |q: Sql| {
        writes.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>(format!("ran {}", q.sql)) }
    })
    .with_annotations(ToolAnnotations {
        destructive_hint: Some(true),
        ..Default::default()
    });
    let read = tool::from_fn("read_rows", move |q: Sql| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>(format!("read {}", q.sql)) }
    })
    .with_annotations(ToolAnnotations::new().read_only());
    (BoxTool::new(execute), BoxTool::new(read))
}

async fn call(toolbox: &Toolbox, name: &str, args: &str) -> ToolResult {
    match toolbox
        .clone()
        .oneshot(ToolRequest::new(name.to_owned(), args.to_owned()))
        .await
    {
        Ok(stream) => ToolResult::collect(stream).await,
        Err(err) => ToolResult::from_error(err),
    }
}

/// An approver that answers from a script and records what it was asked.
fn scripted(
    answers: Vec<Decision>,
    asked: Arc<Mutex<Vec<ApprovalRequest>>>,
) -> impl Fn(&ApprovalRequest) -> std::future::Ready<Decision> + Send + Sync + 'static {
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    move |request: &ApprovalRequest| {
        asked.lock().unwrap().push(request.clone());
        std::future::ready(answers.lock().unwrap().next().unwrap_or(Decision::Allow))
    }
}

#[tokio::test]
async fn allow_deny_and_modify() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (execute, _) = tools(runs.clone());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let approver = scripted(
        vec![
            Decision::Allow,
            Decision::deny("writes need a ticket; ask the user for one"),
            Decision::modify(r#"{"sql": "DELETE FROM t WHERE id = 1"}"#),
            Decision::modify(r#"{"sql": 42}"#),
        ],
        asked.clone(),
    );
    let toolbox =
        Toolbox::new().layered(execute, ApprovalLayer::new(approver).decided_by("the user"));
    let args = r#"{"sql": "DELETE FROM t"}"#;
    assert_eq!(
        call(&toolbox, "execute_sql", args).await.into_text(),
        "ran DELETE FROM t"
    );
    let denied = call(&toolbox, "execute_sql", args).await.error.unwrap();
    assert_eq!(denied.kind(), ErrorKind::Denied);
    assert_eq!(
        denied.message(),
        "the call of `execute_sql` was denied by the user: writes need a ticket; ask the user for one"
    );
    assert_eq!(
        call(&toolbox, "execute_sql", args).await.into_text(),
        "ran DELETE FROM t WHERE id = 1"
    );
    // Modified arguments are validated like any others.
    let bad = call(&toolbox, "execute_sql", args).await.error.unwrap();
    assert_eq!(bad.kind(), ErrorKind::InvalidArguments);
    assert!(bad.message().contains("sql"), "{bad}");
    // The denied and the malformed calls never ran.
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 4);
    assert_eq!(asked[0].tool, "execute_sql");
    assert_eq!(asked[0].arguments, args);
}

#[tokio::test]
async fn read_only_tools_do_not_ask_by_default_and_a_rule_picks_what_does() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (execute, read) = tools(runs.clone());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let deny_all = scripted(vec![Decision::deny("no"); 10], asked.clone());
    let toolbox = Toolbox::new()
        .boxed(execute)
        .boxed(read)
        .layer(ApprovalLayer::new(deny_all));
    assert_eq!(
        call(&toolbox, "read_rows", r#"{"sql": "x"}"#)
            .await
            .into_text(),
        "read x"
    );
    assert!(
        call(&toolbox, "execute_sql", r#"{"sql": "x"}"#)
            .await
            .is_error
    );
    assert_eq!(asked.lock().unwrap().len(), 1);

    // A rule over the arguments: only SQL that writes asks.
    let (execute, _) = tools(runs.clone());
    let writes = |request: &ToolRequest| {
        let sql = request.arguments().to_uppercase();
        ["INSERT", "UPDATE", "DELETE", "DROP"]
            .iter()
            .any(|w| sql.contains(w))
    };
    let toolbox = Toolbox::new().layered(
        execute,
        ApprovalLayer::new(scripted(vec![Decision::deny("no"); 10], asked.clone())).when(writes),
    );
    assert_eq!(
        call(&toolbox, "execute_sql", r#"{"sql": "SELECT 1"}"#)
            .await
            .into_text(),
        "ran SELECT 1"
    );
    assert!(
        call(&toolbox, "execute_sql", r#"{"sql": "drop table t"}"#)
            .await
            .is_error
    );
    assert_eq!(asked.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_human_long_wait_is_not_the_tools_time_under_a_timeout_below() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (execute, _) = tools(runs.clone());
    // The person answers after ten minutes.
    let slow = |_: &ApprovalRequest| async {
        tokio::time::sleep(Duration::from_secs(600)).await;
        Decision::Allow
    };
    let stack = ServiceBuilder::new()
        .layer(ApprovalLayer::new(slow))
        .layer(TimeoutLayer::new().deadline(Duration::from_secs(30)));
    let toolbox = Toolbox::new().layered(execute, stack);
    let started = tokio::time::Instant::now();
    let result = call(&toolbox, "execute_sql", r#"{"sql": "UPDATE t"}"#).await;
    assert_eq!(result.into_text(), "ran UPDATE t");
    assert!(started.elapsed() >= Duration::from_secs(600));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_call_that_waits_for_approval_never_runs_the_tool() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (execute, _) = tools(runs.clone());
    let (answer_tx, answer_rx) = oneshot::channel::<Decision>();
    let answer_rx = Arc::new(Mutex::new(Some(answer_rx)));
    let waiting = move |_: &ApprovalRequest| {
        let rx = answer_rx.lock().unwrap().take();
        async move {
            match rx {
                Some(rx) => rx.await.unwrap_or_else(|_| Decision::deny("gone")),
                None => Decision::deny("asked twice"),
            }
        }
    };
    let toolbox = Toolbox::new().layered(execute, ApprovalLayer::new(waiting));
    let pending = toolbox
        .clone()
        .oneshot(ToolRequest::new("execute_sql", r#"{"sql": "x"}"#));
    let timed_out = tokio::time::timeout(Duration::from_millis(20), pending).await;
    assert!(timed_out.is_err(), "still waiting for the person");
    // The person answers after the call was dropped: nothing runs.
    let _ = answer_tx.send(Decision::Allow);
    tokio::task::yield_now().await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn under_the_agent_a_ui_sees_the_request_and_the_decision_and_the_model_reads_the_denial() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (execute, _) = tools(runs.clone());
    // A UI answers over a channel: the agent's events show the request,
    // the "person" denies it.
    let (ask_tx, mut ask_rx) =
        mpsc::unbounded_channel::<(ApprovalRequest, oneshot::Sender<Decision>)>();
    let approver = move |request: &ApprovalRequest| {
        let (tx, rx) = oneshot::channel();
        let _ = ask_tx.send((request.clone(), tx));
        async move { rx.await.unwrap_or_else(|_| Decision::deny("no answer")) }
    };
    tokio::spawn(async move {
        while let Some((_request, answer)) = ask_rx.recv().await {
            let _ = answer.send(Decision::deny("the user said no"));
        }
    });
    let toolbox =
        Toolbox::new().layered(execute, ApprovalLayer::new(approver).decided_by("the user"));
    let model = ScriptedModel::new([
        Turn::new().tool_call("execute_sql", r#"{"sql": "DROP TABLE users"}"#),
        Turn::new().text("I will not drop it, then."),
    ]);
    let events: Vec<AgentEvent> = Agent::new(model, toolbox)
        .run(vec![Message::user("drop users")])
        .collect()
        .await;
    let requested = events
        .iter()
        .position(|e| {
            matches!(e, AgentEvent::ApprovalRequested { name, arguments, .. }
            if name == "execute_sql" && arguments.contains("DROP"))
        })
        .expect("ApprovalRequested");
    let decided = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ApprovalDecided { decision: Decision::Deny { .. }, by, .. } if by.name() == "the user"))
        .expect("ApprovalDecided");
    let result = events
        .iter()
        .position(|e| {
            matches!(e, AgentEvent::ToolResult { result, .. }
            if result.error.as_ref().is_some_and(|e| e.kind() == ErrorKind::Denied))
        })
        .expect("a denied result");
    assert!(requested < decided && decided < result);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(matches!(events.last(), Some(AgentEvent::Done(_))));
}

#[tokio::test]
async fn the_decision_is_recorded_on_the_calls_span() {
    use support::capture::Capture;
    let runs = Arc::new(AtomicUsize::new(0));
    let (execute, _) = tools(runs);
    let capture = Capture::default();
    let _guard = capture.install();
    let stack = ServiceBuilder::new().stream_trace().layer(
        ApprovalLayer::new(|_: &ApprovalRequest| async { Decision::deny("no") })
            .decided_by("policy"),
    );
    let toolbox = Toolbox::new().layered(execute, stack);
    assert!(
        call(&toolbox, "execute_sql", r#"{"sql": "x"}"#)
            .await
            .is_error
    );
    let span = capture.tool_span();
    let field = |name: &str| span.fields.get(name).map(String::as_str);
    assert_eq!(field("gen_ai.tool.call.decision"), Some("deny"));
    assert_eq!(field("gen_ai.tool.call.decided_by"), Some("policy"));
}

use toolstack_layers::ServiceBuilderExt;

#[tokio::test]
async fn a_binding_decision_is_obeyed_before_the_policy_and_nobody_is_asked() {
    use toolstack::approval::{BindingDecision, DecidedBy, Policy};
    let runs = Arc::new(AtomicUsize::new(0));
    let (execute, read) = tools(runs.clone());
    let asked = Arc::new(AtomicUsize::new(0));
    let approver = {
        let asked = Arc::clone(&asked);
        move |_: &ApprovalRequest| {
            asked.fetch_add(1, Ordering::SeqCst);
            async { Decision::Allow }
        }
    };
    // Its approver and its policy would allow everything; the read-only
    // tool would not even be asked about.
    let layer = ApprovalLayer::new(approver).policy(|request: &ToolRequest| {
        match request
            .info()
            .is_some_and(|i| i.annotations().read_only_hint == Some(true))
        {
            true => Policy::Pass,
            false => Policy::allow("writes are fine"),
        }
    });
    let toolbox = Toolbox::new()
        .layered(execute, layer.clone())
        .layered(read, layer);
    let bound = |name: &str, id: &str, decision: Decision| {
        let mut request =
            ToolRequest::new(name.to_owned(), r#"{"sql": "x"}"#).with_id(id.to_owned());
        let binding = BindingDecision::new("c1", decision, DecidedBy::caller("the user"));
        request.extensions_mut().insert(binding);
        request
    };
    for name in ["execute_sql", "read_rows"] {
        let denied = toolbox
            .clone()
            .oneshot(bound(name, "c1", Decision::deny("the person said no")))
            .await
            .unwrap_err();
        assert_eq!(denied.kind(), ErrorKind::Denied);
        assert_eq!(
            denied.message(),
            format!("the call of `{name}` was denied by the user: the person said no")
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Modify binds too: the tool runs with the person's arguments.
    let stream = toolbox
        .clone()
        .oneshot(bound(
            "execute_sql",
            "c1",
            Decision::modify(r#"{"sql": "y"}"#),
        ))
        .await
        .unwrap();
    assert_eq!(ToolResult::collect(stream).await.text(), "ran y");
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    // A binding for another call is not this call's: the policy decides.
    let stream = toolbox
        .clone()
        .oneshot(bound("execute_sql", "c2", Decision::deny("not for you")))
        .await
        .unwrap();
    assert_eq!(ToolResult::collect(stream).await.text(), "ran x");
}
