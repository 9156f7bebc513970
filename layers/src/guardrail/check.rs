//! One guardrail: its name and its check ([`Guardrail`]), what the check
//! sees ([`Subject`]) and says ([`Verdict`]); and a chain of them run over
//! one text, bounded in time and against panics.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::{poll_fn, BoxFuture};
use futures_util::FutureExt;
use toolstack::guardrail::{Action, GuardrailEvents, GuardrailTriggered, Target};
use toolstack::{BoxError, ErrorKind, ToolError};
use tower_service::Service;
use tracing::Span;

/// What a check says of what it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Nothing found: the call goes on.
    Allow,
    /// The call stops here. On a tool call's arguments the tool is not
    /// called and the model reads a [`Denied`](toolstack::ErrorKind::Denied)
    /// error with the reason; on a model's input the model is not called
    /// and the answer is the reason; on output, the stream is cut before
    /// the offending item, which is replaced with the reason.
    Reject {
        /// Why, for the model (and the trace).
        reason: String,
    },
    /// The text is replaced with `text`, and the call goes on (the next
    /// guardrail sees the replacement). On streamed output, `text`
    /// replaces the new item's text only ([`Subject::new_text`]).
    Redact {
        /// What to put instead.
        text: String,
        /// Why (for the trace and the events).
        reason: String,
    },
    /// The call ends with an [`ErrorKind::Guardrail`](toolstack::ErrorKind::Guardrail)
    /// error, and an agent's run ends with
    /// [`StopReason::Guardrail`](toolstack::agent::StopReason::Guardrail).
    Raise {
        /// Why (the error's message says it).
        reason: String,
    },
}

impl Verdict {
    /// A rejection, with the reason the model reads.
    pub fn reject(reason: impl Into<String>) -> Self {
        Verdict::Reject {
            reason: reason.into(),
        }
    }

    /// A redaction: `text` instead of what was checked.
    pub fn redact(text: impl Into<String>, reason: impl Into<String>) -> Self {
        Verdict::Redact {
            text: text.into(),
            reason: reason.into(),
        }
    }

    /// A raise: the call, and an agent's run, end.
    pub fn raise(reason: impl Into<String>) -> Self {
        Verdict::Raise {
            reason: reason.into(),
        }
    }
}

/// What a check sees.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Subject {
    /// What is checked: a tool call's arguments or output, a model's input
    /// or output.
    pub target: Target,
    /// The tool's name, or the model's (empty when the request names none).
    pub name: Arc<str>,
    /// The tool call's id; `None` for a model call.
    pub call_id: Option<Arc<str>>,
    /// The text: the arguments; one message of a model's input; or, for
    /// streamed output, the end of what already passed (at most the
    /// layer's [`lookback`](super::GuardrailLayer::lookback)) followed by
    /// the new item's text, so that a match split across items is seen.
    pub text: Arc<str>,
    /// Where the new item's text begins in [`text`](Self::text) (0 but for
    /// streamed output).
    pub new_at: usize,
}

impl Subject {
    /// The text not yet passed on: all of it, but for streamed output,
    /// where it is the new item's.
    pub fn new_text(&self) -> &str {
        self.text.get(self.new_at..).unwrap_or_default()
    }
}

type CheckFn = Arc<dyn Fn(Subject) -> BoxFuture<'static, Result<Verdict, BoxError>> + Send + Sync>;

/// A named check: any async function or `Service` from a [`Subject`] to a
/// [`Verdict`] — a pattern, a PII detector, a call to a classifier model.
#[derive(Clone)]
pub struct Guardrail {
    name: Arc<str>,
    check: CheckFn,
}

impl Guardrail {
    /// A guardrail named `name` whose check is the async function `check`.
    ///
    /// ```
    /// use toolstack_layers::guardrail::{Guardrail, Verdict};
    ///
    /// let no_secrets = Guardrail::from_fn("no_secrets", |subject| async move {
    ///     if subject.new_text().contains("sk-") {
    ///         Verdict::redact(subject.new_text().replace("sk-", "[key]-"), "an API key")
    ///     } else {
    ///         Verdict::Allow
    ///     }
    /// });
    /// assert_eq!(no_secrets.name(), "no_secrets");
    /// ```
    pub fn from_fn<F, Fut>(name: impl Into<Arc<str>>, check: F) -> Self
    where
        F: Fn(Subject) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Verdict> + Send + 'static,
    {
        Guardrail {
            name: name.into(),
            check: Arc::new(move |subject| {
                let verdict = check(subject);
                Box::pin(async move { Ok(verdict.await) })
            }),
        }
    }

    /// A guardrail named `name` whose check is `service` (each check calls
    /// a clone, once it is ready); its errors are the check failing (see
    /// [`OnCheckError`](super::OnCheckError)).
    pub fn from_service<S>(name: impl Into<Arc<str>>, service: S) -> Self
    where
        S: Service<Subject, Response = Verdict> + Clone + Send + Sync + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
    {
        Guardrail {
            name: name.into(),
            check: Arc::new(move |subject| {
                let mut service = service.clone();
                Box::pin(async move {
                    poll_fn(|cx: &mut Context<'_>| -> Poll<Result<(), BoxError>> {
                        service.poll_ready(cx).map_err(Into::into)
                    })
                    .await?;
                    service.call(subject).await.map_err(Into::into)
                })
            }),
        }
    }

    /// The guardrail's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Guardrail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guardrail")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What a guardrail does when its check fails — panics, takes longer
/// than [`GuardrailLayer::check_timeout`](super::GuardrailLayer::check_timeout),
/// or returns an error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnCheckError {
    /// The call is refused, as by [`Verdict::Reject`], and the reason
    /// says the check failed (the default: a guardrail that cannot decide
    /// lets nothing through).
    #[default]
    Refuse,
    /// The content passes, with a warning in the trace.
    Allow,
}

/// What a chain runs with: the layer's bounds, and the call it checks
/// (who is called, where triggers are told).
pub(super) struct ChainContext<'a> {
    pub(super) timeout: Duration,
    pub(super) on_error: OnCheckError,
    pub(super) name: &'a Arc<str>,
    pub(super) call_id: &'a Option<Arc<str>>,
    pub(super) events: Option<&'a GuardrailEvents>,
}

/// What a chain made of one text.
pub(super) enum ChainOutcome {
    /// It goes on: as it was, or replaced.
    Pass(Option<String>),
    /// It stops here.
    Stop {
        guardrail: Arc<str>,
        action: Action,
        reason: String,
    },
}

/// The longest reason a message or an event repeats, in bytes.
const MAX_REASON: usize = 1_000;

/// Runs `chain` in order over `text` (its new part from `new_at`): a
/// redaction is what the next guardrail sees; the first rejection, raise
/// or refused failure stops it. Each guardrail's check runs in its span
/// (`spans[i]` for a stream's, or a new one per check), which records the
/// decision; a trigger is an event there and goes to `events`, before the
/// outcome is returned.
pub(super) async fn run_chain(
    run: ChainContext<'_>,
    chain: &[Guardrail],
    target: Target,
    mut text: Arc<str>,
    new_at: usize,
    spans: Option<&[Span]>,
) -> ChainOutcome {
    let mut replaced = None;
    for (i, guardrail) in chain.iter().enumerate() {
        let span = match spans.and_then(|spans| spans.get(i)) {
            Some(span) => span.clone(),
            None => check_span(guardrail, target),
        };
        let subject = Subject {
            target,
            name: Arc::clone(run.name),
            call_id: run.call_id.clone(),
            text: Arc::clone(&text),
            new_at,
        };
        let verdict = check(guardrail, subject, run.timeout, &span).await;
        let (action, reason, stop) = match verdict {
            Ok(Verdict::Allow) => continue,
            Ok(Verdict::Redact {
                text: new,
                reason,
            }) => {
                let mut whole = String::with_capacity(new_at + new.len());
                whole.push_str(&text[..new_at]);
                whole.push_str(&new);
                text = Arc::from(whole);
                replaced = Some(new);
                (Action::Redacted, reason, false)
            }
            Ok(Verdict::Reject { reason }) => (Action::Rejected, reason, true),
            Ok(Verdict::Raise { reason }) => (Action::Raised, reason, true),
            Err(why) => match run.on_error {
                OnCheckError::Allow => {
                    tracing::warn!(
                        parent: &span,
                        gen_ai.guardrail.name = %guardrail.name,
                        "guardrail check failed ({why}); the content passes, as set"
                    );
                    continue;
                }
                OnCheckError::Refuse => (
                    Action::Failed,
                    format!("its check failed ({why}), and a guardrail that cannot decide lets nothing through"),
                    true,
                ),
            },
        };
        let reason = bounded(reason);
        span.record("gen_ai.guardrail.decision", action.as_str());
        span.record("gen_ai.guardrail.reason", reason.as_str());
        if matches!(action, Action::Raised | Action::Failed) {
            span.record("error.type", action.as_str());
        }
        tracing::info!(
            parent: &span,
            gen_ai.guardrail.name = %guardrail.name,
            gen_ai.guardrail.target = target.as_str(),
            gen_ai.guardrail.decision = action.as_str(),
            gen_ai.guardrail.reason = %reason,
            "guardrail triggered"
        );
        if let Some(events) = run.events {
            events
                .send(GuardrailTriggered::new(
                    guardrail.name(),
                    target,
                    run.name.as_ref(),
                    run.call_id.as_deref().map(str::to_owned),
                    action,
                    reason.clone(),
                ))
                .await;
        }
        if stop {
            return ChainOutcome::Stop {
                guardrail: Arc::clone(&guardrail.name),
                action,
                reason,
            };
        }
    }
    ChainOutcome::Pass(replaced)
}

/// The span of one guardrail's checks: `apply_guardrail {name}`.
pub(super) fn check_span(guardrail: &Guardrail, target: Target) -> Span {
    tracing::info_span!(
        "apply_guardrail",
        otel.name = %format_args!("apply_guardrail {}", guardrail.name),
        otel.kind = "internal",
        gen_ai.operation.name = "apply_guardrail",
        gen_ai.guardrail.name = %guardrail.name,
        gen_ai.guardrail.target = target.as_str(),
        gen_ai.guardrail.decision = "allowed",
        gen_ai.guardrail.reason = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// One check, in `span`, bounded by `timeout`; a panic (in making the
/// future or in polling it), the timeout or the check's error is `Err`
/// with what happened.
async fn check(
    guardrail: &Guardrail,
    subject: Subject,
    timeout: Duration,
    span: &Span,
) -> Result<Verdict, String> {
    let made = {
        let _entered = span.enter();
        std::panic::catch_unwind(AssertUnwindSafe(|| (guardrail.check)(subject)))
    };
    let Ok(future) = made else {
        return Err("it panicked".to_owned());
    };
    let checked =
        tracing::Instrument::instrument(AssertUnwindSafe(future).catch_unwind(), span.clone());
    match tokio::time::timeout(timeout, checked).await {
        Err(_) => Err(format!("it did not answer within {timeout:?}")),
        Ok(Err(_)) => Err("it panicked".to_owned()),
        Ok(Ok(Err(err))) => Err(format!("it returned an error: {err}")),
        Ok(Ok(Ok(verdict))) => Ok(verdict),
    }
}

/// `reason`, cut at a character boundary to at most [`MAX_REASON`] bytes.
fn bounded(mut reason: String) -> String {
    if reason.len() > MAX_REASON {
        reason.truncate(reason.floor_char_boundary(MAX_REASON));
        reason.push('…');
    }
    reason
}

/// What a guardrail layer checks with: its guardrails, their bounds.
#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub(super) input: Vec<Guardrail>,
    pub(super) output: Vec<Guardrail>,
    pub(super) timeout: Duration,
    pub(super) on_error: OnCheckError,
    pub(super) lookback: usize,
}

/// What one call's checks share: the layer's settings, who is called, where
/// triggers are told, and the output guardrails' spans.
pub(super) struct CallChecks {
    pub(super) settings: Arc<Settings>,
    pub(super) name: Arc<str>,
    pub(super) call_id: Option<Arc<str>>,
    pub(super) events: Option<GuardrailEvents>,
    pub(super) output_spans: Vec<Span>,
    pub(super) output: Target,
}

impl CallChecks {
    pub(super) fn chain_context(&self) -> ChainContext<'_> {
        ChainContext {
            timeout: self.settings.timeout,
            on_error: self.settings.on_error,
            name: &self.name,
            call_id: &self.call_id,
            events: self.events.as_ref(),
        }
    }
}

/// The error of a raise.
pub(super) fn raised(guardrail: &str, reason: &str) -> ToolError {
    ToolError::new(
        ErrorKind::Guardrail,
        format!("guardrail `{guardrail}` raised: {reason}"),
    )
}
