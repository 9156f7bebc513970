//! The permits of a concurrency limit: an atomic count for the common case,
//! tokio's semaphore only while calls wait.
//!
//! A call takes a permit with one compare-and-swap on `free` and gives it
//! back with one add — no lock, where tokio's semaphore takes its
//! waiter-list lock on every release. Only a call that finds no free
//! permit registers as a waiter and queues (in FIFO order) on the
//! semaphore; while any call waits, released permits go to the semaphore,
//! which hands them to the waiters in turn.
//!
//! A permit is in exactly one of three places: in `free`, in the
//! semaphore, or held by a call. Both sides of the hand-off write first and
//! then read (sequentially consistent): a releaser adds to `free`, then
//! looks for waiters; a waiter registers, then looks at `free` once more.
//! So whichever comes second sees the other, and a permit cannot sit in
//! `free` while a waiter sleeps. A permit left in the semaphore by a
//! waiter that gave up is taken there by the next call that waits (which
//! then finds it at once).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A limit's permits, counted for all its services and their clones.
pub(super) struct Count {
    free: AtomicUsize,
    waiters: AtomicUsize,
    // Holds permits only while calls wait; never closed.
    queue: Arc<Semaphore>,
}

impl Count {
    fn new(max: usize) -> Self {
        Count {
            free: AtomicUsize::new(max),
            waiters: AtomicUsize::new(0),
            queue: Arc::new(Semaphore::new(0)),
        }
    }

    /// Takes a free permit without waiting, if there is one.
    #[inline]
    fn try_take(&self) -> bool {
        let mut free = self.free.load(SeqCst);
        while free > 0 {
            match self
                .free
                .compare_exchange_weak(free, free - 1, SeqCst, SeqCst)
            {
                Ok(_) => return true,
                Err(now) => free = now,
            }
        }
        false
    }

    /// Gives a permit back: to a waiter if there is one, else to `free`.
    #[inline]
    fn give_back(&self) {
        if self.waiters.load(SeqCst) > 0 {
            self.queue.add_permits(1);
            return;
        }
        self.free.fetch_add(1, SeqCst);
        // A call may have started to wait in between: if the permit is
        // still free, it is that call's.
        if self.waiters.load(SeqCst) > 0 && self.try_take() {
            self.queue.add_permits(1);
        }
    }
}

impl fmt::Debug for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permits")
            .field("free", &self.free.load(SeqCst))
            .field("waiters", &self.waiters.load(SeqCst))
            .finish()
    }
}

/// One service's handle on a limit's [`Count`]. A held permit keeps a
/// reference on its service's handle, not on the count: services (a
/// toolbox keeps one per thread) then take and drop reference counts of
/// their own, and only the count itself is written by every call.
#[derive(Debug)]
pub(super) struct Permits(Arc<Count>);

impl Permits {
    pub(super) fn new(max: usize) -> Self {
        Permits(Arc::new(Count::new(max)))
    }

    /// Another handle on the same count.
    pub(super) fn handle(&self) -> Self {
        Permits(Arc::clone(&self.0))
    }
}

impl std::ops::Deref for Permits {
    type Target = Count;

    #[inline]
    fn deref(&self) -> &Count {
        &self.0
    }
}

/// A call that waits for a permit: registered as a waiter until it has one
/// or gives up (dropped).
#[derive(Debug)]
pub(super) struct Waiter {
    permits: Arc<Permits>,
}

impl Waiter {
    /// Registers a call that found no free permit. `Err` gives the permit
    /// at once when one came free as it registered.
    pub(super) fn register(permits: &Arc<Permits>) -> Result<Self, Permit> {
        permits.waiters.fetch_add(1, SeqCst);
        let waiter = Waiter {
            permits: Arc::clone(permits),
        };
        if permits.try_take() {
            drop(waiter);
            return Err(Permit::Own(OwnPermit(Arc::clone(permits))));
        }
        Ok(waiter)
    }

    /// The semaphore to queue on.
    pub(super) fn queue(&self) -> Arc<Semaphore> {
        Arc::clone(&self.permits.queue)
    }

    /// The permit this waiter was handed by the queue.
    pub(super) fn served(self, permit: OwnedSemaphorePermit) -> Permit {
        // The queue's permit becomes one of ours: given back through
        // `give_back`, to the next waiter or to `free`.
        permit.forget();
        Permit::Own(OwnPermit(Arc::clone(&self.permits)))
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.permits.waiters.fetch_sub(1, SeqCst);
    }
}

/// A held permit, given back when dropped (each variant is held for its
/// `Drop`, never read).
#[derive(Debug)]
#[allow(dead_code)]
pub(crate) enum Permit {
    /// One of a limit's own permits.
    Own(OwnPermit),
    /// A permit of a semaphore the caller gave the limit.
    Semaphore(OwnedSemaphorePermit),
}

impl Permit {
    /// Takes one of `permits` without waiting.
    #[inline]
    pub(super) fn try_own(permits: &Arc<Permits>) -> Option<Permit> {
        permits
            .try_take()
            .then(|| Permit::Own(OwnPermit(Arc::clone(permits))))
    }
}

/// One of a limit's own permits.
#[derive(Debug)]
pub(crate) struct OwnPermit(Arc<Permits>);

impl Drop for OwnPermit {
    #[inline]
    fn drop(&mut self) {
        self.0.give_back();
    }
}
