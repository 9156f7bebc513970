//! The per-call context handed to a tool function that asks for one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::task::Context;

use futures_util::task::AtomicWaker;
use http::Extensions;

use crate::request::Parts;
use crate::Progress;

/// What a tool function may know about its call: the call id, the tool's
/// name, the request's extensions, and a [`ProgressReporter`] whose reports
/// appear as progress items in the call's own response stream.
///
/// Cancellation needs no token: when the consumer drops the response
/// stream, the function's future or stream is dropped with it.
///
/// Cloning is cheap (the call's id and name are shared; the extensions map
/// is copied): move a clone into each async step of a streaming tool to
/// report progress from it, or clone only [`progress`](Self::progress).
///
/// ```
/// use futures_util::StreamExt;
/// use toolstack::{tool, Progress, ToolContext, ToolError};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Files { paths: Vec<String> }
///
/// async fn size_of(path: &str) -> usize { path.len() }
///
/// let sizes = tool::from_stream_with_context("sizes", |Files { paths }, ctx: ToolContext| {
///     let total = paths.len() as f64;
///     futures_util::stream::iter(paths.into_iter().enumerate()).then(move |(at, path)| {
///         let ctx = ctx.clone(); // moved into this step's future
///         async move {
///             let size = size_of(&path).await;
///             ctx.report(Progress::new((at + 1) as f64).total(total));
///             Ok::<_, ToolError>(format!("{path}: {size} bytes"))
///         }
///     })
/// });
/// # let _ = sizes;
/// ```
#[derive(Clone)]
pub struct ToolContext {
    call: Arc<Parts>,
    extensions: Extensions,
    progress: ProgressReporter,
}

impl ToolContext {
    pub(crate) fn new(
        call: Arc<Parts>,
        extensions: Extensions,
        progress: ProgressReporter,
    ) -> Self {
        ToolContext {
            call,
            extensions,
            progress,
        }
    }

    /// The call id.
    pub fn call_id(&self) -> &str {
        &self.call.id
    }

    /// The tool's name as called.
    pub fn tool_name(&self) -> &str {
        &self.call.name
    }

    /// The request's extensions (caller identity, options…).
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The progress reporter (clone it to report from another task).
    pub fn progress(&self) -> &ProgressReporter {
        &self.progress
    }

    /// Reports progress; shorthand for `self.progress().report(..)`.
    pub fn report(&self, progress: Progress) {
        self.progress.report(progress)
    }
}

/// At most this many progress reports wait for the consumer; beyond it the
/// oldest is dropped, since a newer report supersedes it.
pub const PROGRESS_BACKLOG: usize = 32;

#[derive(Debug, Default)]
pub(crate) struct ProgressQueue {
    items: Mutex<VecDeque<Progress>>,
    waker: AtomicWaker,
}

impl ProgressQueue {
    /// Whether a report waits, listening with `cx` for the next one.
    pub(crate) fn has_items(&self, cx: &mut Context<'_>) -> bool {
        self.waker.register(cx.waker());
        !self
            .items
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_empty()
    }

    pub(crate) fn pop(&self, cx: &mut Context<'_>) -> Option<Progress> {
        self.waker.register(cx.waker());
        self.items
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop_front()
    }
}

/// Puts progress items into the response stream of the call it belongs to.
///
/// Reporting never blocks and never fails: reports that arrive faster than
/// the consumer reads keep at most [`PROGRESS_BACKLOG`] pending (oldest
/// dropped first), and reports after the stream was dropped go nowhere.
#[derive(Debug, Clone, Default)]
pub struct ProgressReporter {
    // Weak: the response stream owns the queue, so a reporter kept alive in
    // a spawned task can tell that nobody reads any more.
    queue: Option<Weak<ProgressQueue>>,
}

impl ProgressReporter {
    pub(crate) fn new() -> (Self, Arc<ProgressQueue>) {
        let queue = Arc::new(ProgressQueue::default());
        (
            ProgressReporter {
                queue: Some(Arc::downgrade(&queue)),
            },
            queue,
        )
    }

    /// A reporter connected to nothing.
    pub fn disconnected() -> Self {
        ProgressReporter { queue: None }
    }

    /// Reports progress.
    pub fn report(&self, progress: Progress) {
        let Some(queue) = self.queue.as_ref().and_then(Weak::upgrade) else {
            return;
        };
        {
            let mut items = queue
                .items
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if items.len() >= PROGRESS_BACKLOG {
                items.pop_front();
            }
            items.push_back(progress);
        }
        queue.waker.wake();
    }

    /// Whether the response stream that reads these reports is gone.
    pub fn is_closed(&self) -> bool {
        self.queue
            .as_ref()
            .is_none_or(|queue| queue.strong_count() == 0)
    }
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("call_id", &self.call.id)
            .field("tool_name", &self.call.name)
            .field("extensions", &self.extensions)
            .finish_non_exhaustive()
    }
}
