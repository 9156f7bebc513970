//! Scripted tools for the layer tests: each step waits (on tokio's clock,
//! which the tests pause) and then yields an item.

#![allow(dead_code, unreachable_pub)]

pub mod capture;
pub mod logs;
pub mod output_store;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use toolstack::{ToolError, ToolItem, ToolOutput, ToolRequest, ToolStream};

/// One step of a scripted stream.
#[derive(Clone, Debug)]
pub enum Step {
    /// Wait, then yield a text item.
    Text(u64, &'static str),
    /// Wait, then yield an error (the last item).
    Fail(u64, ToolError),
    /// Wait forever.
    Hang,
}

/// Sets its flag when dropped: shows that the tool's work was cancelled.
#[derive(Debug)]
pub struct DropFlag(pub Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A stream that plays `steps` (delays in milliseconds) and sets `dropped`
/// when it is dropped.
pub fn scripted(steps: Vec<Step>, dropped: Arc<AtomicBool>) -> ToolStream {
    let guard = DropFlag(dropped);
    ToolStream::new(
        stream::unfold(
            (steps.into_iter(), guard),
            |(mut steps, guard)| async move {
                let item: ToolItem = match steps.next()? {
                    Step::Text(ms, text) => {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Ok(ToolOutput::text(text))
                    }
                    Step::Fail(ms, err) => {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Err(err)
                    }
                    Step::Hang => std::future::pending().await,
                };
                Some((item, (steps, guard)))
            },
        )
        .boxed(),
    )
}

/// A tool service whose every call plays the next script of `scripts`
/// (the last one repeats), counting calls and remembering drops.
#[derive(Clone, Debug)]
pub struct Scripted {
    pub scripts: Arc<Vec<Vec<Step>>>,
    pub calls: Arc<AtomicUsize>,
    pub dropped: Arc<AtomicBool>,
    /// Milliseconds before the stream opens.
    pub open_delay: u64,
}

impl Scripted {
    pub fn new(scripts: Vec<Vec<Step>>) -> Self {
        Scripted {
            scripts: Arc::new(scripts),
            calls: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicBool::new(false)),
            open_delay: 0,
        }
    }

    pub fn open_after(mut self, ms: u64) -> Self {
        self.open_delay = ms;
        self
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn was_dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }
}

impl tower::Service<ToolRequest> for Scripted {
    type Response = ToolStream;
    type Error = ToolError;
    type Future = futures_util::future::BoxFuture<'static, Result<ToolStream, ToolError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ToolError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: ToolRequest) -> Self::Future {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let script = self.scripts[n.min(self.scripts.len() - 1)].clone();
        let dropped = self.dropped.clone();
        let delay = self.open_delay;
        Box::pin(async move {
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            Ok(scripted(script, dropped))
        })
    }
}

/// Collects a stream's items as text, or `ERR(kind)` for errors.
pub async fn texts<S: futures_util::Stream<Item = ToolItem>>(stream: S) -> Vec<String> {
    stream
        .map(|item| match item {
            Ok(ToolOutput::Text { text }) => text,
            Ok(other) => format!("{other:?}"),
            Err(err) => format!("ERR({})", err.kind()),
        })
        .collect()
        .await
}

/// A service that counts how often it is cloned (the layers that clone
/// only when they must are pinned with it).
#[derive(Debug)]
pub struct CountClones<S> {
    pub inner: S,
    pub clones: Arc<AtomicUsize>,
}

impl<S: Clone> Clone for CountClones<S> {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        CountClones {
            inner: self.inner.clone(),
            clones: self.clones.clone(),
        }
    }
}

impl<S: tower::Service<ToolRequest>> tower::Service<ToolRequest> for CountClones<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ToolRequest) -> S::Future {
        self.inner.call(request)
    }
}
