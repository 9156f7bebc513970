//! One cached call: looked up, run once for every caller that asks at the same time (single flight), recorded, stored, or replayed.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use futures_core::Stream;
use futures_util::stream;
use tokio::sync::watch;
use toolstack::{Progress, ToolError, ToolItem, ToolOutput, ToolRequest, ToolStream};
use tower_service::Service;

use super::layer::{CacheLayer, Flight, Flights};
use super::store::{CacheStore, Cached};

/// `cached`'s items as a stream, marked as a hit.
pub(crate) fn replay(cached: Cached) -> ToolStream {
    let age = cached.stored_at.elapsed().unwrap_or_default().as_secs();
    // On the call's span (the trace layer's `execute_tool` declares it).
    tracing::Span::current().record("toolstack.cache", "hit");
    tracing::info!(cache = "hit", age_s = age, "tool result from the cache");
    let mark = ToolOutput::progress(
        Progress::new(1.0)
            .total(1.0)
            .message(format!("cached result, {age} s old")),
    );
    let items: Vec<ToolItem> = std::iter::once(Ok(mark))
        .chain(cached.items.iter().cloned().map(Ok))
        .collect();
    ToolStream::new(stream::iter(items))
}

pub(crate) async fn cached_call<S, St>(
    mut inner: S,
    request: ToolRequest,
    key: String,
    config: CacheLayer,
) -> Result<ToolStream, ToolError>
where
    S: Service<ToolRequest, Response = St> + Send + 'static,
    S::Error: Into<ToolError>,
    S::Future: Send + 'static,
    St: Stream<Item = ToolItem> + Send + 'static,
{
    if let Some(hit) = config.store.get(&key).await {
        return Ok(replay(hit));
    }
    // One call per key at a time: lead it, or wait for its leader.
    let lead = {
        let mut running = config
            .flights
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match running.get(&key) {
            Some(flight) => Err(flight.clone()),
            None => {
                let (tx, rx) = watch::channel(Flight::Running);
                running.insert(key.clone(), rx);
                Ok(tx)
            }
        }
    };
    let leader = match lead {
        Ok(tx) => Leader {
            tx,
            key: key.clone(),
            flights: config.flights.clone(),
        },
        Err(mut flight) => {
            let outcome = flight
                .wait_for(|f| !matches!(f, Flight::Running))
                .await
                .map(|f| f.clone());
            if let Ok(Flight::Stored(cached)) = outcome {
                return Ok(replay(cached));
            }
            // The leader failed or was dropped: run it ourselves, uncached.
            let stream = inner.call(request).await.map_err(Into::into)?;
            return Ok(ToolStream::new(stream));
        }
    };
    let stream = match inner.call(request).await {
        Ok(stream) => stream,
        Err(err) => {
            drop(leader);
            return Err(err.into());
        }
    };
    Ok(ToolStream::new(Recording {
        inner: Box::pin(stream),
        items: Vec::new(),
        bytes: 0,
        keep: true,
        leader: Some(leader),
        store: config.store.clone(),
        max_bytes: config.max_entry_bytes,
    }))
}

/// The call that runs for a key: when it ends (or is dropped) its
/// followers are told how.
pub(crate) struct Leader {
    tx: watch::Sender<Flight>,
    key: String,
    flights: Arc<Flights>,
}

impl Leader {
    fn finish(self, flight: Flight) {
        self.tx.send_replace(flight);
        // Drop runs the rest.
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if matches!(*self.tx.borrow(), Flight::Running) {
            self.tx.send_replace(Flight::Failed);
        }
        self.flights
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

/// The leader's stream: passes its items on and keeps a copy, stored when
/// the stream ends well.
pub(crate) struct Recording<St> {
    inner: Pin<Box<St>>,
    items: Vec<ToolOutput>,
    bytes: usize,
    keep: bool,
    leader: Option<Leader>,
    store: Arc<dyn CacheStore>,
    max_bytes: usize,
}

impl<St: Stream<Item = ToolItem>> Stream for Recording<St> {
    type Item = ToolItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        let this = &mut *self;
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(item))) => {
                if this.keep {
                    this.bytes += item.byte_len();
                    if this.bytes > this.max_bytes {
                        // Too large to keep: stream on, store nothing.
                        this.keep = false;
                        this.items = Vec::new();
                    } else if !matches!(item, ToolOutput::Progress(_)) {
                        this.items.push(item.clone());
                    }
                }
                Poll::Ready(Some(Ok(item)))
            }
            Poll::Ready(Some(Err(err))) => {
                // An error: nothing is stored, and the followers run.
                this.keep = false;
                this.leader.take();
                Poll::Ready(Some(Err(err)))
            }
            Poll::Ready(None) => {
                if let Some(leader) = this.leader.take() {
                    if this.keep {
                        let cached = Cached {
                            items: std::mem::take(&mut this.items).into(),
                            stored_at: SystemTime::now(),
                        };
                        // The store's write runs on; the stream ends now.
                        let put = this.store.put(leader.key.clone(), cached.clone());
                        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                            runtime.spawn(put);
                        }
                        leader.finish(Flight::Stored(cached));
                    }
                }
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
