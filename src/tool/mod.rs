//! Building tools from functions.
//!
//! Each constructor turns a plain function into a [`FnTool`], a
//! `Service<ToolRequest>` whose response is a stream of [`ToolOutput`]s:
//!
//! | constructor | function |
//! |---|---|
//! | [`from_fn`] | `async fn(Args) -> Result<T, E>` — one item |
//! | [`from_fn_with_context`] | `async fn(Args, ToolContext) -> Result<T, E>` |
//! | [`from_stream`] | `fn(Args) -> impl Stream<Item = Result<T, E>>` — an item per element |
//! | [`from_stream_with_context`] | `fn(Args, ToolContext) -> impl Stream<…>` |
//! | [`raw`] | `fn(ToolRequest) -> impl Stream<Item = ToolItem>` — arguments untouched |
//!
//! `Args: DeserializeOwned + JsonSchema` gives the input schema; `T:
//! Serialize` gives the items (a `String` becomes text, a [`ToolOutput`]
//! passes through, anything else becomes structured JSON); `E:
//! Into<ToolError>` gives the failure. Bad arguments never reach the
//! function: decoding happens in `call`, and its failure — naming the field
//! — is the call's error.
//!
//! ```
//! use futures_util::StreamExt;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use tower::ServiceExt;
//! use toolstack::{tool, ToolError, ToolRequest};
//!
//! /// Adds two numbers.
//! #[derive(Deserialize, JsonSchema)]
//! struct Add {
//!     a: i64,
//!     b: i64,
//! }
//!
//! # futures_util::FutureExt::now_or_never(async {
//! let add = tool::from_fn("add", |Add { a, b }| async move { Ok::<_, ToolError>(a + b) })
//!     .with_description("Adds two integers");
//!
//! let items = add.clone().oneshot(ToolRequest::new("add", r#"{"a":1,"b":2}"#)).await.unwrap();
//! let mut items = std::pin::pin!(items); // an async fn's future need not be Unpin
//! assert_eq!(items.next().await.unwrap().unwrap().as_json().map(toolstack::Json::value), Some(serde_json::json!(3)));
//!
//! let err = add.oneshot(ToolRequest::new("add", r#"{"a":1,"b":"two"}"#)).await.unwrap_err();
//! assert!(err.message().contains("`b`"), "{err}");
//! # }).unwrap();
//! ```

mod codec;
mod context;
mod future;
mod handler;
mod stream;

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use schemars::JsonSchema;
use tower_service::Service;

pub use codec::{Decode, Encode, JsonDecoder, JsonEncoder};
pub use context::{ProgressReporter, ToolContext, PROGRESS_BACKLOG};
pub use future::ResponseFuture;
pub use handler::{
    AsyncFn, AsyncFnWithContext, ErrInto, Handler, Movable, OnceStream, Running, StreamFn,
    StreamFnWithContext, Unpinned,
};
pub use stream::ResponseStream;

use crate::{Describe, ToolAnnotations, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest};

use crate::arguments::DEFAULT_MAX_ARGUMENT_BYTES;

/// A tool built from a function: decodes the arguments, calls the function,
/// encodes its items lazily.
///
/// `Clone` is cheap (the function, the shared [`ToolInfo`], the codec).
/// `poll_ready` is always ready: a function has no capacity of its own; put
/// a concurrency limit in front of it for that.
pub struct FnTool<H, Args, D = JsonDecoder, E = JsonEncoder> {
    handler: H,
    info: Arc<ToolInfo>,
    decoder: D,
    encoder: E,
    max_argument_bytes: usize,
    _args: PhantomData<fn() -> Args>,
}

impl<H: Clone, Args, D: Clone, E: Clone> Clone for FnTool<H, Args, D, E> {
    fn clone(&self) -> Self {
        FnTool {
            handler: self.handler.clone(),
            info: self.info.clone(),
            decoder: self.decoder.clone(),
            encoder: self.encoder.clone(),
            max_argument_bytes: self.max_argument_bytes,
            _args: PhantomData,
        }
    }
}

impl<H, Args, D, E> std::fmt::Debug for FnTool<H, Args, D, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTool")
            .field("info", &self.info)
            .field("max_argument_bytes", &self.max_argument_bytes)
            .finish_non_exhaustive()
    }
}

fn inferred<H, Args: JsonSchema>(name: impl Into<Arc<str>>, handler: H) -> FnTool<H, Args> {
    FnTool::with_info(ToolInfo::new(name).with_input_schema_for::<Args>(), handler)
}

/// A tool from an async function of its arguments; its one result is the
/// one output item.
pub fn from_fn<F, Args>(name: impl Into<Arc<str>>, f: F) -> FnTool<AsyncFn<F>, Args>
where
    Args: JsonSchema,
    AsyncFn<F>: Handler<Args>,
{
    inferred(name, AsyncFn(f))
}

/// A tool from an async function of its arguments and a [`ToolContext`]
/// (call id, extensions, progress reporter).
pub fn from_fn_with_context<F, Args>(
    name: impl Into<Arc<str>>,
    f: F,
) -> FnTool<AsyncFnWithContext<F>, Args>
where
    Args: JsonSchema,
    AsyncFnWithContext<F>: Handler<Args>,
{
    inferred(name, AsyncFnWithContext(f))
}

/// A tool from a function that returns a stream of items: each element is
/// an output item, sent as soon as it is produced.
pub fn from_stream<F, Args>(name: impl Into<Arc<str>>, f: F) -> FnTool<StreamFn<F>, Args>
where
    Args: JsonSchema,
    StreamFn<F>: Handler<Args>,
{
    inferred(name, StreamFn(f))
}

/// A tool from a function of its arguments and a [`ToolContext`] that
/// returns a stream of items.
pub fn from_stream_with_context<F, Args>(
    name: impl Into<Arc<str>>,
    f: F,
) -> FnTool<StreamFnWithContext<F>, Args>
where
    Args: JsonSchema,
    StreamFnWithContext<F>: Handler<Args>,
{
    inferred(name, StreamFnWithContext(f))
}

impl<H, Args> FnTool<H, Args> {
    /// A tool with an explicit [`ToolInfo`] (e.g. a hand-written schema)
    /// instead of one inferred from `Args`.
    pub fn with_info(info: ToolInfo, handler: H) -> Self {
        FnTool {
            handler,
            info: Arc::new(info),
            decoder: JsonDecoder,
            encoder: JsonEncoder,
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
            _args: PhantomData,
        }
    }
}

impl<H, Args, D, E> FnTool<H, Args, D, E> {
    fn map_info(mut self, f: impl FnOnce(ToolInfo) -> ToolInfo) -> Self {
        let info = Arc::unwrap_or_clone(self.info);
        self.info = Arc::new(f(info));
        self
    }

    /// Sets the description shown to the model.
    pub fn with_description(self, description: impl Into<String>) -> Self {
        self.map_info(|i| i.with_description(description))
    }

    /// Sets the behaviour hints (read-only, idempotent…).
    pub fn with_annotations(self, annotations: ToolAnnotations) -> Self {
        self.map_info(|i| i.with_annotations(annotations))
    }

    /// Replaces the inferred input schema with a hand-written one.
    pub fn with_input_schema(self, schema: serde_json::Value) -> Self {
        self.map_info(|i| i.with_input_schema(schema))
    }

    /// Declares the output schema, inferred from `T`.
    pub fn with_output_schema_for<T: JsonSchema>(self) -> Self {
        self.map_info(|i| i.with_output_schema_for::<T>())
    }

    /// Refuses arguments longer than `bytes` with an invalid-arguments
    /// error, before decoding (default [`DEFAULT_MAX_ARGUMENT_BYTES`]).
    pub fn max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = bytes;
        self
    }

    /// Replaces the JSON decoder, e.g. with a closure
    /// `|text: &str| -> Result<Args, ToolError>`.
    pub fn decode_with<D2: Decode<Args>>(self, decoder: D2) -> FnTool<H, Args, D2, E> {
        FnTool {
            handler: self.handler,
            info: self.info,
            decoder,
            encoder: self.encoder,
            max_argument_bytes: self.max_argument_bytes,
            _args: PhantomData,
        }
    }

    /// Replaces the JSON encoder, e.g. with a closure
    /// `|item: T| -> Result<ToolOutput, ToolError>`.
    pub fn encode_with<E2>(self, encoder: E2) -> FnTool<H, Args, D, E2> {
        FnTool {
            handler: self.handler,
            info: self.info,
            decoder: self.decoder,
            encoder,
            max_argument_bytes: self.max_argument_bytes,
            _args: PhantomData,
        }
    }
}

impl<H, Args, D, E> Describe for FnTool<H, Args, D, E> {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
}

impl<H, Args, D, E> Service<ToolRequest> for FnTool<H, Args, D, E>
where
    H: Handler<Args> + Clone,
    D: Decode<Args>,
    E: Encode<H::Item> + Clone,
{
    type Response = ResponseStream<<H::Stream as Running>::Rest, E, H::Item>;
    type Error = ToolError;
    type Future = ResponseFuture<H::Stream, E, H::Item>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    /// Decodes the arguments and starts the function; the future runs it
    /// until it begins answering (see [`ResponseFuture`]).
    fn call(&mut self, request: ToolRequest) -> Self::Future {
        match self.start(request) {
            Ok((stream, progress)) => {
                ResponseFuture::running(stream, self.encoder.clone(), progress)
            }
            Err(err) => ResponseFuture::failed(err),
        }
    }
}

impl<H, Args, D, E> FnTool<H, Args, D, E>
where
    H: Handler<Args>,
    D: Decode<Args>,
    E: Encode<H::Item> + Clone,
{
    #[allow(clippy::type_complexity)]
    fn start(
        &self,
        request: ToolRequest,
    ) -> Result<(H::Stream, Option<Arc<context::ProgressQueue>>), ToolError> {
        crate::arguments::check_size(
            request.arguments(),
            self.info.name(),
            self.max_argument_bytes,
        )?;
        let args = self.decoder.decode(request.arguments())?;
        let (reporter, queue) = if H::WANTS_CONTEXT {
            let (reporter, queue) = ProgressReporter::new();
            (reporter, Some(queue))
        } else {
            (ProgressReporter::disconnected(), None)
        };
        let (call, extensions) = request.into_parts();
        let context = ToolContext::new(call, extensions, reporter);
        Ok((self.handler.call(args, context), queue))
    }
}

/// A tool that receives the request untouched (arguments as raw text) and
/// answers with a stream of [`ToolItem`]s; see [`raw`].
#[derive(Clone)]
pub struct RawTool<F> {
    info: Arc<ToolInfo>,
    f: F,
}

/// A tool from a function of the whole [`ToolRequest`], with an explicit
/// [`ToolInfo`]: for tools that parse their own arguments or take free text.
pub fn raw<F, S>(info: ToolInfo, f: F) -> RawTool<F>
where
    F: Fn(ToolRequest) -> S,
    S: Stream<Item = ToolItem>,
{
    RawTool {
        info: Arc::new(info),
        f,
    }
}

impl<F> Describe for RawTool<F> {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
}

impl<F, S> Service<ToolRequest> for RawTool<F>
where
    F: Fn(ToolRequest) -> S,
    S: Stream<Item = ToolItem>,
{
    type Response = ResponseStream<Movable<S>, AsIs, ToolOutput>;
    type Error = ToolError;
    /// Like a typed tool's: resolves at the stream's first item (failing
    /// with it when it is an error) or its end.
    type Future = ResponseFuture<Movable<S>, AsIs, ToolOutput>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        ResponseFuture::running(handler::movable((self.f)(request)), AsIs, None)
    }
}

/// The response future of a hand-written tool whose work happens in its
/// stream: it resolves when `stream` yields its first item (failing with
/// it when it is an error) or ends, and hands the rest on — the same
/// opening as every tool of this module, so tower's own layers
/// (`Timeout`, `ConcurrencyLimit`, `Retry`, `balance`) bound the tool's
/// work, not only the making of its stream.
///
/// ```
/// use futures_util::StreamExt;
/// use toolstack::{tool, ToolOutput, ToolStream};
///
/// # futures_util::FutureExt::now_or_never(async {
/// let stream = ToolStream::new(futures_util::stream::iter([Ok(ToolOutput::text("hi"))]));
/// // Resolves once "hi" is there; the stream starts with it.
/// let mut items = tool::open_at_first_item(stream).await.unwrap();
/// assert_eq!(items.next().await.unwrap().unwrap().as_text(), Some("hi"));
/// # }).unwrap();
/// ```
pub fn open_at_first_item<S>(stream: S) -> ResponseFuture<Unpinned<S>, AsIs, ToolOutput>
where
    S: Stream<Item = ToolItem> + Unpin,
{
    ResponseFuture::running(Unpinned::new(stream), AsIs, None)
}

/// The encoder of a [`raw`] tool: its items are output already.
#[derive(Debug, Clone, Copy, Default)]
pub struct AsIs;

impl Encode<ToolOutput> for AsIs {
    #[inline]
    fn encode(&self, item: ToolOutput) -> Result<ToolOutput, ToolError> {
        Ok(item)
    }
}

impl<F> std::fmt::Debug for RawTool<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawTool")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}
