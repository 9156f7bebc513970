//! Caps what one call puts in the model's context: items, bytes, or an
//! approximate token count.
//!
//! A tool that answers 3,000 rows fills a model's context with them. Under
//! [`Budget`], a call's output keeps its **head** and its **tail** and
//! says, where the middle was, exactly what was cut, in words the model
//! can act on:
//!
//! ```text
//! [… 2,811 items (183,204 bytes) omitted here: the output was over its budget of 50 items.
//!  Ask for less — narrow the query, filter, or ask for a page.]
//! ```
//!
//! * **Streaming stays streaming.** The head passes as it comes, never
//!   held; once the head is full, items go into a bounded tail (by default
//!   a fifth of the budget), the oldest of which are cut as newer ones
//!   come. At the end come the notice and the tail. Memory is bounded by
//!   the budget, whatever the tool sends.
//! * A text item that does not fit is cut inside (at a character
//!   boundary), so a single huge text keeps its beginning and its end.
//!   Other items (JSON, images…) are kept or cut whole.
//! * Progress is not output: it passes, uncounted. An error ends the
//!   stream as usual, after the notice and the tail.
//! * [`BudgetLayer::notice`] words the notice for a tool ("… rows
//!   omitted"); [`Cut`] says what was cut.
//!
//! **The whole output, for a consumer that wants it** (a UI, a file): put
//! a [`Tap`] in the request's extensions — it sees every item as it
//! passes the budget, the cut ones included, before the cut.
//!
//! ```
//! use futures_util::{stream, StreamExt};
//! use toolstack::{tool, ToolError, ToolOutput, ToolRequest, ToolResult};
//! use toolstack_layers::budget::BudgetLayer;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! let rows = tool::from_stream("rows", |_: serde_json::Value| {
//!     stream::iter((1..=100).map(|i| Ok::<_, ToolError>(ToolOutput::text(format!("row {i}")))))
//! });
//! let tool = ServiceBuilder::new()
//!     .layer(BudgetLayer::new().max_items(10))
//!     .service(rows);
//! let result = ToolResult::collect(tool.oneshot(ToolRequest::new("rows", "{}")).await?).await;
//! // The model reads the items joined by newlines: 8 rows, the notice, 2 rows.
//! let text = result.into_text();
//! assert!(text.starts_with("row 1\nrow 2\n"));
//! assert!(text.contains("row 8\n[… 90 items"));
//! assert!(text.ends_with("row 99\nrow 100"));
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use toolstack::ToolError;
use tower_layer::Layer;
use tower_service::Service;

use crate::{Output, Request};

/// About how many bytes a token is (for [`BudgetLayer::max_tokens`]).
pub const BYTES_PER_TOKEN: usize = 4;

/// What a [`Budget`] cut from one call's output.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Cut {
    /// Items cut whole, and text items cut in part.
    pub items: usize,
    /// Bytes cut.
    pub bytes: usize,
    /// The budget in items, if it has one.
    pub max_items: Option<usize>,
    /// The budget in bytes, if it has one.
    pub max_bytes: Option<usize>,
}

impl Cut {
    /// The budget, in words: `50 items`, `8,000 bytes (≈ 2,000 tokens)`.
    pub fn budget(&self) -> String {
        let bytes = self.max_bytes.map(|b| {
            format!(
                "{} bytes (≈ {} tokens)",
                thousands(b),
                thousands(b / BYTES_PER_TOKEN)
            )
        });
        let items = self.max_items.map(|i| format!("{} items", thousands(i)));
        match (items, bytes) {
            (Some(i), Some(b)) => format!("{i} or {b}"),
            (Some(i), None) => i,
            (None, Some(b)) => b,
            (None, None) => "none".into(),
        }
    }
}

/// The default notice.
fn default_notice(cut: &Cut) -> String {
    format!(
        "[… {} items ({} bytes) omitted here: the output was over its budget of {}. \
         Ask for less — narrow the query, filter, or ask for a page.]",
        thousands(cut.items),
        thousands(cut.bytes),
        cut.budget()
    )
}

/// `2811` as `2,811`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

type Notice = Arc<dyn Fn(&Cut) -> String + Send + Sync>;

/// Sees every item of a call as it passes the budget, the cut ones
/// included: put one in the request's extensions (a UI, a log file). It
/// is called on the item before the cut, on the poll that yields it.
pub struct Tap<T> {
    see: Arc<dyn Fn(&T) + Send + Sync>,
}

impl<T> Tap<T> {
    /// A tap that calls `see` with every item.
    pub fn new(see: impl Fn(&T) + Send + Sync + 'static) -> Self {
        Tap { see: Arc::new(see) }
    }
}

impl<T> Clone for Tap<T> {
    fn clone(&self) -> Self {
        Tap {
            see: self.see.clone(),
        }
    }
}

impl<T> fmt::Debug for Tap<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tap").finish_non_exhaustive()
    }
}

/// Caps a call's output: see the [module docs](self).
#[derive(Clone)]
pub struct BudgetLayer {
    max_items: Option<usize>,
    max_bytes: Option<usize>,
    tail: u8,
    notice: Notice,
}

impl BudgetLayer {
    /// No limit yet: set [`max_items`](Self::max_items),
    /// [`max_bytes`](Self::max_bytes) or [`max_tokens`](Self::max_tokens).
    pub fn new() -> Self {
        BudgetLayer {
            max_items: None,
            max_bytes: None,
            tail: 20,
            notice: Arc::new(default_notice),
        }
    }

    /// At most `items` output items reach the model (progress does not
    /// count); with the notice, one more.
    pub fn max_items(mut self, items: usize) -> Self {
        self.max_items = Some(items);
        self
    }

    /// At most `bytes` bytes of output reach the model, the notice aside.
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = Some(bytes);
        self
    }

    /// At most about `tokens` tokens reach the model: a byte budget of
    /// [`BYTES_PER_TOKEN`] bytes a token (a rough count for English text
    /// and JSON; use [`max_bytes`](Self::max_bytes) for an exact bound).
    pub fn max_tokens(self, tokens: usize) -> Self {
        self.max_bytes(tokens.saturating_mul(BYTES_PER_TOKEN))
    }

    /// How much of the budget the tail keeps, in percent (default 20; 0
    /// keeps only the head).
    pub fn tail_percent(mut self, percent: u8) -> Self {
        self.tail = percent.min(100);
        self
    }

    /// Words the notice: `notice(&cut)` is the text the model reads where
    /// the output was cut.
    pub fn notice(mut self, notice: impl Fn(&Cut) -> String + Send + Sync + 'static) -> Self {
        self.notice = Arc::new(notice);
        self
    }

    fn tail_of(&self, budget: usize) -> usize {
        budget * usize::from(self.tail) / 100
    }
}

impl Default for BudgetLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for BudgetLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetLayer")
            .field("max_items", &self.max_items)
            .field("max_bytes", &self.max_bytes)
            .field("tail_percent", &self.tail)
            .finish()
    }
}

impl<S> Layer<S> for BudgetLayer {
    type Service = Budget<S>;

    fn layer(&self, inner: S) -> Budget<S> {
        Budget {
            inner,
            config: self.clone(),
        }
    }
}

/// A tool (or model) whose output is capped; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Budget<S> {
    inner: S,
    config: BudgetLayer,
}

impl<S> Budget<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, R, St, T> Service<R> for Budget<S>
where
    R: Request,
    S: Service<R, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
    T: Output + 'static,
{
    type Response = Budgeted<St, T>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future, T>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let tap = request.extensions().get::<Tap<T>>().cloned();
        ResponseFuture {
            inner: self.inner.call(request),
            config: Some(self.config.clone()),
            tap,
        }
    }
}

pin_project! {
    /// The response future of [`Budget`].
    pub struct ResponseFuture<F, T> {
        #[pin]
        inner: F,
        config: Option<BudgetLayer>,
        tap: Option<Tap<T>>,
    }
}

impl<F, St, E, T> Future for ResponseFuture<F, T>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
    T: Output,
{
    type Output = Result<Budgeted<St, T>, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let stream = ready!(this.inner.poll(cx)).map_err(Into::into)?;
        let config = this
            .config
            .take()
            .ok_or_else(|| ToolError::polled_after_completion("budget::ResponseFuture"))?;
        Poll::Ready(Ok(Budgeted::new(stream, config, this.tap.take())))
    }
}

/// Where a budgeted stream is.
enum Phase {
    /// Items pass.
    Head,
    /// The head is full: items go to the tail.
    Tail,
    /// The inner stream ended (or failed): the notice and the tail go out.
    Ending,
}

pin_project! {
    /// A stream capped by a [`Budget`]; see the [module docs](self).
    pub struct Budgeted<St, T> {
        #[pin]
        inner: St,
        config: BudgetLayer,
        tap: Option<Tap<T>>,
        phase: Phase,
        head_items: usize,
        head_bytes: usize,
        tail: VecDeque<T>,
        tail_bytes: usize,
        cut_items: usize,
        cut_bytes: usize,
        // The error that ends the stream, after the tail.
        error: Option<ToolError>,
        limits: Limits,
    }
}

impl<St, T: Output> Budgeted<St, T> {
    fn new(inner: St, config: BudgetLayer, tap: Option<Tap<T>>) -> Self {
        Budgeted {
            limits: config.limits(),
            inner,
            config,
            tap,
            phase: Phase::Head,
            head_items: 0,
            head_bytes: 0,
            tail: VecDeque::new(),
            tail_bytes: 0,
            cut_items: 0,
            cut_bytes: 0,
            error: None,
        }
    }
}

/// The largest index `<= at` that is a character boundary of `text`.
fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

impl<St, T> Stream for Budgeted<St, T>
where
    St: Stream<Item = Result<T, ToolError>>,
    T: Output,
{
    type Item = Result<T, ToolError>;

    #[inline(always)]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let config = &*this.config;
        let limits = &*this.limits;
        loop {
            if let Phase::Ending = this.phase {
                if *this.cut_items > 0 {
                    let cut = Cut {
                        items: std::mem::take(this.cut_items),
                        bytes: std::mem::take(this.cut_bytes),
                        max_items: config.max_items,
                        max_bytes: config.max_bytes,
                    };
                    tracing::debug!(
                        items = cut.items,
                        bytes = cut.bytes,
                        "output over budget, cut"
                    );
                    return Poll::Ready(Some(Ok(T::from_text((config.notice)(&cut)))));
                }
                if let Some(item) = this.tail.pop_front() {
                    return Poll::Ready(Some(Ok(item)));
                }
                return Poll::Ready(this.error.take().map(Err));
            }
            let mut item = match ready!(this.inner.as_mut().poll_next(cx)) {
                Some(Ok(item)) => item,
                Some(Err(err)) => {
                    *this.phase = Phase::Ending;
                    *this.error = Some(err);
                    continue;
                }
                None => {
                    *this.phase = Phase::Ending;
                    continue;
                }
            };
            if let Some(tap) = this.tap {
                (tap.see)(&item);
            }
            if !item.is_output() {
                return Poll::Ready(Some(Ok(item)));
            }
            let len = item.byte_len();
            if let Phase::Head = this.phase {
                let (head_items, head_bytes) = (limits.head_items, limits.head_bytes);
                if *this.head_items < head_items && *this.head_bytes + len <= head_bytes {
                    *this.head_items += 1;
                    *this.head_bytes += len;
                    return Poll::Ready(Some(Ok(item)));
                }
                *this.phase = Phase::Tail;
                // Text that does not fit keeps its beginning in the head.
                if *this.head_items < head_items && *this.head_bytes < head_bytes {
                    if let Some(text) = item.text_mut() {
                        let at = floor_boundary(text, head_bytes - *this.head_bytes);
                        if at > 0 {
                            let rest = text.split_off(at);
                            *this.head_items += 1;
                            *this.head_bytes += at;
                            // The rest goes to the tail.
                            let mut tail = Tail {
                                items: this.tail,
                                bytes: this.tail_bytes,
                                cut_items: this.cut_items,
                                cut_bytes: this.cut_bytes,
                            };
                            tail.push(T::from_text(rest), limits);
                            return Poll::Ready(Some(Ok(item)));
                        }
                    }
                }
            }
            let mut tail = Tail {
                items: this.tail,
                bytes: this.tail_bytes,
                cut_items: this.cut_items,
                cut_bytes: this.cut_bytes,
            };
            tail.push(item, limits);
        }
    }
}

/// A budget's limits, split between the head and the tail.
struct Limits {
    head_items: usize,
    head_bytes: usize,
    tail_items: usize,
    tail_bytes: usize,
}

impl BudgetLayer {
    fn limits(&self) -> Limits {
        // The tail keeps its share; the head the rest.
        let split = |max: Option<usize>| match max {
            Some(max) => (max - self.tail_of(max), self.tail_of(max)),
            None => (usize::MAX, usize::MAX),
        };
        let (head_items, tail_items) = split(self.max_items);
        let (head_bytes, tail_bytes) = split(self.max_bytes);
        Limits {
            head_items,
            head_bytes,
            tail_items,
            tail_bytes,
        }
    }
}

/// The tail of a budgeted stream, and what was cut.
struct Tail<'a, T> {
    items: &'a mut VecDeque<T>,
    bytes: &'a mut usize,
    cut_items: &'a mut usize,
    cut_bytes: &'a mut usize,
}

impl<T: Output> Tail<'_, T> {
    fn cut(&mut self, bytes: usize) {
        *self.cut_items += 1;
        *self.cut_bytes += bytes;
    }

    /// Adds `item`, cutting the oldest items while the tail is over its
    /// share; a text item larger than the whole share keeps its end.
    fn push(&mut self, mut item: T, limits: &Limits) {
        let len = item.byte_len();
        if limits.tail_items == 0 || limits.tail_bytes == 0 {
            return self.cut(len);
        }
        if len > limits.tail_bytes {
            let Some(text) = item.text_mut() else {
                return self.cut(len);
            };
            // Keep the last `tail_bytes` bytes, from a character boundary.
            let mut from = len - limits.tail_bytes;
            while !text.is_char_boundary(from) {
                from += 1;
            }
            let kept = text.split_off(from);
            *text = kept;
            // Its beginning is cut, and everything held before it.
            self.cut(from);
            while let Some(old) = self.items.pop_front() {
                self.cut(old.byte_len());
            }
            *self.bytes = 0;
        }
        *self.bytes += item.byte_len();
        self.items.push_back(item);
        while self.items.len() > limits.tail_items || *self.bytes > limits.tail_bytes {
            let Some(old) = self.items.pop_front() else {
                break;
            };
            let old_len = old.byte_len();
            *self.bytes -= old_len;
            self.cut(old_len);
        }
    }
}

impl<St, T> fmt::Debug for Budgeted<St, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budgeted")
            .field("config", &self.config)
            .field("cut_items", &self.cut_items)
            .field("tail", &self.tail.len())
            .finish()
    }
}
