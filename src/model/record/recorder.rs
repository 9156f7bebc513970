//! The recording side: [`Recorder`] (the file), [`RecordLayer`] and the
//! model it wraps, [`Recorded`].

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use super::{digest, normalised, Exchange, Header, Item, TimedItem, FORMAT, VERSION};
use crate::model::{ChatRequest, ModelDelta};
use crate::ToolError;

/// A recording file: exchanges are appended to it, a line each.
#[derive(Clone, Debug)]
pub struct Recorder {
    file: Arc<Mutex<File>>,
}

impl Recorder {
    /// A new recording at `path` (an existing file is replaced), its
    /// first line written.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let mut file = File::create(path)?;
        let header = Header {
            format: FORMAT.to_owned(),
            version: VERSION,
        };
        let mut line = serde_json::to_string(&header).map_err(std::io::Error::other)?;
        line.push('\n');
        file.write_all(line.as_bytes())?;
        Ok(Recorder {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Appends to the recording at `path`, creating it if there is none.
    pub fn append(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref();
        let fresh = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
        if fresh {
            return Self::create(path);
        }
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Recorder {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Writes `exchange` as one line, in one write.
    fn write(&self, exchange: &Exchange) {
        let line = match serde_json::to_string(exchange) {
            Ok(mut line) => {
                line.push('\n');
                line
            }
            Err(err) => {
                tracing::warn!("a model exchange could not be recorded: {err}");
                return;
            }
        };
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(err) = file.write_all(line.as_bytes()).and_then(|()| file.flush()) {
            tracing::warn!("a model exchange could not be recorded: {err}");
        }
    }
}

/// Records each call of the model it wraps: see the [module docs](super).
#[derive(Clone, Debug)]
pub struct RecordLayer {
    recorder: Recorder,
}

impl RecordLayer {
    /// Records into `recorder`.
    pub fn new(recorder: Recorder) -> Self {
        RecordLayer { recorder }
    }

    /// Records into a new file at `path` ([`Recorder::create`]).
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(RecordLayer::new(Recorder::create(path)?))
    }
}

impl<M> Layer<M> for RecordLayer {
    type Service = Recorded<M>;

    fn layer(&self, model: M) -> Recorded<M> {
        Recorded {
            model,
            recorder: self.recorder.clone(),
        }
    }
}

/// A model whose calls are recorded.
#[derive(Clone, Debug)]
pub struct Recorded<M> {
    model: M,
    recorder: Recorder,
}

impl<M> Service<ChatRequest> for Recorded<M>
where
    M: Service<ChatRequest>,
    M::Error: Into<ToolError>,
    M::Future: Send + 'static,
    M::Response: Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
{
    type Response = RecordedStream<M::Response>;
    type Error = ToolError;
    type Future = futures_util::future::BoxFuture<'static, Result<Self::Response, ToolError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.model.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        // What was asked is taken before the request moves into the call.
        let asked = normalised(&request);
        let answer = self.model.call(request);
        let recorder = self.recorder.clone();
        Box::pin(async move {
            let request = asked;
            let started = Instant::now();
            let mut exchange = Exchange {
                digest: digest(&request),
                request,
                steps: Vec::new(),
                complete: false,
            };
            match answer.await {
                Ok(stream) => Ok(RecordedStream {
                    inner: stream,
                    pending: Some(PendingExchange {
                        exchange,
                        last: started,
                        recorder,
                    }),
                }),
                Err(err) => {
                    let err = err.into();
                    exchange.steps.push(TimedItem {
                        after_us: micros(started),
                        item: Item::of(&Err(err.clone())),
                    });
                    exchange.complete = true;
                    recorder.write(&exchange);
                    Err(err)
                }
            }
        })
    }
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// An exchange being recorded.
struct PendingExchange {
    exchange: Exchange,
    last: Instant,
    recorder: Recorder,
}

impl Drop for PendingExchange {
    /// An answer dropped before its end is recorded as far as it came.
    fn drop(&mut self) {
        self.recorder.write(&self.exchange);
    }
}

pin_project! {
    /// A recorded model's answer: each item, and the time before it, is
    /// kept; the exchange is written when the answer ends or is dropped.
    pub struct RecordedStream<St> {
        #[pin]
        inner: St,
        pending: Option<PendingExchange>,
    }
}

impl<St> std::fmt::Debug for RecordedStream<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps = self
            .pending
            .as_ref()
            .map_or(0, |pending| pending.exchange.steps.len());
        f.debug_struct("RecordedStream")
            .field("recorded", &steps)
            .finish_non_exhaustive()
    }
}

impl<St> Stream for RecordedStream<St>
where
    St: Stream<Item = Result<ModelDelta, ToolError>>,
{
    type Item = Result<ModelDelta, ToolError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        let item = ready!(this.inner.poll_next(cx));
        if let Some(pending) = this.pending.as_mut() {
            match &item {
                Some(item) => {
                    let now = Instant::now();
                    let after = now.saturating_duration_since(pending.last);
                    pending.last = now;
                    pending.exchange.steps.push(TimedItem {
                        after_us: u64::try_from(after.as_micros()).unwrap_or(u64::MAX),
                        item: Item::of(item),
                    });
                }
                None => pending.exchange.complete = true,
            }
            if item.is_none() {
                // Written now, by the drop.
                *this.pending = None;
            }
        }
        Poll::Ready(item)
    }
}
