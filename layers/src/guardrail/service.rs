use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use toolstack::guardrail::{GuardrailEvents, Target};
use toolstack::model::{ChatRequest, Message};
use toolstack::{ErrorKind, ToolError, ToolRequest};
use tower_service::Service;

use super::check::{check_span, raised, run_chain, CallChecks, ChainOutcome, Settings};
use super::future::{GuardedStream, ResponseFuture};
use crate::{Output, Request};

/// Checks the calls of the service it wraps. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct Guarded<S> {
    pub(super) inner: S,
    pub(super) settings: Arc<Settings>,
}

impl<S> Guarded<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// A request a guardrail can check: a tool call or a model call.
pub trait GuardedRequest: Request + Send + Sized + 'static + sealed::Sealed {
    /// What its input is ([`Target::ToolCall`] or [`Target::LlmInput`]).
    const INPUT: Target;
    /// What its output is ([`Target::ToolResult`] or [`Target::LlmOutput`]).
    const OUTPUT: Target;

    /// The tool's or the model's name, shared where the request has it so.
    #[doc(hidden)]
    fn shared_name(&self) -> Arc<str> {
        Arc::from(self.name())
    }

    /// The texts its input guardrails check, each with where it is.
    #[doc(hidden)]
    fn inputs(&self) -> Vec<(usize, Arc<str>)>;

    /// Puts `text` where the input at `at` was.
    #[doc(hidden)]
    fn redact_input(&mut self, at: usize, text: String);

    /// What a refused input answers: a tool's call fails
    /// [`Denied`](ErrorKind::Denied), for the model to read; a model's is
    /// answered with the reason as its text.
    #[doc(hidden)]
    fn refused<T: Output>(guardrail: &str, reason: &str) -> Result<T, ToolError>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for toolstack::ToolRequest {}
    impl Sealed for toolstack::model::ChatRequest {}
}

impl GuardedRequest for ToolRequest {
    const INPUT: Target = Target::ToolCall;
    const OUTPUT: Target = Target::ToolResult;

    /// The dispatched tool's name, shared with its description.
    fn shared_name(&self) -> Arc<str> {
        match self.info() {
            Some(info) if info.name() == self.name() => Arc::clone(info.name_shared()),
            _ => Arc::from(self.name()),
        }
    }

    fn inputs(&self) -> Vec<(usize, Arc<str>)> {
        vec![(0, Arc::from(self.arguments()))]
    }

    fn redact_input(&mut self, _: usize, text: String) {
        self.set_arguments(text);
    }

    fn refused<T: Output>(guardrail: &str, reason: &str) -> Result<T, ToolError> {
        Err(ToolError::new(
            ErrorKind::Denied,
            format!("guardrail `{guardrail}` refused this call: {reason}"),
        ))
    }
}

impl GuardedRequest for ChatRequest {
    const INPUT: Target = Target::LlmInput;
    const OUTPUT: Target = Target::LlmOutput;

    /// Every user and tool message, each time: a model is sent the whole
    /// conversation, so a message let through unredacted on one turn would
    /// be sent again on the next.
    fn inputs(&self) -> Vec<(usize, Arc<str>)> {
        self.messages
            .iter()
            .enumerate()
            .filter_map(|(at, message)| match message {
                Message::User { content } | Message::Tool { content, .. } => {
                    Some((at, Arc::from(content.as_str())))
                }
                _ => None,
            })
            .collect()
    }

    fn redact_input(&mut self, at: usize, text: String) {
        if let Some(Message::User { content } | Message::Tool { content, .. }) =
            Arc::make_mut(&mut self.messages).get_mut(at)
        {
            *content = text;
        }
    }

    fn refused<T: Output>(guardrail: &str, reason: &str) -> Result<T, ToolError> {
        Ok(T::from_text(format!(
            "[this request was refused by guardrail `{guardrail}`: {reason}]"
        )))
    }
}

impl<S, R, St, T> Service<R> for Guarded<S>
where
    R: GuardedRequest,
    S: Service<R, Response = St> + Clone + Send + 'static,
    S::Error: Into<ToolError>,
    S::Future: Send + 'static,
    St: Stream<Item = Result<T, ToolError>> + Send + 'static,
    T: Output + Send + 'static,
{
    type Response = GuardedStream<St, T>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future, St, T>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: R) -> Self::Future {
        let settings = &self.settings;
        if settings.input.is_empty() && settings.output.is_empty() {
            return ResponseFuture::direct(self.inner.call(request), None);
        }
        let call = Arc::new(CallChecks {
            settings: Arc::clone(settings),
            name: request.shared_name(),
            call_id: (!request.id().is_empty()).then(|| Arc::from(request.id())),
            events: request.extensions().get::<GuardrailEvents>().cloned(),
            // Nothing listens: each check's span is then a disabled one,
            // made (at no cost) as it runs.
            output_spans: if tracing::enabled!(tracing::Level::INFO) {
                settings
                    .output
                    .iter()
                    .map(|guardrail| check_span(guardrail, R::OUTPUT))
                    .collect()
            } else {
                Vec::new()
            },
            output: R::OUTPUT,
        });
        let output = (!settings.output.is_empty()).then(|| Arc::clone(&call));
        if settings.input.is_empty() {
            return ResponseFuture::direct(self.inner.call(request), output);
        }
        // The checks come first; the service, readied, is called after them.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::checking(Box::pin(async move {
            for (at, text) in request.inputs() {
                let outcome = run_chain(
                    call.chain_context(),
                    &call.settings.input,
                    R::INPUT,
                    text,
                    0,
                    None,
                )
                .await;
                match outcome {
                    ChainOutcome::Pass(None) => {}
                    ChainOutcome::Pass(Some(text)) => request.redact_input(at, text),
                    ChainOutcome::Stop {
                        guardrail,
                        action: toolstack::guardrail::Action::Raised,
                        reason,
                    } => return Err(raised(&guardrail, &reason)),
                    ChainOutcome::Stop {
                        guardrail, reason, ..
                    } => return R::refused(&guardrail, &reason).map(GuardedStream::answered),
                }
            }
            let stream = inner.call(request).await.map_err(Into::into)?;
            Ok(GuardedStream::new(stream, output))
        }))
    }
}
