//! The tool behind a [`BoxTool`](super::BoxTool): never called itself, it
//! lends each call a handle — a spare kept by an earlier call on the same
//! thread, or a clone — and asks that handle's readiness.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll};

use futures_core::Stream;
use tower_service::Service;

use super::erased_call::{CallMachine, ErasedCall};
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

impl<S> Erased<S>
where
    S: Service<ToolRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<ToolError>,
    S::Future: Send + 'static,
    S::Response: Stream<Item = ToolItem> + Send + 'static,
{
    /// Asked with a waker that does nothing: a tool that is not ready now
    /// goes into the call, whose polls drive its readiness with the
    /// caller's waker (keeping its place in any queue).
    fn ready_now(service: &mut S) -> Poll<Result<(), S::Error>> {
        service.poll_ready(&mut Context::from_waker(std::task::Waker::noop()))
    }

    fn opening(future: S::Future) -> Pin<Box<dyn ErasedCall>> {
        Box::pin(CallMachine::<S, S::Future, S::Response>::Opening { future })
    }

    /// The call of a handle that was not ready (it drives its readiness)
    /// or whose readiness failed (it reports the error).
    fn unready(
        polled: Poll<Result<(), S::Error>>,
        service: S,
        request: ToolRequest,
    ) -> Pin<Box<dyn ErasedCall>> {
        match polled {
            Poll::Ready(Err(err)) => Box::pin(CallMachine::<S, S::Future, S::Response>::Refused {
                error: Some(err.into()),
            }),
            _ => Box::pin(CallMachine::<S, S::Future, S::Response>::Ready {
                service,
                request: Some(request),
            }),
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
        // The spare is used where it lies, under one lock taken for the
        // whole call: ready at once (the common case), it is called and
        // stays the spare. A slot in use (another call on this thread
        // slot, or a tool that calls itself) lends a clone instead.
        let spare = match slot.try_lock() {
            Ok(spare) => Some(spare),
            // A call that panicked while it held the slot may have left its
            // handle half-used: it is dropped, never lent again.
            Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                let mut spare = poisoned.into_inner();
                *spare = None;
                slot.clear_poison();
                Some(spare)
            }
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        match spare {
            Some(mut spare) => {
                let service = spare.get_or_insert_with(|| Box::new(self.template.clone()));
                match Self::ready_now(service) {
                    Poll::Ready(Ok(())) => Self::opening(service.call(request)),
                    // Not ready, or failed: the handle goes with the call
                    // (which drives or reports its readiness), not back.
                    polled => {
                        let service = spare
                            .take()
                            .unwrap_or_else(|| Box::new(self.template.clone()));
                        Self::unready(polled, *service, request)
                    }
                }
            }
            None => {
                let mut service = self.template.clone();
                match Self::ready_now(&mut service) {
                    Poll::Ready(Ok(())) => Self::opening(service.call(request)),
                    polled => Self::unready(polled, service, request),
                }
            }
        }
    }
}
