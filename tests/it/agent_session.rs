//! Sessions: a conversation kept by id in the run store, each run going
//! on from the last one's (compacted) history — in memory, SQLite and
//! Redis alike; two runs of one session at once are refused, never
//! interleaved; a session waits with a run waiting for approval; it
//! expires, can be deleted, and every refusal is typed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use toolstack::agent::compaction::{check, ElideToolResults};
use toolstack::agent::store::{MemoryStore, RunStore};
use toolstack::agent::{Agent, AgentEvent, AgentStream, Resume, SessionError, StopReason};
use toolstack::approval::{ApprovalRequest, CallerApprover, Decision};
use toolstack::model::{ChatRequest, Message, ModelService, ScriptedModel, Turn};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};
use toolstack_layers::approval::ApprovalLayer;

async fn to_the_end(run: AgentStream) -> Vec<AgentEvent> {
    tokio::time::timeout(Duration::from_secs(60), run.collect::<Vec<_>>())
        .await
        .expect("the run did not end")
}

fn stop(events: &[AgentEvent]) -> StopReason {
    match events.last() {
        Some(AgentEvent::Done(done)) => done.stop,
        other => panic!("no Done: {other:?}"),
    }
}

/// The model, recording the history of every request it is sent.
fn recording(model: ScriptedModel, seen: Arc<Mutex<Vec<Vec<Message>>>>) -> impl ModelService {
    tower::ServiceBuilder::new()
        .map_request(move |request: ChatRequest| {
            seen.lock().unwrap().push(request.messages.to_vec());
            request
        })
        .service(model)
}

fn read_tool() -> Toolbox {
    let read = tool::from_fn("read", |_: serde_json::Value| async {
        Ok::<_, ToolError>("the file's text")
    })
    .with_annotations(ToolAnnotations::new().read_only());
    Toolbox::new().tool(read)
}

/// Two runs of one session, the second seeing the first's history.
async fn a_session_goes_on_across_runs(store: impl RunStore) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new([
        Turn::new().tool_call("read", "{}"),
        Turn::new().text("Read it."),
        Turn::new().text("You asked me to read."),
    ]);
    let agent = Agent::new(recording(model, Arc::clone(&seen)), read_tool()).store(store);
    let id = format!("s-{}", toolstack_id());
    let session = agent.session(id.as_str());
    let first = session
        .run_with(
            vec![
                Message::system("Be brief."),
                Message::user("Read the file."),
            ],
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(first.run_id(), id);
    assert_eq!(stop(&to_the_end(first).await), StopReason::Finished);
    let second = session.run(Message::user("What did I ask?")).await.unwrap();
    let events = to_the_end(second).await;
    assert_eq!(stop(&events), StopReason::Finished);
    // The second run's request: the whole first run, then the question.
    let last = seen.lock().unwrap().last().unwrap().clone();
    assert_eq!(last.len(), 6, "{last:?}");
    assert_eq!(last[0], Message::system("Be brief."));
    assert_eq!(last[5], Message::user("What did I ask?"));
    check(&last).unwrap();
    let history = session.history().await.unwrap();
    assert_eq!(history.len(), 7);
    // Each run counts its own steps.
    let Some(AgentEvent::Done(done)) = events.last() else {
        unreachable!()
    };
    assert_eq!(done.steps, 1);
    assert!(session.delete().await.unwrap());
    assert!(matches!(
        session.history().await,
        Err(SessionError::NotFound { .. })
    ));
}

fn toolstack_id() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[tokio::test]
async fn a_session_goes_on_across_runs_in_memory() {
    a_session_goes_on_across_runs(MemoryStore::new()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_goes_on_across_runs_in_sqlite() {
    let dir = std::env::temp_dir().join(format!("toolstack-session-{}", toolstack_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = toolstack::agent::store::sqlite::SqliteStore::open(dir.join("runs.db")).unwrap();
    a_session_goes_on_across_runs(store).await;
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(feature = "redis")]
use crate::redis_server;

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_goes_on_across_runs_in_redis() {
    let Some(server) = redis_server::RedisServer::start("sessions") else {
        return;
    };
    let store = toolstack::agent::store::redis::RedisStore::connect(&server.url())
        .await
        .unwrap();
    a_session_goes_on_across_runs(store).await;
}

/// A model that never answers: a run that stays in its first step.
fn hanging() -> impl ModelService {
    tower::service_fn(|_: ChatRequest| std::future::pending::<Result<ScriptedStream, ToolError>>())
}
type ScriptedStream = <ScriptedModel as tower::Service<ChatRequest>>::Response;

#[tokio::test]
async fn two_runs_of_one_session_at_once_are_refused_in_this_process_and_another() {
    let store = MemoryStore::new();
    let agent = Agent::new(hanging(), Toolbox::new()).store(store.clone());
    let session = agent.session("busy");
    let mut first = session.run(Message::user("one")).await.unwrap();
    // The first run is going on (its model call pending).
    assert!(
        tokio::time::timeout(Duration::from_millis(50), first.next())
            .await
            .is_err()
    );
    match session.run(Message::user("two")).await {
        Err(err @ SessionError::Busy { .. }) => {
            assert_eq!(err.status(), 409);
            assert!(err.to_string().contains("has a run going on"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    // Another process sharing the store: held, its lease not passed.
    let other = Agent::new(hanging(), Toolbox::new())
        .store(store.clone())
        .process_id("other");
    match other.session("busy").run(Message::user("three")).await {
        Err(SessionError::Busy {
            process: Some(p), ..
        }) => assert_ne!(p, "other"),
        other => panic!("{other:?}"),
    }
    // Dropped between steps, the session is this process's to go on with.
    drop(first);
    let again = session.run(Message::user("two")).await.unwrap();
    drop(again);
    let history = session.history().await.unwrap();
    assert_eq!(
        history,
        vec![Message::user("one"), Message::user("two")],
        "the second message follows the first, nothing interleaved"
    );
}

#[tokio::test]
async fn a_session_waits_with_a_run_waiting_for_approval_and_goes_on_once_resumed() {
    let delete = tool::from_fn("delete", |_: serde_json::Value| async {
        Ok::<_, ToolError>("deleted")
    })
    .with_annotations(ToolAnnotations::new().destructive(true));
    let tools = Toolbox::new().layered(
        delete,
        ApprovalLayer::new(|_: &ApprovalRequest| async { Decision::deny("no approver") })
            .caller_decides(),
    );
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("Deleted."),
        Turn::new().text("Done before."),
    ]);
    let agent = Agent::new(model, tools).store(MemoryStore::new());
    let session = agent.session("approve");
    let mut extensions = http::Extensions::new();
    extensions.insert(CallerApprover::new("the user", |_: &ApprovalRequest| {
        std::future::pending::<Decision>()
    }));
    let mut run = session
        .run_with(vec![Message::user("delete it")], extensions)
        .await
        .unwrap();
    while let Some(event) = run.next().await {
        if matches!(event, AgentEvent::AwaitingApproval { .. }) {
            break;
        }
    }
    run.suspend().await.unwrap();
    match session.run(Message::user("and?")).await {
        Err(err @ SessionError::Waiting { .. }) => {
            assert!(err.to_string().contains("resume that run first"), "{err}")
        }
        other => panic!("{other:?}"),
    }
    let resumed = agent
        .resume("approve", Resume::new().otherwise(Decision::Allow))
        .await
        .unwrap();
    assert_eq!(stop(&to_the_end(resumed).await), StopReason::Finished);
    let next = session.run(Message::user("and?")).await.unwrap();
    assert_eq!(stop(&to_the_end(next).await), StopReason::Finished);
    let history = session.history().await.unwrap();
    check(&history).unwrap();
    assert_eq!(history.last(), Some(&Message::assistant("Done before.")));
}

#[tokio::test]
async fn a_session_continues_its_compacted_history() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut script: Vec<Turn> = (0..6)
        .map(|_| Turn::new().tool_call("read", "{}"))
        .collect();
    script.push(Turn::new().text("Read."));
    script.push(Turn::new().text("Still here."));
    let big = tool::from_fn("read", |_: serde_json::Value| async {
        Ok::<_, ToolError>("x".repeat(8 * 1024))
    });
    let agent = Agent::new(
        recording(ScriptedModel::new(script), Arc::clone(&seen)),
        Toolbox::new().tool(big),
    )
    .store(MemoryStore::new())
    .compaction(6_000, ElideToolResults::new(1));
    let session = agent.session("long");
    let first = to_the_end(session.run(Message::user("read")).await.unwrap()).await;
    assert!(first
        .iter()
        .any(|e| matches!(e, AgentEvent::Compacted { .. })));
    let stored = session.history().await.unwrap();
    let second = session.run(Message::user("again?")).await.unwrap();
    assert_eq!(stop(&to_the_end(second).await), StopReason::Finished);
    // The second run's request is the compacted history, then the question.
    let seen = seen.lock().unwrap();
    let last = seen.last().unwrap();
    assert_eq!(&last[..stored.len()], &stored[..]);
    assert_eq!(last.len(), stored.len() + 1);
    assert!(
        toolstack::agent::compaction::estimate_tokens(last) < 6_000,
        "the second run starts under the budget"
    );
}

#[tokio::test]
async fn a_session_refuses_bad_input_with_typed_errors() {
    let model = || ScriptedModel::new([Turn::new().text("ok"), Turn::new().text("ok")]);
    // No store.
    let bare = Agent::new(model(), Toolbox::new());
    assert!(matches!(
        bare.session("a").run(Message::user("hi")).await,
        Err(SessionError::NoStore)
    ));
    let store = MemoryStore::new();
    let agent = Agent::new(model(), Toolbox::new()).store(store.clone());
    // Bad ids.
    for id in [String::new(), "x".repeat(257), "a\nb".to_owned()] {
        match agent.session(id.as_str()).run(Message::user("hi")).await {
            Err(err @ SessionError::InvalidId { .. }) => assert_eq!(err.status(), 400),
            other => panic!("{id:?}: {other:?}"),
        }
    }
    // An unknown id, when only existing sessions are run.
    match agent
        .session("nobody")
        .existing()
        .run(Message::user("hi"))
        .await
    {
        Err(err @ SessionError::NotFound { .. }) => {
            assert_eq!(err.status(), 404);
            assert!(err.to_string().contains("no session nobody"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    // Over its bound: refused before anything is stored.
    let bounded = agent.session("bounded").max_messages(2);
    to_the_end(bounded.run(Message::user("one")).await.unwrap()).await;
    match bounded.run(Message::user("two")).await {
        Err(
            err @ SessionError::TooLong {
                messages: 3,
                max: 2,
                ..
            },
        ) => {
            assert_eq!(err.status(), 413);
            assert!(err.to_string().contains("over its bound of 2"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(bounded.history().await.unwrap().len(), 2);
    // Expired with the store's time for finished runs.
    assert!(store.backdate("bounded", Duration::from_secs(2 * 24 * 3600)));
    assert!(matches!(
        bounded.existing().run(Message::user("three")).await,
        Err(SessionError::NotFound { .. })
    ));
    // A store that keeps only the heads of finished runs has no history.
    let heads = Agent::new(model(), Toolbox::new()).store(MemoryStore::new().finished_heads_only());
    let forgetful = heads.session("f");
    to_the_end(forgetful.run(Message::user("one")).await.unwrap()).await;
    assert!(matches!(
        forgetful.run(Message::user("two")).await,
        Err(SessionError::NotKept { .. })
    ));
}

/// A store whose loads wait for each other once read: two runs read the
/// same version before either appends.
struct Together {
    inner: MemoryStore,
    loads: Arc<tokio::sync::Barrier>,
}

impl RunStore for Together {
    fn load<'a>(
        &'a self,
        run_id: &'a str,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<Option<toolstack::agent::store::Stored>, toolstack::agent::store::StoreError>,
    > {
        Box::pin(async move {
            let loaded = self.inner.load(run_id).await;
            self.loads.wait().await;
            loaded
        })
    }
    fn append<'a>(
        &'a self,
        append: toolstack::agent::store::Append<'a>,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<toolstack::agent::store::Version, toolstack::agent::store::StoreError>,
    > {
        self.inner.append(append)
    }
    fn waiting_count(
        &self,
    ) -> futures_util::future::BoxFuture<'_, Result<usize, toolstack::agent::store::StoreError>>
    {
        self.inner.waiting_count()
    }
    fn expire_waiting(
        &self,
        before: u64,
    ) -> futures_util::future::BoxFuture<'_, Result<usize, toolstack::agent::store::StoreError>>
    {
        self.inner.expire_waiting(before)
    }
    fn waiting(
        &self,
        limit: usize,
    ) -> futures_util::future::BoxFuture<'_, Result<Vec<String>, toolstack::agent::store::StoreError>>
    {
        self.inner.waiting(limit)
    }
    fn delete<'a>(
        &'a self,
        run_id: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<bool, toolstack::agent::store::StoreError>>
    {
        self.inner.delete(run_id)
    }
}

#[tokio::test]
async fn two_processes_taking_one_session_at_the_same_moment_one_is_refused() {
    let inner = MemoryStore::new();
    let first = Agent::new(
        ScriptedModel::new([Turn::new().text("one"), Turn::new().text("two")]),
        Toolbox::new(),
    )
    .store(inner.clone());
    // The session exists, its last run ended.
    to_the_end(first.session("s").run(Message::user("hi")).await.unwrap()).await;
    let loads = Arc::new(tokio::sync::Barrier::new(2));
    let process = |name: &'static str| {
        Agent::new(ScriptedModel::new([Turn::new().text(name)]), Toolbox::new())
            .store(Together {
                inner: inner.clone(),
                loads: Arc::clone(&loads),
            })
            .process_id(name)
    };
    let (a, b) = (process("a"), process("b"));
    let (sa, sb) = (a.session("s"), b.session("s"));
    let (ra, rb) = tokio::join!(
        sa.run(Message::user("from a")),
        sb.run(Message::user("from b"))
    );
    let (won, lost) = match (ra, rb) {
        (Ok(won), Err(lost)) | (Err(lost), Ok(won)) => (won, lost),
        (a, b) => panic!("both or neither: {a:?} {b:?}"),
    };
    assert!(
        matches!(&lost, SessionError::Busy { process: None, .. }),
        "{lost:?}"
    );
    assert!(
        lost.to_string()
            .contains("taken by another run at the same moment"),
        "{lost}"
    );
    to_the_end(won).await;
    let history = first.session("s").history().await.unwrap();
    assert_eq!(
        history.len(),
        4,
        "one run's message and answer, not both: {history:?}"
    );
}
