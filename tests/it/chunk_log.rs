//! Resumable streams: the chunk logs' contract (memory, SQLite, a real
//! Redis), and the chat endpoint serving a reconnecting client — the
//! response from its first chunk, then live, to its end — after the first
//! client went away mid-answer.

#[cfg(feature = "redis")]
use crate::redis_server;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use toolstack::agent::Agent;
use toolstack::http::ai_sdk::{ChatEndpoint, ChunkLog, MemoryChunkLog};
use toolstack::model::{ScriptedModel, Turn};
use toolstack::{tool, ToolError, Toolbox};

async fn contract<L: ChunkLog>(log: &L) {
    let none = Duration::ZERO;
    assert_eq!(log.active("chat").await.unwrap(), None);
    let gone = log.read("nothing", 0, none).await.unwrap();
    assert!(gone.ended && gone.chunks.is_empty(), "{gone:?}");

    log.open("chat", "s1").await.unwrap();
    assert_eq!(log.active("chat").await.unwrap().as_deref(), Some("s1"));
    for (i, chunk) in ["a", "b", "c"].into_iter().enumerate() {
        log.append("s1", i, chunk).await.unwrap();
    }
    // A chunk written twice (a retried append) is kept once.
    log.append("s1", 2, "c").await.unwrap();
    let read = log.read("s1", 0, none).await.unwrap();
    assert_eq!(read.chunks, ["a", "b", "c"]);
    assert!(!read.ended);
    assert_eq!(log.read("s1", 2, none).await.unwrap().chunks, ["c"]);
    let nothing_yet = log.read("s1", 3, Duration::from_millis(50)).await.unwrap();
    assert!(nothing_yet.chunks.is_empty() && !nothing_yet.ended);

    // A reader waiting gets the next chunk when it comes.
    let (waited, ()) = futures_util::join!(log.read("s1", 3, Duration::from_secs(20)), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        log.append("s1", 3, "d").await.unwrap();
    });
    assert_eq!(waited.unwrap().chunks, ["d"]);

    // A newer response of the chat replaces it; closing the old one then
    // leaves the new one the chat's.
    log.open("chat", "s2").await.unwrap();
    log.close("chat", "s1").await.unwrap();
    assert_eq!(log.active("chat").await.unwrap().as_deref(), Some("s2"));
    let ended = log.read("s1", 4, none).await.unwrap();
    assert!(ended.ended && ended.chunks.is_empty(), "{ended:?}");
    let all = log.read("s1", 0, none).await.unwrap();
    assert_eq!((all.chunks.len(), all.ended), (4, true));
    log.close("chat", "s2").await.unwrap();
    assert_eq!(log.active("chat").await.unwrap(), None);
}

#[tokio::test]
async fn the_memory_log_keeps_the_contract() {
    contract(&MemoryChunkLog::new()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_log_keeps_the_contract() {
    let store = toolstack::agent::store::sqlite::SqliteStore::in_memory().unwrap();
    contract(&store).await;
}

/// The run store makes only the runs' tables: the log makes its own at
/// its first use, and reads the chunks a file kept in them when the store
/// made them (before the log owned its tables).
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_log_makes_its_own_tables_and_reads_an_older_files() {
    use rusqlite::Connection;
    use toolstack::agent::store::sqlite::SqliteStore;

    let dir = std::env::temp_dir().join(format!("toolstack-chunk-tables-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_tables = |path: &std::path::Path| -> Vec<String> {
        let connection = Connection::open(path).unwrap();
        let mut query = connection
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table'
                   AND name IN ('toolstack_streams', 'toolstack_chunks', 'toolstack_chats')
                   ORDER BY name",
            )
            .unwrap();
        let names = query.query_map([], |row| row.get(0)).unwrap();
        names.collect::<Result<_, _>>().unwrap()
    };

    let fresh = dir.join("fresh.db");
    let store = SqliteStore::open(&fresh).unwrap();
    assert!(log_tables(&fresh).is_empty());
    assert_eq!(store.active("chat").await.unwrap(), None);
    assert_eq!(
        log_tables(&fresh),
        ["toolstack_chats", "toolstack_chunks", "toolstack_streams"]
    );
    contract(&store).await;

    // The log's tables as the store made them, with a response in
    // progress.
    let older = dir.join("older.db");
    Connection::open(&older)
        .unwrap()
        .execute_batch(
            "CREATE TABLE toolstack_streams (
                 stream_id TEXT PRIMARY KEY, ended INTEGER NOT NULL, touched_ms INTEGER NOT NULL);
             CREATE TABLE toolstack_chunks (
                 stream_id TEXT NOT NULL, idx INTEGER NOT NULL, chunk TEXT NOT NULL,
                 PRIMARY KEY (stream_id, idx));
             CREATE TABLE toolstack_chats (chat_id TEXT PRIMARY KEY, stream_id TEXT NOT NULL);
             INSERT INTO toolstack_streams VALUES ('s1', 0, 1);
             INSERT INTO toolstack_chunks VALUES ('s1', 0, 'a'), ('s1', 1, 'b');
             INSERT INTO toolstack_chats VALUES ('chat', 's1');",
        )
        .unwrap();
    let store = SqliteStore::open(&older).unwrap();
    assert_eq!(store.active("chat").await.unwrap().as_deref(), Some("s1"));
    let read = store.read("s1", 0, Duration::ZERO).await.unwrap();
    assert_eq!(read.chunks, ["a", "b"]);
    assert!(!read.ended);
    store.close("chat", "s1").await.unwrap();
    assert!(store.read("s1", 2, Duration::ZERO).await.unwrap().ended);
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_redis_log_keeps_the_contract() {
    let Some(server) = redis_server::RedisServer::start("the_redis_log_keeps_the_contract") else {
        return;
    };
    let store = toolstack::agent::store::redis::RedisStore::new(server.patient_manager().await)
        .timeout(redis_server::PATIENT_TIMEOUT);
    contract(&store).await;
}

/// A tool that waits until the test lets it finish, so the answer is in
/// progress when the first client leaves and the second one comes.
fn slow(runs: Arc<AtomicUsize>, gate: Arc<tokio::sync::Semaphore>) -> Toolbox {
    Toolbox::new().tool(tool::from_fn("slow", move |_: Value| {
        let (runs, gate) = (Arc::clone(&runs), Arc::clone(&gate));
        async move {
            let _open = gate.acquire().await.expect("the gate stays");
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("slept")
        }
    }))
}

fn chunks_of(text: &str) -> Vec<Value> {
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    text.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

async fn endpoint_serves_a_reconnecting_client<L: ChunkLog + Clone>(log: L) {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Turn::new().text("Sleeping first.").tool_call("slow", "{}"),
        Turn::new().text("Slept well."),
    ]);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let app = ChatEndpoint::new(Agent::new(
        model,
        slow(Arc::clone(&runs), Arc::clone(&gate)),
    ))
    .resumable_streams(log)
    .into_router();
    let body = json!({"id": "chat-7", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "sleep"}]}
    ]});
    // Nothing in progress yet.
    let idle = app
        .clone()
        .oneshot(Request::get("/chat-7/stream").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(idle.status(), StatusCode::NO_CONTENT);

    // The first client reads a little and goes away (a reloaded page).
    let response = app
        .clone()
        .oneshot(
            Request::post("/")
                .body(Body::from(body.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    let mut first = response.into_body().into_data_stream();
    let head = first.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&head).contains(r#""type":"start""#));
    drop(first);

    // The reconnecting client gets the whole answer: the same chunks a
    // connection that stayed would have had, from the first.
    let again = app
        .clone()
        .oneshot(Request::get("/chat-7/stream").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.headers()["x-vercel-ai-ui-message-stream"], "v1");
    // The tool may finish now: the rest comes live.
    gate.add_permits(1);
    let text = tokio::time::timeout(
        Duration::from_secs(30),
        axum::body::to_bytes(again.into_body(), usize::MAX),
    )
    .await
    .expect("the replay ended")
    .unwrap();
    let chunks = chunks_of(&String::from_utf8_lossy(&text));
    let types: Vec<&str> = chunks.iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"start"), "{types:?}");
    assert_eq!(types.last(), Some(&"finish"), "{types:?}");
    assert!(types.contains(&"tool-output-available"), "{types:?}");
    let text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Sleeping first.Slept well.");
    // The run went on without its client, once.
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // It ended: nothing is in progress any more.
    let after = app
        .oneshot(Request::get("/chat-7/stream").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(after.status(), StatusCode::NO_CONTENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_client_gets_the_whole_answer_from_memory() {
    endpoint_serves_a_reconnecting_client(MemoryChunkLog::new()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_client_gets_the_whole_answer_from_sqlite() {
    endpoint_serves_a_reconnecting_client(
        toolstack::agent::store::sqlite::SqliteStore::in_memory().unwrap(),
    )
    .await;
}

#[tokio::test]
async fn without_a_log_there_is_nothing_to_reconnect_to() {
    let app = ChatEndpoint::new(Agent::new(ScriptedModel::new([]), Toolbox::new())).into_router();
    let response = app
        .oneshot(Request::get("/c/stream").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
}
