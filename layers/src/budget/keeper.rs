//! The whole output of a call, gathered while it streams ([`Keeper`]) and
//! handed to its store once the call is cut ([`Putting`]).

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use tokio::time::Sleep;

use super::notice::{Kept, KeptOutput};
use super::store::{OutputStore, OutputStoreError, WholeOutput, STORE_TIMEOUT};
use crate::Output;

/// The text of a call's output as a model reads it, gathered while it
/// streams: at most the store's cap of it, and the length of all of it.
pub(super) struct Keeper {
    store: Arc<dyn OutputStore>,
    text: String,
    cap: usize,
    /// The whole output's length, kept or not.
    len: usize,
    /// Texts joined so far (the first comes without a separator).
    pieces: usize,
    /// Where the part the model does not read begins.
    omitted_from: usize,
}

impl Keeper {
    pub(super) fn new(store: &Arc<dyn OutputStore>) -> Self {
        Keeper {
            store: Arc::clone(store),
            text: String::new(),
            cap: store.max_output_bytes(),
            len: 0,
            pieces: 0,
            omitted_from: 0,
        }
    }

    /// Adds `item`'s text; returns where it starts in the whole output.
    pub(super) fn add<T: Output>(&mut self, item: &T) -> usize {
        let Some(text) = item.model_text() else {
            return self.len;
        };
        if self.pieces > 0 {
            self.push(T::JOIN);
        }
        self.pieces += 1;
        let start = self.len;
        self.push(text);
        start
    }

    fn push(&mut self, piece: &str) {
        // Once a piece did not fit, nothing after it is kept either.
        if self.len == self.text.len() {
            let room = self.cap.saturating_sub(self.text.len());
            self.text
                .push_str(&piece[..piece.floor_char_boundary(room)]);
        }
        self.len += piece.len();
    }

    pub(super) fn omitted_from(&mut self, at: usize) {
        self.omitted_from = at;
    }

    /// Hands the output to the store; `tail` is the text of the items the
    /// model reads after the notice, which ends the omitted part.
    pub(super) fn put<'a, T: Output + 'a>(self, tail: impl Iterator<Item = &'a str>) -> Putting {
        let (mut tail_bytes, mut pieces) = (0, 0usize);
        for text in tail {
            tail_bytes += text.len();
            pieces += 1;
        }
        tail_bytes += T::JOIN.len() * pieces.saturating_sub(1);
        let keeper = self;
        let handle = toolstack::id::new_token();
        let output = KeptOutput {
            handle: handle.clone(),
            omitted: keeper.omitted_from..keeper.len.saturating_sub(tail_bytes),
            kept_bytes: keeper.text.len(),
            output_bytes: keeper.len,
            ttl: keeper.store.ttl(),
        };
        let whole = WholeOutput::new(keeper.text, keeper.len);
        let store = keeper.store;
        let put = catch_unwind(AssertUnwindSafe(|| store.put(&handle, whole)))
            .unwrap_or_else(|_| Box::pin(std::future::ready(Err(OutputStoreError::panicked()))));
        Putting {
            put: Some(put),
            deadline: None,
            output,
        }
    }
}

/// The store keeping a cut call's output: its answer, within
/// [`STORE_TIMEOUT`], is the [`Kept`] the notice tells.
pub(super) struct Putting {
    put: Option<BoxFuture<'static, Result<(), OutputStoreError>>>,
    // Armed only when the store does not answer at once.
    deadline: Option<Pin<Box<Sleep>>>,
    output: KeptOutput,
}

impl Putting {
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Kept> {
        let Some(put) = self.put.as_mut() else {
            return Poll::Ready(failed(&OutputStoreError::new("polled after it answered")));
        };
        let kept = match catch_unwind(AssertUnwindSafe(|| put.as_mut().poll(cx))) {
            Ok(Poll::Ready(Ok(()))) => Kept::Stored(self.output.clone()),
            Ok(Poll::Ready(Err(err))) => failed(&err),
            Err(_) => failed(&OutputStoreError::panicked()),
            Ok(Poll::Pending) => {
                let deadline = self
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(STORE_TIMEOUT)));
                if deadline.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                failed(&OutputStoreError::timed_out(STORE_TIMEOUT))
            }
        };
        self.put = None;
        Poll::Ready(kept)
    }
}

fn failed(err: &OutputStoreError) -> Kept {
    tracing::warn!(
        error = %err,
        "the budget could not keep a cut output; the cut stands, and the notice says so"
    );
    Kept::Failed(err.to_string())
}

impl fmt::Debug for Putting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Putting")
            .field("handle", &self.output.handle)
            .finish_non_exhaustive()
    }
}
