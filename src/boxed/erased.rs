//! The tool behind a [`BoxTool`](super::BoxTool): never called itself, it
//! lends each call a handle — a spare kept by an earlier call on the same
//! thread, or a clone — and asks that handle's readiness.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll};

use futures_core::Stream;
use tower_service::Service;

use super::call::{CallState, ErasedCall};
use super::ToolItem;
use crate::{ToolError, ToolRequest};

/// A tool erased: what a [`BoxTool`](super::BoxTool) calls.
pub(super) trait ErasedTool: Send + Sync {
    fn call(&self, request: ToolRequest) -> Pin<Box<dyn ErasedCall>>;
}

/// A tool erased, with spare handles of it for calls that find it ready.
pub(super) struct Erased<S> {
    // Never called: each call's handle is a clone of it, or a spare.
    template: S,
    // Handles that were ready and called, kept for the next call made on
    // the same thread (one slot per thread index, so threads do not share
    // a slot's cache line): a call that finds its tool ready at once then
    // costs no clone of the tool — no reference counts taken and dropped
    // on every `Arc` in its stack, which is what made calls from several
    // threads contend.
    spare: Box<[Spare<S>]>,
}

#[repr(align(128))]
struct Spare<S>(Mutex<Option<Box<S>>>);

/// How many spare slots a tool keeps: the threads that can run at once,
/// to a power of two, at most 64.
pub(super) fn spare_slots() -> usize {
    static SLOTS: OnceLock<usize> = OnceLock::new();
    *SLOTS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 64)
            .next_power_of_two()
    })
}

/// This thread's slot index (the spare slot is this modulo their number).
pub(super) fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|slot| *slot)
}

impl<S: Clone> Erased<S> {
    pub(super) fn new(template: S) -> Self {
        Erased {
            template,
            spare: (0..spare_slots())
                .map(|_| Spare(Mutex::new(None)))
                .collect(),
        }
    }
}

impl<S> ErasedTool for Erased<S>
where
    S: Service<ToolRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<ToolError>,
    S::Future: Send + 'static,
    S::Response: Stream<Item = ToolItem> + Send + 'static,
{
    fn call(&self, request: ToolRequest) -> Pin<Box<dyn ErasedCall>> {
        let slot = &self.spare[thread_slot() & (self.spare.len() - 1)].0;
        let mut service = slot
            .try_lock()
            .ok()
            .and_then(|mut spare| spare.take())
            .unwrap_or_else(|| Box::new(self.template.clone()));
        // Asked with a waker that does nothing: a tool that is not ready
        // now goes into the call, whose polls drive its readiness with the
        // caller's waker (keeping its place in any queue).
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match service.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => {
                let future = service.call(request);
                // Called, so unready again and holding nothing: a spare.
                if let Ok(mut spare) = slot.try_lock() {
                    if spare.is_none() {
                        *spare = Some(service);
                    }
                }
                Box::pin(CallState::<S, S::Future, S::Response>::Opening { future })
            }
            Poll::Ready(Err(err)) => Box::pin(CallState::<S, S::Future, S::Response>::Refused {
                error: Some(err.into()),
            }),
            Poll::Pending => Box::pin(CallState::<S, S::Future, S::Response>::Ready {
                service: *service,
                request: Some(request),
            }),
        }
    }
}
