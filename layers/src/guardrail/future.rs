use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use futures_util::future::BoxFuture;
use pin_project_lite::pin_project;
use toolstack::guardrail::Action;
use toolstack::ToolError;

use super::check::{raised, run_chain, CallChecks, ChainOutcome};
use crate::Output;

pin_project! {
    /// The future of a guarded call: its input checks, then the call.
    pub struct ResponseFuture<F, St, T> {
        #[pin]
        state: State<F, St, T>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, St, T> {
        // No input guardrail: the call is made at once.
        Direct {
            #[pin]
            future: F,
            output: Option<Arc<CallChecks>>,
        },
        // The input checks, and the call after them.
        Checking {
            future: BoxFuture<'static, Result<GuardedStream<St, T>, ToolError>>,
        },
    }
}

impl<F, St, T> ResponseFuture<F, St, T> {
    pub(super) fn direct(future: F, output: Option<Arc<CallChecks>>) -> Self {
        ResponseFuture {
            state: State::Direct { future, output },
        }
    }

    pub(super) fn checking(
        future: BoxFuture<'static, Result<GuardedStream<St, T>, ToolError>>,
    ) -> Self {
        ResponseFuture {
            state: State::Checking { future },
        }
    }
}

impl<F, E, St, T> Future for ResponseFuture<F, St, T>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
{
    type Output = Result<GuardedStream<St, T>, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Direct { future, output } => {
                let stream = ready!(future.poll(cx)).map_err(Into::into)?;
                Poll::Ready(Ok(GuardedStream::new(stream, output.take())))
            }
            StateProj::Checking { future } => future.as_mut().poll(cx),
        }
    }
}

pin_project! {
    /// The stream of a guarded call: each output item waits for the
    /// output guardrails' checks before it passes.
    pub struct GuardedStream<St, T> {
        #[pin]
        inner: Option<St>,
        call: Option<Arc<CallChecks>>,
        // The item held while its checks run, with its text.
        checking: Option<(T, Arc<str>, BoxFuture<'static, ChainOutcome>)>,
        // An item to give before anything else (a refusal's answer).
        queued: Option<Result<T, ToolError>>,
        // The end of the text already passed, for the next check.
        lookback: String,
    }
}

impl<St, T> GuardedStream<St, T> {
    pub(super) fn new(inner: St, call: Option<Arc<CallChecks>>) -> Self {
        GuardedStream {
            inner: Some(inner),
            call,
            checking: None,
            queued: None,
            lookback: String::new(),
        }
    }

    /// A stream of one item, with no call behind it.
    pub(super) fn answered(item: T) -> Self {
        GuardedStream {
            inner: None,
            call: None,
            checking: None,
            queued: Some(Ok(item)),
            lookback: String::new(),
        }
    }
}

impl<St, T> Stream for GuardedStream<St, T>
where
    St: Stream<Item = Result<T, ToolError>>,
    T: Output + Send + 'static,
{
    type Item = Result<T, ToolError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if let Some(item) = this.queued.take() {
            return Poll::Ready(Some(item));
        }
        loop {
            if let Some((_, _, check)) = this.checking.as_mut() {
                let outcome = ready!(check.as_mut().poll(cx));
                let Some((mut item, text, _)) = this.checking.take() else {
                    unreachable!("the item is held with its check")
                };
                match outcome {
                    ChainOutcome::Pass(replaced) => {
                        let max = this.call.as_ref().map_or(0, |call| call.settings.lookback);
                        match replaced {
                            None => remember(this.lookback, &text, max),
                            // Output for programs has no text to redact in
                            // place: it is not passed on at all.
                            Some(_) if item.is_for_programs() => continue,
                            Some(text) => {
                                remember(this.lookback, &text, max);
                                match item.text_mut() {
                                    Some(own) => *own = text,
                                    None => item = T::from_text(text),
                                }
                            }
                        }
                        return Poll::Ready(Some(Ok(item)));
                    }
                    ChainOutcome::Stop {
                        guardrail,
                        action,
                        reason,
                    } => {
                        // Nothing more is read: the tool's (or the model's)
                        // stream is dropped here.
                        this.inner.set(None);
                        return Poll::Ready(Some(if action == Action::Raised {
                            Err(raised(&guardrail, &reason))
                        } else {
                            Ok(T::from_text(format!(
                                "[the rest of this output was withheld by guardrail `{guardrail}`: {reason}]"
                            )))
                        }));
                    }
                }
            }
            let Some(inner) = this.inner.as_mut().as_pin_mut() else {
                return Poll::Ready(None);
            };
            let mut item = match ready!(inner.poll_next(cx)) {
                None => {
                    this.inner.set(None);
                    return Poll::Ready(None);
                }
                Some(Err(err)) => {
                    // An error is the last item: the stream behind it is
                    // dropped, never read again.
                    this.inner.set(None);
                    return Poll::Ready(Some(Err(err)));
                }
                Some(Ok(item)) => item,
            };
            let Some(call) = this.call.as_ref() else {
                return Poll::Ready(Some(Ok(item)));
            };
            if !item.is_output() {
                return Poll::Ready(Some(Ok(item)));
            }
            let new = output_text(&mut item);
            if new.is_empty() {
                return Poll::Ready(Some(Ok(item)));
            }
            let new_at = this.lookback.len();
            // The first item, or no lookback: the window is the new text.
            let window = if new_at == 0 {
                Arc::clone(&new)
            } else {
                let mut window = String::with_capacity(new_at + new.len());
                window.push_str(this.lookback);
                window.push_str(&new);
                Arc::from(window)
            };
            let call = Arc::clone(call);
            let check = Box::pin(async move {
                let spans = call.output_spans.as_slice();
                run_chain(
                    call.chain_context(),
                    &call.settings.output,
                    call.output,
                    window,
                    new_at,
                    Some(spans),
                )
                .await
            });
            *this.checking = Some((item, new, check));
        }
    }
}

/// The item's text as the model reads it (text, or JSON's text); empty for
/// an item that has none (an image, progress).
fn output_text<T: Output>(item: &mut T) -> Arc<str> {
    if let Some(text) = item.text_mut() {
        return Arc::from(text.as_str());
    }
    let mut bytes = Vec::new();
    let _ = item.write_output(&mut bytes);
    Arc::from(String::from_utf8_lossy(&bytes))
}

/// Keeps the last `max` bytes (at a character boundary) of what passed.
fn remember(lookback: &mut String, passed: &str, max: usize) {
    if max == 0 {
        return;
    }
    lookback.push_str(passed);
    if lookback.len() > max {
        let cut = lookback.ceil_char_boundary(lookback.len() - max);
        lookback.drain(..cut);
    }
}
