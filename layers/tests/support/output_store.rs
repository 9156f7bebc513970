//! What every store of kept outputs must do (the memory, SQLite and Redis
//! stores all run [`contract`]), and the helpers of the tests that page
//! through a kept output as a model would.

#![allow(dead_code, unreachable_pub)]

use futures_util::{stream, StreamExt};
use toolstack::{tool, ErrorKind, ToolError, ToolItem, ToolOutput, ToolRequest, Toolbox};
use toolstack_layers::budget::{read_tool_result, BudgetLayer, OutputStore, WholeOutput};
use tower::ServiceExt;

/// `row 1` … `row n`.
pub fn rows(n: usize) -> Vec<ToolItem> {
    (1..=n)
        .map(|i| Ok(ToolOutput::text(format!("row {i}"))))
        .collect()
}

/// A toolbox with `rows` (answering `items`) under `budget`, and
/// `read_tool_result` over `store`.
pub fn toolbox(items: Vec<ToolItem>, budget: BudgetLayer, store: impl OutputStore) -> Toolbox {
    let items = std::sync::Arc::new(items);
    let rows = tool::from_stream("rows", move |_: serde_json::Value| {
        stream::iter((*items).clone())
    });
    Toolbox::new()
        .layered(rows, budget)
        .tool(read_tool_result(store))
}

/// Calls `name` with `args`: what a model reads of its items (progress
/// aside), or its error (at the open or as the stream's last item).
pub async fn call(tools: &Toolbox, name: &str, args: String) -> Result<Vec<String>, ToolError> {
    let stream = tools
        .clone()
        .oneshot(ToolRequest::new(name.to_owned(), args))
        .await?;
    let items: Vec<ToolItem> = stream.collect().await;
    let mut texts = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Ok(ToolOutput::Progress(_)) => {}
            Ok(output) => texts.push(output.model_text().expect("model text").to_owned()),
            Err(err) => {
                assert_eq!(i, items.len() - 1, "an error ends the stream: {items:?}");
                return Err(err.clone());
            }
        }
    }
    Ok(texts)
}

/// The `{"handle":…,"offset":N}` that `text` (a notice or a page's
/// trailer) says to call with next, if it says one.
pub fn next_args(text: &str) -> Option<(String, usize)> {
    let from = text.find("{\"handle\"")?;
    let to = from + text[from..].find('}')? + 1;
    let args: serde_json::Value = serde_json::from_str(&text[from..to]).expect("JSON arguments");
    Some((
        args["handle"].as_str()?.to_owned(),
        usize::try_from(args["offset"].as_u64()?).ok()?,
    ))
}

/// Reads the output kept under `handle` from `offset`, `limit` bytes a
/// page, following each page's "next page" until the end: the pages joined,
/// and the last page's trailer.
pub async fn read_all(
    tools: &Toolbox,
    handle: &str,
    mut offset: usize,
    limit: usize,
) -> (String, String) {
    let mut whole = String::new();
    for _ in 0..100_000 {
        let args = format!(r#"{{"handle":"{handle}","offset":{offset},"limit":{limit}}}"#);
        let texts = call(tools, "read_tool_result", args).await.expect("a page");
        let [page, trailer] = &texts[..] else {
            panic!("a page and its trailer: {texts:?}");
        };
        assert!(page.len() <= limit.max(4), "a page of {} bytes", page.len());
        whole.push_str(page);
        match next_args(trailer) {
            Some((next, at)) => {
                assert_eq!(next, handle);
                assert_eq!(at, offset + page.len(), "{trailer}");
                offset = at;
            }
            None => return (whole, trailer.clone()),
        }
    }
    panic!("the pages never ended");
}

/// What every [`OutputStore`] does; `store` keeps at most `cap` bytes of
/// an output (`cap` of 64 or more).
pub async fn contract<S: OutputStore + Clone>(store: S, cap: usize) {
    assert_eq!(store.max_output_bytes(), cap);
    let (a, b) = (toolstack::id::new_token(), toolstack::id::new_token());
    assert!(store.read(&a, 0, 10).await.unwrap().is_none(), "never kept");

    let text = "héllo\nwörld";
    store
        .put(&a, WholeOutput::new(text.into(), text.len()))
        .await
        .expect("kept");
    let chunk = store.read(&a, 0, 100).await.unwrap().expect("kept");
    assert_eq!(chunk.bytes, text.as_bytes());
    assert_eq!(
        (chunk.kept_bytes, chunk.output_bytes),
        (text.len(), text.len())
    );
    // A byte range, which may split a character: the store gives bytes.
    let chunk = store.read(&a, 2, 4).await.unwrap().unwrap();
    assert_eq!(chunk.bytes, &text.as_bytes()[2..6]);
    // At or past the end: nothing, and the lengths.
    for offset in [text.len(), text.len() + 100] {
        let chunk = store.read(&a, offset, 10).await.unwrap().unwrap();
        assert!(chunk.bytes.is_empty());
        assert_eq!(chunk.kept_bytes, text.len());
    }
    assert!(store
        .read(&a, 0, 0)
        .await
        .unwrap()
        .unwrap()
        .bytes
        .is_empty());
    assert!(
        store.read(&b, 0, 10).await.unwrap().is_none(),
        "another handle"
    );

    // More than the cap: its beginning, to a character boundary.
    let big = "é".repeat(cap);
    store
        .put(&b, WholeOutput::new(big.clone(), big.len() + 1000))
        .await
        .expect("kept");
    let chunk = store.read(&b, 0, usize::MAX / 2).await.unwrap().unwrap();
    assert_eq!(chunk.kept_bytes, chunk.bytes.len());
    assert!(chunk.kept_bytes <= cap && chunk.kept_bytes >= cap - 1);
    assert_eq!(chunk.output_bytes, big.len() + 1000);
    assert!(std::str::from_utf8(&chunk.bytes).is_ok());
    // The first is still there, untouched.
    let chunk = store.read(&a, 0, 100).await.unwrap().unwrap();
    assert_eq!(chunk.bytes, text.as_bytes());

    through_the_tool(store).await;
}

/// A cut call's notice, and paging through the kept output with
/// `read_tool_result`: the omitted part exactly, and the whole output.
async fn through_the_tool<S: OutputStore + Clone>(store: S) {
    // Text with two-byte characters, JSON, and an image (kept as what the
    // model reads of it, its MIME type).
    let mut items: Vec<ToolItem> = (1..=300)
        .map(|i| Ok(ToolOutput::text(format!("rów {i}"))))
        .collect();
    items.insert(150, Ok(ToolOutput::json(serde_json::json!({"mid": true}))));
    items.insert(200, Ok(ToolOutput::image("aGVsbG8=", "image/png")));
    items.insert(100, Ok(ToolOutput::progress(toolstack::Progress::new(0.5))));
    let whole =
        toolstack::ToolResult::collect(toolstack::ToolStream::new(stream::iter(items.clone())))
            .await
            .text();
    let tools = toolbox(
        items,
        BudgetLayer::new().max_items(20).keep(store.clone()),
        store,
    );

    let read = call(&tools, "rows", "{}".into()).await.expect("the call");
    // The head, the notice, the tail.
    assert_eq!(read.len(), 21, "{read:?}");
    assert_eq!(read[15], "rów 16");
    assert_eq!(read[20], "rów 300");
    let notice = &read[16];
    assert!(notice.contains("omitted here"), "{notice}");
    assert!(notice.contains("is kept for"), "{notice}");
    let (handle, offset) = next_args(notice).expect("the notice says how to read the rest");
    assert_eq!(handle.len(), 32);
    // The omitted part starts after the head (and its newline).
    let head = read[..16].join("\n");
    assert_eq!(offset, head.len() + 1);
    assert_eq!(&whole[..offset - 1], head);

    // From the notice's offset: everything after the head, in pages.
    let (rest, last) = read_all(&tools, &handle, offset, 1000).await;
    assert_eq!(rest, whole[offset..]);
    assert!(last.ends_with("the end of the output.]"), "{last}");
    let tail = read[17..].join("\n");
    assert!(rest.ends_with(&tail));
    // The notice's range is exactly what the model did not read.
    let omitted = format!(
        "bytes {} to {}",
        thousands(offset),
        thousands(whole.len() - tail.len())
    );
    assert!(notice.contains(&omitted), "{notice} lacks {omitted}");

    // From the beginning, small pages: the whole output, byte for byte.
    let (all, _) = read_all(&tools, &handle, 0, 97).await;
    assert_eq!(all, whole);

    // A handle never given.
    let unknown = format!(r#"{{"handle":"{}"}}"#, toolstack::id::new_token());
    let err = call(&tools, "read_tool_result", unknown).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

/// `2811` as `2,811`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
