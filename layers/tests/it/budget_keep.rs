//! The budget keeping the whole output of a call it cuts: the notice with
//! the handle, reading the rest back with `read_tool_result` (the omitted
//! part, the whole output, in pages), the stores' contract (memory, and
//! SQLite with its feature; Redis in `redis_budget_keep.rs`), expiry,
//! bounds, bad input, and a store that fails, hangs or panics never
//! failing the call.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{stream, StreamExt};
use support::capture::Capture;
use support::output_store::{call, contract, next_args, read_all, rows, toolbox};
use toolstack::{tool, ErrorKind, ToolError, ToolOutput, ToolRequest};
use toolstack_layers::budget::{
    BudgetLayer, Chunk, Kept, MemoryOutputStore, OutputStore, OutputStoreError, WholeOutput,
    MAX_PAGE_BYTES, STORE_TIMEOUT,
};
use tower::{ServiceBuilder, ServiceExt};

const HOUR: Duration = Duration::from_secs(3600);

fn memory() -> MemoryOutputStore {
    MemoryOutputStore::new(16 << 20, HOUR)
}

#[tokio::test]
async fn the_memory_store_keeps_its_contract() {
    contract(memory().max_output_bytes(4096), 4096).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_sqlite_store_keeps_its_contract() {
    use toolstack_layers::budget::SqliteOutputStore;
    let dir = std::env::temp_dir().join(format!("toolstack-kept-{}", toolstack::id::new_token()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = SqliteOutputStore::open(dir.join("kept.db"), HOUR)
        .unwrap()
        .max_output_bytes(4096);
    contract(store.clone(), 4096).await;
    // Another store on the same file reads what this one kept.
    let handle = toolstack::id::new_token();
    store
        .put(&handle, WholeOutput::new("shared".into(), 6))
        .await
        .unwrap();
    let other = SqliteOutputStore::open(dir.join("kept.db"), HOUR).unwrap();
    let chunk = other.read(&handle, 0, 100).await.unwrap().unwrap();
    assert_eq!(chunk.bytes, b"shared");
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_sqlite_row_past_its_time_to_live_is_not_read() {
    use toolstack_layers::budget::SqliteOutputStore;
    // A time to live of zero: expired as soon as it is kept.
    let store = SqliteOutputStore::in_memory(Duration::ZERO).unwrap();
    let handle = toolstack::id::new_token();
    store
        .put(&handle, WholeOutput::new("gone".into(), 4))
        .await
        .unwrap();
    assert!(store.read(&handle, 0, 10).await.unwrap().is_none());
    // A live one next to it is read.
    let store = SqliteOutputStore::in_memory(HOUR).unwrap();
    store
        .put(&handle, WholeOutput::new("here".into(), 4))
        .await
        .unwrap();
    assert!(store.read(&handle, 0, 10).await.unwrap().is_some());
}

#[tokio::test]
async fn the_model_reads_the_head_a_notice_with_the_handle_and_the_tail() {
    let store = memory();
    let tools = toolbox(
        rows(100),
        BudgetLayer::new().max_items(10).keep(store.clone()),
        store.clone(),
    );
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    assert_eq!(read.len(), 11);
    assert_eq!(
        read[..8],
        (1..=8).map(|i| format!("row {i}")).collect::<Vec<_>>()[..]
    );
    assert_eq!(read[9..], ["row 99", "row 100"]);
    let (handle, offset) = next_args(&read[8]).unwrap();
    assert_eq!(
        read[8],
        format!(
            "[… 90 items (539 bytes) omitted here: the output was over its budget of 10 items. \
             The whole output (691 bytes) is kept for 1h: to read the omitted part (bytes 48 to \
             677), call read_tool_result with {{\"handle\":\"{handle}\",\"offset\":48}} (up to \
             8,000 bytes a call; each answer says where the next page starts).]"
        )
    );
    assert_eq!(offset, 48);
    assert_eq!(store.len(), 1);

    // The omitted part, exactly: rows 9 to 98 (and the newline before row 99).
    let args = format!(r#"{{"handle":"{handle}","offset":48,"limit":629}}"#);
    let page = call(&tools, "read_tool_result", args).await.unwrap();
    let middle: Vec<String> = (9..=98).map(|i| format!("row {i}")).collect();
    assert_eq!(page[0], middle.join("\n") + "\n");
    assert_eq!(
        page[1],
        format!(
            "[read_tool_result: bytes 48 to 677 of 691 kept; 14 bytes left. \
             Next page: {{\"handle\":\"{handle}\",\"offset\":677}}]"
        )
    );
}

#[tokio::test]
async fn a_notice_of_its_own_sees_where_the_output_was_kept() {
    let store = memory();
    let layer = BudgetLayer::new()
        .max_items(4)
        .tail_percent(0)
        .keep(store.clone())
        .notice(|cut| match &cut.kept {
            Some(Kept::Stored(kept)) => format!(
                "{} rows omitted; read them: {} from {} to {} ({} of {} kept)",
                cut.items,
                kept.handle,
                kept.omitted.start,
                kept.omitted.end,
                kept.kept_bytes,
                kept.output_bytes
            ),
            other => format!("not kept: {other:?}"),
        });
    let tools = toolbox(rows(10), layer, store.clone());
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    let whole = (1..=10)
        .map(|i| format!("row {i}"))
        .collect::<Vec<_>>()
        .join("\n");
    let notice = &read[4];
    let handle = notice.split(' ').nth(5).unwrap();
    assert_eq!(
        *notice,
        format!(
            "6 rows omitted; read them: {handle} from 24 to {} ({} of {} kept)",
            whole.len(),
            whole.len(),
            whole.len()
        )
    );
    let (rest, _) = read_all(&tools, handle, 24, 1000).await;
    assert_eq!(rest, whole[24..]);
}

#[tokio::test]
async fn a_text_cut_inside_is_read_back_from_inside() {
    // One 3,000-byte text of two-byte characters over a 101-byte budget:
    // the head keeps 80 bytes, the tail the last 20.
    let store = memory();
    let text = "é".repeat(1500);
    let tools = toolbox(
        vec![Ok(ToolOutput::text(text.clone()))],
        BudgetLayer::new().max_bytes(101).keep(store.clone()),
        store,
    );
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    assert_eq!(read.len(), 3);
    assert!(read[1].contains("(bytes 80 to 2,980)"), "{}", read[1]);
    let (handle, offset) = next_args(&read[1]).unwrap();
    assert_eq!(offset, 80);
    let (rest, _) = read_all(&tools, &handle, offset, 301).await;
    assert_eq!(format!("{}{rest}", read[0]), text);
}

#[tokio::test]
async fn an_output_over_the_stores_cap_keeps_its_beginning_and_says_so() {
    // 200,000 rows (about 1.3 MB) through a store that keeps 1,000 bytes of one.
    let store = MemoryOutputStore::new(1 << 20, HOUR).max_output_bytes(1000);
    let many = tool::from_stream("rows", |_: serde_json::Value| {
        stream::iter(
            (1..=200_000).map(|i| Ok::<_, ToolError>(ToolOutput::text(format!("row {i}")))),
        )
    });
    let tools = toolstack::Toolbox::new()
        .layered(many, BudgetLayer::new().max_items(10).keep(store.clone()))
        .tool(toolstack_layers::budget::read_tool_result(store.clone()));
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    assert_eq!(read.len(), 11);
    let notice = &read[8];
    let whole: usize = (1..=200_000)
        .map(|i| format!("row {i}").len())
        .sum::<usize>()
        + 199_999;
    let whole = support::output_store::thousands(whole);
    assert!(
        notice.contains(&format!(
            "Its first 1,000 bytes (of {whole}; the most the store keeps of one output) are kept for 1h"
        )),
        "{notice}"
    );
    assert!(store.bytes() <= 1000 + 32, "{} bytes kept", store.bytes());
    let (handle, offset) = next_args(notice).unwrap();
    let (rest, last) = read_all(&tools, &handle, offset, 400).await;
    assert!(rest.starts_with("row 9\nrow 10\n"));
    assert_eq!(offset + rest.len(), 1000);
    assert!(
        last.contains(&format!(
            "the end of the kept copy. The output was {whole} bytes; the rest was over"
        )),
        "{last}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_expired_output_is_not_found_and_the_model_is_told_why() {
    let store = MemoryOutputStore::new(1 << 20, Duration::from_secs(600));
    let tools = toolbox(
        rows(50),
        BudgetLayer::new().max_items(5).keep(store.clone()),
        store.clone(),
    );
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    assert!(read[4].contains("is kept for 10m"), "{}", read[4]);
    let (handle, offset) = next_args(&read[4]).unwrap();
    let args = format!(r#"{{"handle":"{handle}","offset":{offset}}}"#);
    tokio::time::advance(Duration::from_secs(599)).await;
    assert!(call(&tools, "read_tool_result", args.clone()).await.is_ok());
    tokio::time::advance(Duration::from_secs(1)).await;
    let err = call(&tools, "read_tool_result", args).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        err.message(),
        format!(
            "no output is kept under the handle \"{handle}\": it expired (outputs are kept for \
             10m) or was never given. Call the tool again, asking for less."
        )
    );
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_drops_the_oldest_to_stay_within_its_total() {
    let store = MemoryOutputStore::new(3_000, HOUR).max_output_bytes(1_000);
    let handles: Vec<String> = (0..4).map(|_| toolstack::id::new_token()).collect();
    for handle in &handles {
        store
            .put(handle, WholeOutput::new("x".repeat(900), 900))
            .await
            .unwrap();
        assert!(store.bytes() <= 3_000);
    }
    assert!(
        store.read(&handles[0], 0, 1).await.unwrap().is_none(),
        "the oldest"
    );
    for handle in &handles[1..] {
        assert!(store.read(handle, 0, 1).await.unwrap().is_some());
    }
    // The expired ones are freed by the next put.
    tokio::time::advance(HOUR).await;
    store
        .put(&handles[0], WholeOutput::new("y".into(), 1))
        .await
        .unwrap();
    assert_eq!(store.len(), 1);
    assert_eq!(store.bytes(), 33);
}

#[tokio::test]
async fn a_call_under_its_budget_keeps_nothing() {
    let store = memory();
    let tools = toolbox(
        rows(10),
        BudgetLayer::new().max_items(10).keep(store.clone()),
        store.clone(),
    );
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    assert_eq!(read.len(), 10);
    assert!(store.is_empty());
}

#[tokio::test]
async fn bad_handles_offsets_and_limits_are_typed_errors_the_model_can_act_on() {
    let store = memory();
    let tools = toolbox(
        rows(100),
        BudgetLayer::new().max_items(10).keep(store.clone()),
        store,
    );
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    let (handle, _) = next_args(&read[8]).unwrap();
    let read_with = |args: String| call(&tools, "read_tool_result", args);

    for bad in ["../../etc", "", &"f".repeat(33), "not a handle at all"] {
        let err = read_with(format!(r#"{{"handle":{bad:?}}}"#))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{bad}: {err}");
        assert!(err.message().contains("32 hex digits"), "{err}");
    }
    let err = read_with(format!(r#"{{"handle":"{handle}","offset":692}}"#))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert_eq!(
        err.message(),
        "offset 692 is past the end of the kept output (691 bytes): read from an offset below 691"
    );
    // At the very end: nothing left, said so.
    let end = read_with(format!(r#"{{"handle":"{handle}","offset":691}}"#))
        .await
        .unwrap();
    assert_eq!(end[0], "");
    assert!(
        end[1].ends_with("of 691: the end of the output.]"),
        "{}",
        end[1]
    );
    let err = read_with(format!(r#"{{"handle":"{handle}","limit":0}}"#))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    // Arguments of the wrong shape are refused by the schema's decoding.
    for bad in [
        format!(r#"{{"handle":"{handle}","offset":-1}}"#),
        format!(r#"{{"handle":"{handle}","page":2}}"#),
        r#"{"offset":1}"#.to_owned(),
    ] {
        let err = read_with(bad.clone()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{bad}: {err}");
    }
    // An offset inside a character starts at the next one, and says so.
    let text = "é".repeat(20);
    let store = memory();
    let tools = toolbox(
        vec![Ok(ToolOutput::text(text))],
        BudgetLayer::new().max_bytes(10).keep(store.clone()),
        store,
    );
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    let (handle, _) = next_args(&read[1]).unwrap();
    let page = call(
        &tools,
        "read_tool_result",
        format!(r#"{{"handle":"{handle}","offset":3,"limit":4}}"#),
    )
    .await
    .unwrap();
    assert_eq!(page[0], "éé");
    assert!(
        page[1].contains("bytes 4 to 8 (offset 3 was inside a character)"),
        "{}",
        page[1]
    );
}

#[tokio::test]
async fn a_limit_over_the_most_a_page_holds_reads_that_most() {
    let store = memory();
    let big: Vec<_> = (0..20_000)
        .map(|i| Ok(ToolOutput::text(format!("a longer row, number {i}"))))
        .collect();
    let tools = toolbox(
        big,
        BudgetLayer::new().max_items(10).keep(store.clone()),
        store,
    );
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    let (handle, _) = next_args(&read[8]).unwrap();
    let page = call(
        &tools,
        "read_tool_result",
        format!(r#"{{"handle":"{handle}","limit":10000000}}"#),
    )
    .await
    .unwrap();
    assert!(page[0].len() <= MAX_PAGE_BYTES && page[0].len() > MAX_PAGE_BYTES / 2);
    // It ends after a whole row.
    assert!(page[0].ends_with('\n'));
}

#[tokio::test]
async fn the_read_tool_is_in_the_toolbox_with_a_schema_from_its_arguments() {
    let store = memory();
    let tools = toolbox(rows(1), BudgetLayer::new().keep(store.clone()), store);
    let info = tools
        .get("read_tool_result")
        .expect("listed")
        .info()
        .clone();
    let schema = info.input_schema();
    let properties = &schema["properties"];
    for field in ["handle", "offset", "limit"] {
        assert!(properties.get(field).is_some(), "{field} in {schema}");
    }
    assert_eq!(schema["required"], serde_json::json!(["handle"]));
    assert!(info.description().unwrap_or_default().contains("handle"));
    assert_eq!(info.annotations().read_only_hint, Some(true));
}

/// A store whose every put fails, hangs or panics, as `mode` says;
/// counting its puts.
#[derive(Clone)]
struct Broken {
    mode: &'static str,
    puts: Arc<AtomicUsize>,
}

impl OutputStore for Broken {
    fn put(&self, _: &str, _: WholeOutput) -> BoxFuture<'static, Result<(), OutputStoreError>> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        match self.mode {
            "fails" => Box::pin(std::future::ready(Err(OutputStoreError::new("disk full")))),
            "hangs" => Box::pin(std::future::pending()),
            "panics in its future" => Box::pin(async { panic!("store bug") }),
            _ => panic!("store bug"),
        }
    }

    fn read(
        &self,
        _: &str,
        _: usize,
        _: usize,
    ) -> BoxFuture<'static, Result<Option<Chunk>, OutputStoreError>> {
        match self.mode {
            "hangs" => Box::pin(std::future::pending()),
            _ => Box::pin(std::future::ready(Err(OutputStoreError::new("disk gone")))),
        }
    }

    fn ttl(&self) -> Duration {
        HOUR
    }

    fn max_output_bytes(&self) -> usize {
        1 << 20
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_fails_hangs_or_panics_never_fails_the_call() {
    for mode in [
        "fails",
        "hangs",
        "panics in its future",
        "panics when asked",
    ] {
        let capture = Capture::default();
        let _guard = capture.install();
        let puts = Arc::new(AtomicUsize::new(0));
        let store = Broken {
            mode,
            puts: puts.clone(),
        };
        let tool = ServiceBuilder::new()
            .layer(BudgetLayer::new().max_items(10).keep(store))
            .service(tool::from_stream("rows", |_: serde_json::Value| {
                stream::iter(rows(100))
            }));
        let started = tokio::time::Instant::now();
        let items: Vec<_> = tokio::time::timeout(2 * STORE_TIMEOUT, async {
            tool.oneshot(ToolRequest::new("rows", "{}"))
                .await
                .unwrap()
                .collect()
                .await
        })
        .await
        .expect("the call ends");
        assert_eq!(puts.load(Ordering::SeqCst), 1, "{mode}");
        // One outcome: the head, the notice, the tail, and no error.
        assert_eq!(items.len(), 11, "{mode}");
        assert!(items.iter().all(Result::is_ok), "{mode}");
        let notice = items[8].as_ref().unwrap().as_text().unwrap();
        assert_eq!(
            notice,
            "[… 90 items (539 bytes) omitted here: the output was over its budget of 10 items. \
             The whole output could not be kept for reading (its store failed): ask for less — \
             narrow the query, filter, or ask for a page.]",
            "{mode}"
        );
        assert_eq!(items[10].as_ref().unwrap().as_text(), Some("row 100"));
        // A store that hangs is given up on after the store timeout.
        let waited = started.elapsed();
        if mode == "hangs" {
            assert_eq!(waited, STORE_TIMEOUT);
        } else {
            assert_eq!(waited, Duration::ZERO, "{mode}");
        }
        let warned = capture.events_with(
            "the budget could not keep a cut output; the cut stands, and the notice says so",
        );
        assert_eq!(warned.len(), 1, "{mode}");
        let why = warned[0].field("error").unwrap_or_default().to_owned();
        let expected = match mode {
            "fails" => "disk full",
            "hangs" => "did not answer within 5s",
            _ => "panicked",
        };
        assert!(why.contains(expected), "{mode}: {why}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_fails_or_hangs_on_a_read_is_unavailable_and_retryable() {
    for mode in ["fails", "hangs"] {
        let store = Broken {
            mode,
            puts: Arc::default(),
        };
        let tools = toolbox(rows(1), BudgetLayer::new(), store);
        let args = format!(r#"{{"handle":"{}"}}"#, toolstack::id::new_token());
        let err = call(&tools, "read_tool_result", args).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{mode}");
        assert!(err.is_retryable());
        assert!(err.message().contains("try again"), "{err}");
    }
}

#[tokio::test]
async fn under_the_agent_the_model_reads_the_notice_then_the_page_it_asks_for() {
    use toolstack::agent::{Agent, AgentEvent};
    use toolstack::model::{Message, ScriptedModel, Turn};

    // The handle is unpredictable, so the model's second turn cannot be
    // scripted: a first run reads the notice, a second run (the same
    // toolbox, the same store) asks for the page it gave.
    let store = memory();
    let tools = toolbox(
        rows(1000),
        BudgetLayer::new().max_items(5).keep(store.clone()),
        store,
    );
    let results = |events: &[AgentEvent]| -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolResult { result, .. } => Some(result.text()),
                _ => None,
            })
            .collect()
    };
    let model = ScriptedModel::new([Turn::new().tool_call("rows", "{}"), Turn::new().text("ok")]);
    let events: Vec<AgentEvent> = Agent::new(model, tools.clone())
        .run(vec![Message::user("list")])
        .collect()
        .await;
    let first = results(&events);
    let (handle, offset) = next_args(&first[0]).unwrap();
    let args = format!(r#"{{"handle":"{handle}","offset":{offset},"limit":60}}"#);
    let model = ScriptedModel::new([
        Turn::new().tool_call("read_tool_result", args),
        Turn::new().text("ok"),
    ]);
    let events: Vec<AgentEvent> = Agent::new(model, tools)
        .run(vec![Message::user("more")])
        .collect()
        .await;
    let page = &results(&events)[0];
    assert!(page.starts_with("row 5\nrow 6\n"), "{page}");
    assert!(page.contains("Next page: {\"handle\""), "{page}");
}

/// The store's names before the rename (which the agent's run store and
/// the cache shared) still compile, with a deprecation warning.
#[test]
#[allow(deprecated)]
fn the_names_before_the_rename_still_compile() {
    let store: toolstack_layers::budget::MemoryStore = memory();
    assert_eq!(store.ttl(), HOUR);
    let err: toolstack_layers::budget::StoreError = OutputStoreError::new("disk full");
    assert_eq!(err.message(), "disk full");
}
