//! The toolbox's routes: `GET /tools`, `POST /tools/{name}` (see the
//! [module](super) for the protocol).

use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::header::RETRY_AFTER;
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_core::Stream;
use futures_util::future::Either;
use futures_util::{stream, StreamExt};
use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::result::{Collecting, Seen};
use crate::{
    arguments, ErrorKind, ToolError, ToolOutput, ToolRequest, ToolResult, ToolStream, Toolbox,
};

/// The default limit on a call's body: 1 MiB, the argument limit of typed
/// tools ([`DEFAULT_MAX_ARGUMENT_BYTES`](crate::arguments::DEFAULT_MAX_ARGUMENT_BYTES)),
/// so that a body the router reads is one a tool would not refuse for its
/// size. The limit is checked before anything is parsed, and against the
/// declared length before anything is read.
pub const DEFAULT_CALL_BODY_LIMIT: usize = crate::arguments::DEFAULT_MAX_ARGUMENT_BYTES;

/// Renamed to [`DEFAULT_CALL_BODY_LIMIT`]: the AI SDK endpoint's limit on a
/// chat request's body is another (`ai_sdk::DEFAULT_CHAT_BODY_LIMIT`).
#[deprecated(note = "renamed to `DEFAULT_CALL_BODY_LIMIT`")]
pub const DEFAULT_BODY_LIMIT: usize = DEFAULT_CALL_BODY_LIMIT;

/// The default time a call's stream may go without an event before a
/// keep-alive comment is sent: 15 s, under the 30–60 s idle timeouts that
/// proxies and load balancers commonly use.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The header that carries the call id: read from the request when
/// present (the caller's own id, say the model's `tool_call_id`), made up
/// otherwise, and always set on the response to a call.
pub const CALL_ID_HEADER: &str = "x-tool-call-id";

/// Builds the HTTP routes that serve a [`Toolbox`]; see the
/// [module docs](super) for the routes, the event format and the statuses.
///
/// ```
/// use toolstack::http::HttpTools;
/// use toolstack::Toolbox;
///
/// let tools: axum::Router = HttpTools::new(Toolbox::new()).body_limit(16 * 1024).into_router();
/// // `GET /api/tools` lists, `POST /api/tools/{name}` calls.
/// let app: axum::Router = axum::Router::new().nest("/api/tools", tools);
/// ```
#[derive(Clone, Debug)]
pub struct HttpTools {
    toolbox: Toolbox,
    body_limit: usize,
    // `None`: no keep-alive comments.
    keep_alive: Option<Duration>,
}

impl HttpTools {
    /// Routes for `toolbox`, with a body limit of [`DEFAULT_CALL_BODY_LIMIT`]
    /// and a keep-alive comment every [`DEFAULT_KEEP_ALIVE`] of silence.
    pub fn new(toolbox: Toolbox) -> Self {
        HttpTools {
            toolbox,
            body_limit: DEFAULT_CALL_BODY_LIMIT,
            keep_alive: Some(DEFAULT_KEEP_ALIVE),
        }
    }

    /// Refuses a call whose body is longer than `bytes` with `413 Payload
    /// Too Large`, without reading more of it than that.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Sends a keep-alive comment (`:\n\n`) on a call's stream each time
    /// `interval` passes without an event; the default is
    /// [`DEFAULT_KEEP_ALIVE`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolstack::http::HttpTools;
    ///
    /// let tools = HttpTools::new(toolstack::Toolbox::new()).keep_alive(Duration::from_secs(5));
    /// # let _: axum::Router = tools.into_router();
    /// ```
    ///
    /// # Panics
    ///
    /// If `interval` is zero, which would send comments in a busy loop; use
    /// [`no_keep_alive`](Self::no_keep_alive) to send none.
    #[track_caller]
    pub fn keep_alive(mut self, interval: Duration) -> Self {
        assert!(
            !interval.is_zero(),
            "the keep-alive interval must be greater than zero; use `no_keep_alive()` to send none"
        );
        self.keep_alive = Some(interval);
        self
    }

    /// Sends no keep-alive comments: a silent tool's stream carries no bytes
    /// until its next event.
    pub fn no_keep_alive(mut self) -> Self {
        self.keep_alive = None;
        self
    }

    /// The router, its routes relative to where it is mounted (as axum
    /// nests): `GET /` lists the tools, `POST /{name}` calls one. Nested at
    /// `/tools` — `Router::new().nest("/tools", tools)` — they are
    /// `GET /tools` and `POST /tools/{name}`; [`router`] serves them there.
    ///
    /// Generic over the state type of the app it will be nested in (it
    /// carries its own state), so it nests into any `Router<S>`.
    pub fn into_router<S>(self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new()
            .route("/", get(list_tools))
            .route("/{name}", post(call_tool))
            .with_state(Arc::new(self))
    }
}

/// A toolbox served on its own, with the default body limit and keep-alive
/// interval: `GET /tools` and `POST /tools/{name}` (the router of
/// [`HttpTools::into_router`] nested at `/tools`).
///
/// ```
/// let app = toolstack::http::router(toolstack::Toolbox::new());
/// # let _: axum::Router = app;
/// ```
pub fn router(toolbox: Toolbox) -> Router {
    Router::new().nest("/tools", HttpTools::new(toolbox).into_router())
}

/// The HTTP status for a call that failed with an error of this kind before
/// its stream opened (see the table in the [module docs](super)).
///
/// ```
/// use axum::http::StatusCode;
/// use toolstack::http::status_for;
/// use toolstack::ErrorKind;
///
/// assert_eq!(status_for(ErrorKind::NotFound), StatusCode::NOT_FOUND);
/// assert_eq!(status_for(ErrorKind::RateLimited { retry_after: None }), StatusCode::TOO_MANY_REQUESTS);
/// ```
pub fn status_for(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidArguments => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Denied | ErrorKind::Guardrail => StatusCode::FORBIDDEN,
        ErrorKind::RateLimited { .. } | ErrorKind::SpendLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Overloaded | ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Failed | ErrorKind::Panicked | ErrorKind::Cancelled | ErrorKind::Interrupted => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

async fn list_tools(State(tools): State<Arc<HttpTools>>, request: Request) -> Response {
    Json(ToolList {
        toolbox: &tools.toolbox,
        extensions: request.extensions(),
    })
    .into_response()
}

/// `{"tools": [...]}`, written straight from the toolbox.
struct ToolList<'a> {
    toolbox: &'a Toolbox,
    extensions: &'a Extensions,
}

impl Serialize for ToolList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Infos<'a>(&'a ToolList<'a>);
        impl Serialize for Infos<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.toolbox.infos_for(self.0.extensions))
            }
        }
        let mut list = serializer.serialize_struct("ToolList", 1)?;
        list.serialize_field("tools", &Infos(self))?;
        list.end()
    }
}

async fn call_tool(
    State(tools): State<Arc<HttpTools>>,
    name: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let (id, id_header) = match call_id(&mut parts.headers) {
        Ok(id) => id,
        Err(rejection) => return rejection.into_response(),
    };
    let mut response = match name {
        Err(rejection) => Rejection::Path(rejection).into_response(),
        Ok(Path(name)) => match tools.prepare(name, id, parts.extensions, body).await {
            Ok(request) => tools.answer(request).await,
            Err(rejection) => rejection.into_response(),
        },
    };
    response.headers_mut().insert(CALL_ID_HEADER, id_header);
    response
}

impl HttpTools {
    /// Reads the arguments into the call's request.
    async fn prepare(
        &self,
        name: String,
        id: String,
        extensions: Extensions,
        body: Body,
    ) -> Result<ToolRequest, Rejection> {
        let arguments = read_arguments(body, self.body_limit).await?;
        let mut request = ToolRequest::new(name, arguments).with_id(id);
        // Syntax only, without building a value: the tool decodes the text
        // itself, and its errors name the fields. The verdict stays with
        // the request, so a layer that asks again does not parse again.
        arguments::checked(&request).map_err(Rejection::Tool)?;
        *request.extensions_mut() = extensions;
        Ok(request)
    }

    /// Makes the call and answers it. The status waits for the tool to
    /// begin answering (its call's future: its first item, or a failure
    /// before it), so a call refused or failed before answering anything
    /// is an HTTP error — but it waits no longer than one keep-alive
    /// interval: then `200` goes out, keep-alive comments hold the
    /// connection while the tool works, and a failure before its first
    /// item arrives as the `error` event.
    async fn answer(&self, request: ToolRequest) -> Response {
        let opening = self.toolbox.dispatch(request);
        let Some(interval) = self.keep_alive else {
            return match opening.await {
                Ok(tool) => self.event_stream(call_events(tool)),
                Err(err) => Rejection::Tool(err).into_response(),
            };
        };
        let waited = Box::pin(tokio::time::sleep(interval));
        match futures_util::future::select(opening, waited).await {
            Either::Left((Ok(tool), _)) => self.event_stream(call_events(tool)),
            Either::Left((Err(err), _)) => Rejection::Tool(err).into_response(),
            Either::Right(((), opening)) => {
                let events = stream::once(opening).flat_map(|opened| match opened {
                    Ok(tool) => Either::Left(call_events(tool)),
                    Err(err) => Either::Right(stream::iter([Ok(error_event(&err))])),
                });
                self.event_stream(events)
            }
        }
    }
}

/// The caller's call id, or a new one; with the header value to echo.
fn call_id(headers: &mut HeaderMap) -> Result<(String, HeaderValue), Rejection> {
    if let Some(value) = headers.remove(CALL_ID_HEADER) {
        if !value.is_empty() {
            let id = value.to_str().map_err(|_| Rejection::CallId)?.to_owned();
            return Ok((id, value));
        }
    }
    let id = new_call_id();
    let value = HeaderValue::from_str(&id).expect("`http_` and hex digits make a header value");
    Ok((id, value))
}

/// `http_` + a per-process random salt + a counter: unique in the process,
/// and unlikely to repeat across restarts.
fn new_call_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static SALT: OnceLock<u32> = OnceLock::new();
    let salt = *SALT.get_or_init(|| {
        std::collections::hash_map::RandomState::new().hash_one(std::process::id()) as u32
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("http_{salt:08x}{n:08x}")
}

const PREALLOCATE_MAX: usize = 64 * 1024;

/// Reads at most `limit` bytes of body, as text: `{}` for a blank body
/// (the argument rules' first), without an allocation.
async fn read_arguments(body: Body, limit: usize) -> Result<Cow<'static, str>, Rejection> {
    let bytes = read_limited(body, limit).await?;
    let text = String::from_utf8(bytes).map_err(Rejection::BodyNotUtf8)?;
    // `or_empty_object` answers with the text itself or with `"{}"`.
    if std::ptr::eq(arguments::or_empty_object(&text), text.as_str()) {
        Ok(Cow::Owned(text))
    } else {
        Ok(Cow::Borrowed("{}"))
    }
}

/// Reads at most `limit` bytes of body (`413` beyond).
pub(super) async fn read_limited(body: Body, limit: usize) -> Result<Vec<u8>, Rejection> {
    // A declared length over the limit is refused before reading anything.
    let declared = body.size_hint().lower();
    if declared > limit as u64 {
        return Err(Rejection::BodyTooLarge { limit });
    }
    // Trust a declared length only so far: a client that declares a
    // megabyte and sends nothing should not cost a megabyte.
    let mut bytes = Vec::with_capacity((declared as usize).min(PREALLOCATE_MAX));
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk: Bytes = chunk.map_err(Rejection::BodyUnreadable)?;
        if bytes.len() + chunk.len() > limit {
            return Err(Rejection::BodyTooLarge { limit });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Why a call was answered with an HTTP error instead of an event stream.
pub(super) enum Rejection {
    Path(PathRejection),
    CallId,
    BodyTooLarge { limit: usize },
    BodyUnreadable(axum::Error),
    BodyNotUtf8(std::string::FromUtf8Error),
    // Also the body that breaks the argument rules, in their own words.
    Tool(ToolError),
}

impl Rejection {
    fn status(&self) -> StatusCode {
        match self {
            Rejection::Path(rejection) => rejection.status(),
            Rejection::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::CallId | Rejection::BodyUnreadable(_) | Rejection::BodyNotUtf8(_) => {
                StatusCode::BAD_REQUEST
            }
            Rejection::Tool(err) => status_for(err.kind()),
        }
    }

    /// The body's `kind`: the tool error's kind, `invalid_arguments` for a
    /// body that cannot be arguments, `invalid_request` for the rest.
    fn kind(&self) -> &'static str {
        match self {
            Rejection::Path(_) | Rejection::CallId | Rejection::BodyUnreadable(_) => {
                "invalid_request"
            }
            Rejection::BodyTooLarge { .. } | Rejection::BodyNotUtf8(_) => {
                ErrorKind::InvalidArguments.as_str()
            }
            Rejection::Tool(err) => err.kind().as_str(),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Path(rejection) => {
                write!(f, "the tool name in the path: {}", rejection.body_text())
            }
            Rejection::CallId => write!(f, "the {CALL_ID_HEADER} header must be visible ASCII"),
            Rejection::BodyTooLarge { limit } => {
                write!(
                    f,
                    "the request body is larger than the limit of {limit} bytes"
                )
            }
            Rejection::BodyUnreadable(err) => write!(f, "could not read the request body: {err}"),
            Rejection::BodyNotUtf8(err) => write!(f, "the request body is not UTF-8 text: {err}"),
            Rejection::Tool(err) => f.write_str(err.message()),
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match &self {
            Rejection::Tool(err) => err.to_model_json(),
            other => serde_json::json!({"error": other.to_string(), "kind": other.kind()}),
        };
        let mut response = (status, Json(body)).into_response();
        if let Rejection::Tool(err) = &self {
            if let Some(after) = err.retry_after() {
                let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
                response.headers_mut().insert(RETRY_AFTER, secs.into());
            }
        }
        response
    }
}

impl HttpTools {
    /// `200`, the call's events, and keep-alive comments if configured.
    fn event_stream<S>(&self, events: S) -> Response
    where
        S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
    {
        let events = Sse::new(events);
        match self.keep_alive {
            Some(interval) => events
                .keep_alive(KeepAlive::new().interval(interval))
                .into_response(),
            None => events.into_response(),
        }
    }
}

/// A tool's response stream as SSE events: one per item, then `result` or
/// `error`. Dropping it drops the tool's stream.
fn call_events(tool: ToolStream) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    stream::unfold(Some(Collecting::new(tool)), |call| async move {
        let mut call = call?;
        let event = match call.next().await {
            Seen::Output => match call.latest() {
                Some(output) => item_event("output", output),
                None => Err(ToolError::failed(
                    "an output item was announced but not kept",
                )),
            },
            Seen::Progress(progress) => item_event("progress", &ToolOutput::progress(progress)),
            Seen::Done(result) => {
                let last = match &result.error {
                    Some(err) => error_event(err),
                    None => result_event(&result).unwrap_or_else(|err| error_event(&err)),
                };
                // The call is over: its stream is dropped here, before the
                // last event goes out.
                drop(call);
                return Some((Ok(last), None));
            }
        };
        let last = match event {
            Ok(event) => return Some((Ok(event), Some(call))),
            Err(err) => error_event(&err),
        };
        // The call is over: `call`, and with it the tool's stream, is
        // dropped here, before the last event goes out.
        Some((Ok(last), None))
    })
}

/// An item as an SSE event of its kind (`output`, `progress`).
fn item_event(name: &str, output: &ToolOutput) -> Result<Event, ToolError> {
    // Compact JSON escapes every line break, so the data is one line.
    Event::default()
        .event(name)
        .json_data(output)
        .map_err(|err| {
            ToolError::failed(format!("could not encode an output item as JSON: {err}"))
                .with_source(err)
        })
}

/// The call's `result` event.
fn result_event(result: &ToolResult) -> Result<Event, ToolError> {
    Event::default()
        .event("result")
        .json_data(result)
        .map_err(|err| {
            ToolError::failed(format!("could not encode the result as JSON: {err}"))
                .with_source(err)
        })
}

/// The error's model-facing JSON as an `error` event.
fn error_event(err: &ToolError) -> Event {
    // A `Value` displays as its compact JSON, which cannot fail.
    Event::default()
        .event("error")
        .data(err.to_model_json().to_string())
}
