//! Arbitrary HTTP requests (method, path, headers, a body in chunks that
//! may break off) to `HttpTools::into_router()` over typed tools, on a
//! current-thread runtime made once, reading the whole response. No panic;
//! no 5xx unless the tool itself failed; an event stream ends with exactly
//! one `result` or `error` event.

#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use toolstack::http::HttpTools;
use toolstack::{tool, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest, Toolbox};
use toolstack_fuzz::{Args, Strict};
use tower::ServiceExt;

const FAILS: &str = "fails";
const FAILURE: &str = "the tool failed on purpose";

#[derive(Arbitrary, Debug)]
enum Verb {
    Get,
    Post,
    Put,
    Head,
    Options,
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum Target {
    List,
    /// `/tools/<name>`, the name as given.
    Tool(String),
    /// `/tools/<name>`, every byte percent-encoded (invalid UTF-8 too).
    Encoded(Vec<u8>),
    /// One of the tools served.
    Known(u8),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    verb: Verb,
    target: Target,
    query: Option<String>,
    call_id: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
    /// The body breaks off with a transport error after its chunks.
    broken: bool,
    chunks: Vec<Vec<u8>>,
}

const KNOWN: [&str; 5] = ["args", "strict", FAILS, "later", "items"];

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fn router() -> axum::Router {
    static ROUTER: OnceLock<axum::Router> = OnceLock::new();
    ROUTER
        .get_or_init(|| {
            let toolbox = Toolbox::new()
                .tool(tool::from_fn("args", |args: Args| async move {
                    Ok::<_, ToolError>(args)
                }))
                .tool(tool::from_fn("strict", |args: Strict| async move {
                    Ok::<_, ToolError>(args)
                }))
                // Fails before its stream opens: a 500.
                .service(
                    ToolInfo::new(FAILS),
                    tower::service_fn(|_: ToolRequest| async {
                        Err::<futures::stream::Empty<ToolItem>, _>(ToolError::failed(FAILURE))
                    }),
                )
                // Fails after an item: a 200 that ends with an `error` event.
                .tool(tool::raw(ToolInfo::new("later"), |_| {
                    futures::stream::iter([
                        Ok(ToolOutput::text("one")),
                        Err(ToolError::failed(FAILURE)),
                    ])
                }))
                // Echoes its argument text as items of every kind.
                .tool(tool::raw(ToolInfo::new("items"), |request: ToolRequest| {
                    let text = request.arguments().to_owned();
                    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                    futures::stream::iter([
                        Ok(ToolOutput::text(text.clone())),
                        Ok(ToolOutput::json(json)),
                        Ok(ToolOutput::image(text.clone(), "image/png")),
                        Ok(ToolOutput::from(toolstack::Progress::new(1.0).total(2.0))),
                    ])
                }));
            axum::Router::new().nest("/tools", HttpTools::new(toolbox).body_limit(4096).into_router())
        })
        .clone()
}

fn percent_encoded(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

fuzz_target!(|input: Input| {
    let method = match &input.verb {
        Verb::Get => Method::GET,
        Verb::Post => Method::POST,
        Verb::Put => Method::PUT,
        Verb::Head => Method::HEAD,
        Verb::Options => Method::OPTIONS,
        Verb::Other(name) => match Method::from_bytes(name.as_bytes()) {
            Ok(method) => method,
            Err(_) => return,
        },
    };
    let (mut uri, tool) = match &input.target {
        Target::List => ("/tools".to_owned(), None),
        Target::Tool(name) => (format!("/tools/{name}"), Some(name.clone())),
        Target::Encoded(name) => (
            format!("/tools/{}", percent_encoded(name)),
            String::from_utf8(name.clone()).ok(),
        ),
        Target::Known(i) => {
            let name = KNOWN[usize::from(*i) % KNOWN.len()];
            (format!("/tools/{name}"), Some(name.to_owned()))
        }
        Target::Raw(raw) => (raw.clone(), None),
    };
    if let Some(query) = &input.query {
        uri.push('?');
        uri.push_str(query);
    }
    let mut request = Request::builder().method(method.clone()).uri(&uri);
    if let Some(id) = &input.call_id {
        let Ok(id) = HeaderValue::from_bytes(id) else {
            return;
        };
        request = request.header(toolstack::http::CALL_ID_HEADER, id);
    }
    for (name, value) in &input.headers {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) else {
            continue;
        };
        request = request.header(name, value);
    }
    let chunks: Vec<Result<Bytes, std::io::Error>> = input
        .chunks
        .iter()
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .chain(
            input
                .broken
                .then(|| Err(std::io::Error::other("the connection broke off"))),
        )
        .collect();
    let body = if chunks.len() == 1 && !input.broken {
        Body::from(input.chunks[0].clone())
    } else {
        Body::from_stream(futures::stream::iter(chunks))
    };
    let Ok(request) = request.body(body) else {
        return;
    };

    let (status, headers, body) = runtime().block_on(async {
        let response = router().oneshot(request).await.expect("infallible");
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .expect("a response body reads whole");
        (parts.status, parts.headers, body)
    });

    let failing_tool = tool.as_deref() == Some(FAILS);
    if status.is_server_error() {
        assert!(failing_tool, "{status} for {input:?}: {body:?}");
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        let error: serde_json::Value = serde_json::from_slice(&body).expect("a JSON error body");
        assert_eq!(error["kind"], "failed", "{error}");
        assert_eq!(error["error"], FAILURE, "{error}");
    }
    if status.is_client_error() && method != Method::HEAD {
        // Every refusal of a call says why, as JSON; axum's own (404, 405)
        // for what is not a route are not the router's calls.
        if body.starts_with(b"{") {
            let error: serde_json::Value =
                serde_json::from_slice(&body).expect("a JSON error body");
            assert!(error["error"].is_string(), "{error}");
            assert!(error["kind"].is_string(), "{error}");
        }
    }
    let is_stream = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"text/event-stream");
    if is_stream {
        assert_eq!(status, StatusCode::OK);
        assert!(headers.contains_key(toolstack::http::CALL_ID_HEADER));
        let text = std::str::from_utf8(&body).expect("events are UTF-8");
        let events: Vec<&str> = text
            .split("\n\n")
            .filter(|e| !e.is_empty() && !e.starts_with(':'))
            .collect();
        let last = events.last().expect("at least the last event");
        assert!(
            last.starts_with("event: result\n") || last.starts_with("event: error\n"),
            "{text:?}"
        );
        let finals = events
            .iter()
            .filter(|e| e.starts_with("event: result\n") || e.starts_with("event: error\n"))
            .count();
        assert_eq!(finals, 1, "{text:?}");
    }
});
