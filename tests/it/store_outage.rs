//! A run store that goes away for a while: the agent tries each store call
//! again with backoff for a bounded time (`Agent::store_outage`), so a run
//! whose store came back carries on as if nothing happened, with every
//! record stored once — an append whose answer was lost after it landed is
//! not applied again; past the bound the run stops with a typed error
//! saying how long the store was away and that the run can be resumed; a
//! conflict with another writer is never retried away.
//!
//! The store is a fault-injecting wrapper around `MemoryStore` ([`Faulty`]);
//! the clock is paused, so outages last virtual seconds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use toolstack::agent::store::{
    Append, CallState, Head, Holder, MemoryStore, RunStatus, RunStore, StoreError, Stored, Version,
};
use toolstack::agent::{Agent, AgentDone, AgentEvent, Resume, StopReason};
use toolstack::model::{Message, ScriptedModel, Turn};
use toolstack::{tool, ErrorKind, ToolError, Toolbox};

/// What goes wrong, and when (appends counted from 1).
#[derive(Default)]
struct Faults {
    appends: usize,
    /// Fail this many calls (loads and appends) with `Unavailable`.
    fail_next: usize,
    /// At this append (before it is applied), the store goes down for the
    /// duration: every call fails until then.
    down_at: Option<(usize, Duration)>,
    down_until: Option<tokio::time::Instant>,
    /// This append is applied, and then answers `Unavailable` (a lost
    /// reply).
    lose_reply_at: Option<usize>,
    /// At this append, another writer appends first (the same number of
    /// records, its own head); `then_unavailable`: and the attempt answers
    /// `Unavailable`, so the agent retries into the conflict.
    foreign_at: Option<(usize, bool)>,
    /// Attempts after the foreign write.
    after_foreign: usize,
}

/// A `MemoryStore` that fails as [`Faults`] say.
#[derive(Clone)]
struct Faulty {
    inner: MemoryStore,
    faults: Arc<Mutex<Faults>>,
}

impl Faulty {
    fn new(faults: Faults) -> Self {
        Faulty {
            inner: MemoryStore::new(),
            faults: Arc::new(Mutex::new(faults)),
        }
    }

    /// Whether this call fails because the store is down.
    fn down(&self) -> bool {
        let mut faults = self.faults.lock().unwrap();
        if faults.fail_next > 0 {
            faults.fail_next -= 1;
            return true;
        }
        matches!(faults.down_until, Some(until) if tokio::time::Instant::now() < until)
    }
}

fn down() -> StoreError {
    StoreError::unavailable("the connection was reset (injected)")
}

impl RunStore for Faulty {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        if self.down() {
            return Box::pin(async { Err(down()) });
        }
        self.inner.load(run_id)
    }

    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Version, StoreError>> {
        Box::pin(async move {
            let (lose, foreign) = {
                let mut faults = self.faults.lock().unwrap();
                faults.appends += 1;
                let n = faults.appends;
                if let Some((at, lasts)) = faults.down_at {
                    if at == n {
                        faults.down_until = Some(tokio::time::Instant::now() + lasts);
                    }
                }
                if faults.foreign_at.is_some_and(|(at, _)| at < n) {
                    faults.after_foreign += 1;
                }
                (
                    faults.lose_reply_at == Some(n),
                    faults.foreign_at.filter(|(at, _)| *at == n),
                )
            };
            if let Some((_, then_unavailable)) = foreign {
                let head = Head {
                    status: RunStatus::Running,
                    holder: Some(Holder {
                        process: "another process".into(),
                        until_ms: append.head.saved_at_ms + 60_000,
                    }),
                    ..append.head.clone()
                };
                let head_bytes = head.to_bytes();
                let theirs = Append {
                    head: &head,
                    head_bytes: &head_bytes,
                    snapshot: None,
                    ..append
                };
                self.inner.append(theirs).await.expect("the other writer");
                if then_unavailable {
                    return Err(down());
                }
            }
            if self.down() {
                return Err(down());
            }
            let appended = self.inner.append(append).await;
            match lose {
                true => appended.and(Err(down())),
                false => appended,
            }
        })
    }

    fn waiting_count(&self) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.inner.waiting_count()
    }
    fn expire_waiting(&self, before_ms: u64) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.inner.expire_waiting(before_ms)
    }
    fn waiting(&self, limit: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.inner.waiting(limit)
    }
    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        if self.down() {
            return Box::pin(async { Err(down()) });
        }
        self.inner.delete(run_id)
    }
}

/// A model that calls `write` once and then answers; `write` counts its
/// runs.
fn agent(store: impl RunStore, writes: &Arc<AtomicUsize>) -> Agent<ScriptedModel> {
    agent_with(store, writes)
}

fn agent_with(store: impl RunStore, writes: &Arc<AtomicUsize>) -> Agent<ScriptedModel> {
    let model = ScriptedModel::new([
        Turn::new().tool_call("write", r#"{"line": "hello"}"#),
        Turn::new().text("Written."),
    ]);
    let writes = Arc::clone(writes);
    let write = tool::from_fn("write", move |_: serde_json::Value| {
        let writes = Arc::clone(&writes);
        async move {
            writes.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("written")
        }
    });
    Agent::new(model, Toolbox::new().tool(write)).store(store)
}

/// Runs to the end: the events, the run's id.
async fn run(agent: &Agent<ScriptedModel>) -> (Vec<AgentEvent>, String) {
    let stream = agent.run(vec![Message::user("write hello")]);
    let run_id = stream.run_id().to_owned();
    (stream.collect().await, run_id)
}

fn done(events: &[AgentEvent]) -> &AgentDone {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Done(done) => Some(done),
            _ => None,
        })
        .expect("a done event")
}

fn errors(events: &[AgentEvent]) -> Vec<&ToolError> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Error(err) => Some(err),
            _ => None,
        })
        .collect()
}

/// The stored run, and what a run that saw no outage stored.
async fn stored_and_baseline(store: &MemoryStore, run_id: &str) -> (Stored, Stored) {
    let stored = store
        .load(run_id)
        .await
        .unwrap()
        .expect("the run is stored");
    let clean = MemoryStore::new();
    let writes = Arc::new(AtomicUsize::new(0));
    let (events, clean_id) = run(&agent(clean.clone(), &writes)).await;
    assert_eq!(done(&events).stop, StopReason::Finished);
    let baseline = clean.load(&clean_id).await.unwrap().unwrap();
    (stored, baseline)
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_store_is_down_for_two_seconds_finishes_as_if_nothing_happened() {
    // Down from the third append (the call's start) for 2 s.
    for at in [1, 2, 3, 4] {
        let store = Faulty::new(Faults {
            down_at: Some((at, Duration::from_secs(2))),
            ..Faults::default()
        });
        let writes = Arc::new(AtomicUsize::new(0));
        let started = tokio::time::Instant::now();
        let (events, run_id) = run(&agent(store.clone(), &writes)).await;
        assert_eq!(done(&events).stop, StopReason::Finished, "down at {at}");
        assert!(errors(&events).is_empty(), "down at {at}: {events:?}");
        assert_eq!(writes.load(Ordering::SeqCst), 1, "down at {at}");
        assert!(started.elapsed() >= Duration::from_secs(2), "down at {at}");
        let (stored, baseline) = stored_and_baseline(&store.inner, &run_id).await;
        assert_eq!(stored.version, baseline.version, "down at {at}");
        assert_eq!(stored.records, baseline.records, "down at {at}");
        assert_eq!(
            stored.checkpoint.messages, baseline.checkpoint.messages,
            "down at {at}"
        );
        assert_eq!(stored.checkpoint.status, baseline.checkpoint.status);
    }
}

#[tokio::test(start_paused = true)]
async fn an_append_whose_reply_was_lost_is_not_applied_twice() {
    for at in [1, 2, 3, 4, 5] {
        let store = Faulty::new(Faults {
            lose_reply_at: Some(at),
            ..Faults::default()
        });
        let writes = Arc::new(AtomicUsize::new(0));
        let (events, run_id) = run(&agent(store.clone(), &writes)).await;
        assert!(errors(&events).is_empty(), "lost at {at}: {events:?}");
        assert_eq!(done(&events).stop, StopReason::Finished, "lost at {at}");
        assert_eq!(writes.load(Ordering::SeqCst), 1, "lost at {at}");
        let (stored, baseline) = stored_and_baseline(&store.inner, &run_id).await;
        // Each record once: as many as a run with no fault stored.
        assert_eq!(stored.version, baseline.version, "lost at {at}");
        assert_eq!(stored.records, baseline.records, "lost at {at}");
        assert_eq!(stored.checkpoint.messages, baseline.checkpoint.messages);
    }
}

#[tokio::test(start_paused = true)]
async fn an_outage_past_the_bound_stops_the_run_with_a_typed_error() {
    let store = Faulty::new(Faults {
        down_at: Some((3, Duration::from_secs(60))),
        ..Faults::default()
    });
    let writes = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &writes).store_outage(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let (events, _) = run(&agent).await;
    assert_eq!(done(&events).stop, StopReason::StoreFailed);
    // The call's start could not be stored: it did not run.
    assert_eq!(writes.load(Ordering::SeqCst), 0);
    let errors = errors(&events);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let err = errors[0];
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let message = err.message();
    assert!(message.contains("no answer for 5.0 s"), "{message}");
    assert!(message.contains("kept as it was last stored"), "{message}");
    assert!(
        message.contains("send the message or approval answer again once the store is back"),
        "{message}"
    );
    assert!(message.contains("injected"), "the last error: {message}");
    // Said once: the last error's words, not its "unavailable" again.
    assert_eq!(message.matches("unavailable").count(), 1, "{message}");
    // The bound, not a minute: retries stop at it.
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(5) && elapsed < Duration::from_secs(6),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_bound_is_clamped_below_the_lease() {
    let store = Faulty::new(Faults {
        down_at: Some((3, Duration::from_secs(600))),
        ..Faults::default()
    });
    let writes = Arc::new(AtomicUsize::new(0));
    // Asked for ten minutes with a 10 s lease: rides out 5 s at most.
    let agent = agent(store, &writes)
        .lease(Duration::from_secs(10))
        .store_outage(Duration::from_secs(600));
    let started = tokio::time::Instant::now();
    let (events, _) = run(&agent).await;
    assert_eq!(done(&events).stop, StopReason::StoreFailed);
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_conflict_with_another_writer_stays_a_conflict() {
    // Directly (never retried), and after an unavailable attempt (the
    // other writer's append at the same version is not taken for ours).
    for then_unavailable in [false, true] {
        let store = Faulty::new(Faults {
            foreign_at: Some((3, then_unavailable)),
            ..Faults::default()
        });
        let writes = Arc::new(AtomicUsize::new(0));
        let (events, _) = run(&agent(store.clone(), &writes)).await;
        assert_eq!(done(&events).stop, StopReason::StoreFailed);
        assert_eq!(writes.load(Ordering::SeqCst), 0);
        let errors = errors(&events);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].kind(), ErrorKind::Denied, "{}", errors[0]);
        assert!(
            errors[0].message().contains("another process"),
            "{}",
            errors[0]
        );
        let faults = store.faults.lock().unwrap();
        // The conflicted attempt, and (after the unavailable one) one retry.
        let expected = usize::from(then_unavailable);
        assert_eq!(faults.after_foreign, expected, "{then_unavailable}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_few_failed_calls_are_ridden_out() {
    let store = Faulty::new(Faults {
        fail_next: 3,
        ..Faults::default()
    });
    let writes = Arc::new(AtomicUsize::new(0));
    let (events, _) = run(&agent(store, &writes)).await;
    assert!(errors(&events).is_empty(), "{events:?}");
    assert_eq!(done(&events).stop, StopReason::Finished);
    assert_eq!(writes.load(Ordering::SeqCst), 1);
}

/// A real `redis-server` SIGKILLed while a call runs and restarted from
/// its append-only file (`appendfsync always`) 2 s later, on the same
/// port: the store's connection manager reconnects, the agent rides the
/// outage out, and the run finishes with its write run once.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_rides_out_a_redis_restart() {
    use std::process::{Child, Command, Stdio};
    use toolstack::agent::store::redis::RedisStore;

    // The shared helper says whether redis-server is there (and fails
    // when TOOLSTACK_REQUIRE_REDIS is set and it is not); this test needs
    // a server it can restart on the same port and directory.
    let Some(probe) = crate::redis_server::RedisServer::start("a_run_rides_out_a_redis_restart")
    else {
        return;
    };
    drop(probe);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = std::env::temp_dir().join(format!(
        "toolstack-store-outage-{}-{port}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("a directory");
    let start = {
        let dir = dir.clone();
        move || -> Child {
            Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir"])
                .arg(&dir)
                .args([
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server")
        }
    };
    let server = Arc::new(Mutex::new(Some(start())));
    let url = format!("redis://127.0.0.1:{port}/");
    let store = {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match RedisStore::connect(&url).await {
                Ok(store) => break store,
                Err(err) if std::time::Instant::now() > deadline => panic!("{err}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    let writes = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Turn::new().tool_call("write", r#"{"line": "hello"}"#),
        Turn::new().text("Written."),
    ]);
    let write = {
        let (writes, server) = (Arc::clone(&writes), Arc::clone(&server));
        tool::from_fn("write", move |_: serde_json::Value| {
            let (writes, server) = (Arc::clone(&writes), Arc::clone(&server));
            let start = start.clone();
            async move {
                writes.fetch_add(1, Ordering::SeqCst);
                // Redis dies while the call runs; it is back in 2 s.
                let mut child = server.lock().unwrap().take().expect("the server");
                let _ = child.kill();
                let _ = child.wait();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_secs(2));
                    *server.lock().unwrap() = Some(start());
                });
                Ok::<_, ToolError>("written")
            }
        })
    };
    let agent = Agent::new(model, Toolbox::new().tool(write)).store(store.clone());
    let started = std::time::Instant::now();
    let (events, run_id) = run(&agent).await;
    let lasted = started.elapsed();
    let stop = done(&events).stop;
    let stored = store.load(&run_id).await;
    if let Some(mut child) = server.lock().unwrap().take() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(errors(&events).is_empty(), "{events:?}");
    assert_eq!(stop, StopReason::Finished);
    assert_eq!(writes.load(Ordering::SeqCst), 1);
    assert!(lasted >= Duration::from_secs(2), "{lasted:?}");
    // Stored to its end, each record once (as a run with no outage).
    let stored = stored.expect("the run loads").expect("the run is stored");
    let clean = MemoryStore::new();
    let (_, clean_id) = run(&agent_with(clean.clone(), &Arc::new(AtomicUsize::new(0)))).await;
    let baseline = clean.load(&clean_id).await.unwrap().unwrap();
    assert_eq!(stored.version, baseline.version);
    assert_eq!(stored.checkpoint.status, baseline.checkpoint.status);
    assert_eq!(stored.checkpoint.messages, baseline.checkpoint.messages);
}

/// A Redis error that would come again — here a run's hash that is a
/// string (`WRONGTYPE` in the load's transaction) — is `Failed` at once:
/// not taken for an outage and tried again for `store_outage`.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_error_that_would_come_again_is_not_retried() {
    use toolstack::agent::store::redis::RedisStore;
    use toolstack::agent::ResumeError;

    let Some(server) = crate::redis_server::RedisServer::start(
        "a_redis_error_that_would_come_again_is_not_retried",
    ) else {
        return;
    };
    let store = RedisStore::new(server.patient_manager().await)
        .prefix("wrongtype:")
        .timeout(crate::redis_server::PATIENT_TIMEOUT);
    let mut connection = server.connection().await;
    let () = redis::cmd("SET")
        .arg("wrongtype:run:r1")
        .arg("not a hash")
        .query_async(&mut connection)
        .await
        .unwrap();
    let writes = Arc::new(AtomicUsize::new(0));
    // The default bound (15 s): a retried error would take it all.
    let agent = agent(store, &writes);
    let started = std::time::Instant::now();
    let err = match agent.resume("r1", Resume::new()).await {
        Ok(_) => panic!("a run whose hash is a string resumed"),
        Err(err) => err,
    };
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "retried: {:?}",
        started.elapsed()
    );
    match &err {
        ResumeError::Store(StoreError::Failed { why, .. }) => {
            assert!(why.contains("WRONGTYPE"), "{why}")
        }
        other => panic!("not Failed: {other}"),
    }
    assert_eq!(err.status().as_u16(), 500, "{err}");
}

/// The fields the runs' spans recorded, by name (the last value).
#[derive(Clone, Default)]
struct Recorded(Arc<Mutex<Vec<(String, i64)>>>);

impl Recorded {
    fn get(&self, name: &str) -> Option<i64> {
        let fields = self.0.lock().unwrap();
        fields
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}

impl tracing::field::Visit for Recorded {
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.0
            .lock()
            .unwrap()
            .push((field.name().to_owned(), value));
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.record_i64(field, i64::try_from(value).unwrap_or(i64::MAX));
    }
    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorded {
    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        values.record(&mut self.clone());
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        event.record(&mut self.clone());
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_runs_span_counts_the_retries_and_the_outage() {
    use tracing_subscriber::layer::SubscriberExt;
    for (down, retried) in [(Duration::ZERO, false), (Duration::from_secs(2), true)] {
        let recorded = Recorded::default();
        let subscriber = tracing_subscriber::registry().with(recorded.clone());
        let _default = tracing::subscriber::set_default(subscriber);
        let store = Faulty::new(Faults {
            down_at: Some((3, down)),
            ..Faults::default()
        });
        let writes = Arc::new(AtomicUsize::new(0));
        let (events, _) = run(&agent(store, &writes)).await;
        assert_eq!(done(&events).stop, StopReason::Finished);
        assert!(recorded.get("toolstack.agent.steps").is_some(), "the span");
        match retried {
            false => {
                assert_eq!(recorded.get("toolstack.store.retries"), None);
                assert_eq!(recorded.get("toolstack.store.outage_ms"), None);
            }
            true => {
                let retries = recorded.get("toolstack.store.retries").expect("retries");
                assert!(retries >= 3, "{retries}");
                let outage = recorded.get("toolstack.store.outage_ms").expect("outage");
                assert!((2000..3200).contains(&outage), "{outage}");
            }
        }
    }
}

/// The agent of another process sharing the store: the model only answers
/// (it never asks for `write` again), `write` counted with the first's.
fn other_process(store: impl RunStore, writes: &Arc<AtomicUsize>) -> Agent<ScriptedModel> {
    let writes = Arc::clone(writes);
    let write = tool::from_fn("write", move |_: serde_json::Value| {
        let writes = Arc::clone(&writes);
        async move {
            writes.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("written")
        }
    });
    let model = ScriptedModel::new([Turn::new().text("Written, maybe.")]);
    Agent::new(model, Toolbox::new().tool(write))
        .store(store)
        .process_id("another process")
}

#[tokio::test(start_paused = true)]
async fn a_run_given_up_on_is_released_once_the_store_is_back_and_another_process_finishes_it() {
    // Down at the fourth append (the call's result, after `write` ran)
    // for 20 s; the run gives up after 5 s.
    let store = Faulty::new(Faults {
        down_at: Some((4, Duration::from_secs(20))),
        ..Faults::default()
    });
    let writes = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &writes).store_outage(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let (events, run_id) = run(&agent).await;
    assert_eq!(done(&events).stop, StopReason::StoreFailed);
    assert_eq!(writes.load(Ordering::SeqCst), 1);
    // Stored as it was before the outage: running, held by the first
    // process (its lease, 60 s by default, has long to go).
    let held = store.inner.load(&run_id).await.unwrap().unwrap();
    assert_eq!(held.checkpoint.status, RunStatus::Running);
    assert!(held.checkpoint.holder.is_some());

    // The store is back at 20 s; within a few (virtual) seconds the run
    // is held by nobody — long before the lease would have passed.
    tokio::time::sleep_until(started + Duration::from_secs(23)).await;
    let released = store.inner.load(&run_id).await.unwrap().unwrap();
    assert_eq!(released.checkpoint.status, RunStatus::Running);
    assert_eq!(released.checkpoint.holder, None, "released");
    assert_eq!(released.version, held.version.after(1));

    // Another process takes it over at once and finishes it: the write,
    // whose result was never stored, "may have run" and is not run again.
    let other = other_process(store.clone(), &writes);
    let stream = other
        .resume(&run_id, Resume::new())
        .await
        .expect("the released run is taken over");
    let events: Vec<AgentEvent> = stream.collect().await;
    assert_eq!(done(&events).stop, StopReason::Finished, "{events:?}");
    let result = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult { name, result, .. } if name == "write" => Some(result),
            _ => None,
        })
        .expect("the interrupted call's result");
    assert_eq!(
        result.error.as_ref().map(|err| err.kind()),
        Some(ErrorKind::Interrupted)
    );
    assert_eq!(writes.load(Ordering::SeqCst), 1, "not run twice");
    let finished = store.inner.load(&run_id).await.unwrap().unwrap();
    assert!(matches!(
        finished.checkpoint.status,
        RunStatus::Done {
            stop: StopReason::Finished
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_run_another_process_moved_is_not_released() {
    // The run gives up; meanwhile (before the store answers the release)
    // another process appends: the release meets the fence and is dropped.
    let store = Faulty::new(Faults {
        down_at: Some((4, Duration::from_secs(20))),
        ..Faults::default()
    });
    let writes = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &writes).store_outage(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let (events, run_id) = run(&agent).await;
    assert_eq!(done(&events).stop, StopReason::StoreFailed);
    let held = store.inner.load(&run_id).await.unwrap().unwrap();
    // Another writer (straight to the inner store) holds it at the next version.
    let head = Head {
        holder: Some(Holder {
            process: "another process".into(),
            until_ms: u64::MAX,
        }),
        format: toolstack::agent::store::JOURNAL_FORMAT,
        status: RunStatus::Running,
        saved_at_ms: held.checkpoint.saved_at_ms + 1,
    };
    let head_bytes = head.to_bytes();
    let records = [toolstack::agent::store::Record::Status {
        status: RunStatus::Running,
    }
    .to_bytes()];
    store
        .inner
        .append(Append {
            run_id: &run_id,
            expected: held.version,
            head: &head,
            head_bytes: &head_bytes,
            records: &records,
            snapshot: None,
        })
        .await
        .unwrap();
    tokio::time::sleep_until(started + Duration::from_secs(30)).await;
    let after = store.inner.load(&run_id).await.unwrap().unwrap();
    assert_eq!(after.version, held.version.after(1));
    assert_eq!(after.checkpoint.holder, head.holder, "left to its holder");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_release_is_counted_for_the_operator() {
    use tracing_subscriber::layer::SubscriberExt;
    let recorded = Recorded::default();
    let subscriber = tracing_subscriber::registry().with(recorded.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let store = Faulty::new(Faults {
        down_at: Some((4, Duration::from_secs(20))),
        ..Faults::default()
    });
    // Two runs, each calling `write` (whose result the store does not
    // take), on one agent.
    let model = ScriptedModel::new([
        Turn::new().tool_call("write", r#"{"line": "hello"}"#),
        Turn::new().tool_call("write", r#"{"line": "again"}"#),
    ]);
    let write = tool::from_fn("write", |_: serde_json::Value| async {
        Ok::<_, ToolError>("written")
    });
    let agent = Agent::new(model, Toolbox::new().tool(write))
        .store(store.clone())
        .store_outage(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let (events, _) = run(&agent).await;
    assert_eq!(done(&events).stop, StopReason::StoreFailed);
    assert_eq!(
        recorded.get("toolstack.store.released_runs"),
        None,
        "not yet"
    );
    tokio::time::sleep_until(started + Duration::from_secs(23)).await;
    assert_eq!(recorded.get("toolstack.store.released_runs"), Some(1));
    assert_eq!(
        recorded.get("monotonic_counter.toolstack.store.runs_released"),
        Some(1)
    );
    // A second run given up on by the same agent counts on.
    store.faults.lock().unwrap().appends = 0;
    let again = tokio::time::Instant::now();
    let (events, _) = run(&agent).await;
    assert_eq!(done(&events).stop, StopReason::StoreFailed);
    tokio::time::sleep_until(again + Duration::from_secs(23)).await;
    assert_eq!(recorded.get("toolstack.store.released_runs"), Some(2));
}

/// A run whose last append — its end — stays unavailable past the bound
/// has ended all the same (its client was told how): once the store is
/// back, its end is stored as it was, so the run is `done`, not left
/// `running` for nobody to finish.
#[tokio::test(start_paused = true)]
async fn a_run_whose_end_could_not_be_stored_is_stored_done_once_the_store_is_back() {
    let writes = Arc::new(AtomicUsize::new(0));
    let clean = Faulty::new(Faults::default());
    run(&agent(clean.clone(), &writes)).await;
    let last = clean.faults.lock().unwrap().appends;

    let store = Faulty::new(Faults {
        down_at: Some((last, Duration::from_secs(20))),
        ..Faults::default()
    });
    let (events, run_id) = run(&agent(store.clone(), &writes)).await;
    assert_eq!(done(&events).stop, StopReason::Finished, "{events:?}");
    let stored = store.inner.load(&run_id).await.unwrap().unwrap();
    assert_eq!(
        stored.checkpoint.status,
        RunStatus::Running,
        "not stored yet"
    );

    tokio::time::sleep(Duration::from_secs(30)).await;
    let stored = store.inner.load(&run_id).await.unwrap().unwrap();
    assert_eq!(
        stored.checkpoint.status,
        RunStatus::Done {
            stop: StopReason::Finished
        }
    );
    assert_eq!(stored.checkpoint.holder, None);
    let (_, baseline) = stored_and_baseline(&store.inner, &run_id).await;
    assert_eq!(stored.checkpoint.messages, baseline.checkpoint.messages);
}

/// The call's start is stored but its answer lost with the store, which
/// then stays down past the bound: the run refuses the call (its start
/// could not be recorded), so the tool never ran — and once the store is
/// back, the release puts the call back to planned, so the process that
/// takes the run over runs it, once, where `started` would have read
/// "may have run".
#[tokio::test(start_paused = true)]
async fn a_call_whose_start_landed_but_was_given_up_on_runs_once_after_the_release() {
    // The third append (the call's start) lands and answers `Unavailable`;
    // its retry finds the store down for 20 s.
    let store = Faulty::new(Faults {
        lose_reply_at: Some(3),
        down_at: Some((4, Duration::from_secs(20))),
        ..Faults::default()
    });
    let writes = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &writes).store_outage(Duration::from_secs(5));
    let (events, run_id) = run(&agent).await;
    assert_eq!(done(&events).stop, StopReason::StoreFailed, "{events:?}");
    assert_eq!(writes.load(Ordering::SeqCst), 0, "refused: not run");
    let stored = store.inner.load(&run_id).await.unwrap().unwrap();
    assert_eq!(
        stored.checkpoint.step[0].state,
        CallState::Started,
        "landed"
    );

    tokio::time::sleep(Duration::from_secs(30)).await;
    let released = store.inner.load(&run_id).await.unwrap().unwrap();
    assert_eq!(released.checkpoint.holder, None, "released");
    assert_eq!(released.checkpoint.step[0].state, CallState::Planned);

    let other = other_process(store.clone(), &writes);
    let events: Vec<AgentEvent> = other
        .resume(&run_id, Resume::new())
        .await
        .expect("the released run is taken over")
        .collect()
        .await;
    assert_eq!(done(&events).stop, StopReason::Finished, "{events:?}");
    assert_eq!(writes.load(Ordering::SeqCst), 1, "run once");
}

/// Deleting a session rides out a store that fails for a moment, as a
/// run's own calls do.
#[tokio::test(start_paused = true)]
async fn a_session_deleted_while_the_store_fails_for_a_moment_is_deleted() {
    let store = Faulty::new(Faults::default());
    let writes = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &writes);
    let session = agent.session("s1");
    let events: Vec<AgentEvent> = session
        .run(Message::user("write hello"))
        .await
        .expect("a run of the session")
        .collect()
        .await;
    assert_eq!(done(&events).stop, StopReason::Finished);
    store.faults.lock().unwrap().fail_next = 3;
    assert!(session.delete().await.expect("ridden out"), "it was stored");
    assert!(store.inner.load("s1").await.unwrap().is_none(), "forgotten");
}
