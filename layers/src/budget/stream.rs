use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use toolstack::ToolError;

use super::keeper::{Keeper, Putting};
use super::notice::{Cut, Kept};
use super::{BudgetLayer, Tap};
use crate::Output;

/// Where a budgeted stream is.
enum Phase {
    /// Items pass.
    Head,
    /// The head is full: items go to the tail.
    Tail,
    /// The inner stream ended (or failed): the notice and the tail go out.
    Ending,
}

/// A budget's limits, split between the head and the tail.
pub(super) struct Limits {
    pub(super) head_items: usize,
    pub(super) head_bytes: usize,
    pub(super) tail_items: usize,
    pub(super) tail_bytes: usize,
}

pin_project! {
    /// A stream capped by a [`Budget`](super::Budget); see the [module docs](super).
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
        // The whole output's text, while it streams (with `keep`).
        keeper: Option<Box<Keeper>>,
        // Its store's answer, awaited before the notice.
        putting: Option<Putting>,
    }
}

impl<St, T: Output> Budgeted<St, T> {
    pub(super) fn new(inner: St, config: BudgetLayer, tap: Option<Tap<T>>) -> Self {
        Budgeted {
            limits: config.limits(),
            keeper: config
                .keep
                .as_ref()
                .map(|store| Box::new(Keeper::new(store))),
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
            putting: None,
        }
    }
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
                    if let Some(keeper) = this.keeper.take() {
                        let tail = this.tail.iter().filter_map(Output::model_text);
                        *this.putting = Some((*keeper).put::<T>(tail));
                    }
                    let kept = match this.putting {
                        Some(putting) => {
                            let kept = ready!(putting.poll(cx));
                            *this.putting = None;
                            Some(kept)
                        }
                        None => None,
                    };
                    let cut = Cut {
                        items: std::mem::take(this.cut_items),
                        bytes: std::mem::take(this.cut_bytes),
                        max_items: config.max_items,
                        max_bytes: config.max_bytes,
                        kept,
                    };
                    tracing::debug!(
                        items = cut.items,
                        bytes = cut.bytes,
                        kept = matches!(cut.kept, Some(Kept::Stored(_))),
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
                tap.see(&item);
            }
            // Progress, and output for programs (no model reads it).
            if !item.is_output() || item.is_for_programs() {
                return Poll::Ready(Some(Ok(item)));
            }
            // Where the item starts in the whole output, when it is kept.
            let start = this.keeper.as_mut().map(|keeper| keeper.add(&item));
            let len = item.byte_len();
            if let Phase::Head = this.phase {
                let (head_items, head_bytes) = (limits.head_items, limits.head_bytes);
                if *this.head_items < head_items && *this.head_bytes + len <= head_bytes {
                    *this.head_items += 1;
                    *this.head_bytes += len;
                    return Poll::Ready(Some(Ok(item)));
                }
                *this.phase = Phase::Tail;
                if let (Some(keeper), Some(start)) = (this.keeper.as_mut(), start) {
                    keeper.omitted_from(start);
                }
                // Text that does not fit keeps its beginning in the head.
                if *this.head_items < head_items && *this.head_bytes < head_bytes {
                    if let Some(text) = item.text_mut() {
                        let at = text.floor_char_boundary(head_bytes - *this.head_bytes);
                        if at > 0 {
                            let rest = text.split_off(at);
                            *this.head_items += 1;
                            *this.head_bytes += at;
                            if let (Some(keeper), Some(start)) = (this.keeper.as_mut(), start) {
                                keeper.omitted_from(start + at);
                            }
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
            let from = text.ceil_char_boundary(len - limits.tail_bytes);
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
            .field("keeping", &self.keeper.is_some())
            .finish()
    }
}
