//! The vocabulary of approving a tool call before it runs: what is asked
//! ([`ApprovalRequest`]), what is decided ([`Decision`], [`Decided`]), and
//! where a UI hears of both ([`ApprovalEvents`]); and (feature `http`, for
//! the AI SDK endpoint) the keys that sign a request so that an answer
//! cannot be forged (`ApprovalKeys`).
//!
//! The approval layer of `toolstack-layers` asks; an
//! [`Agent`](crate::agent::Agent) puts an [`ApprovalEvents`] in each tool
//! call's extensions and streams what it hears as
//! [`AgentEvent::ApprovalRequested`](crate::agent::AgentEvent::ApprovalRequested)
//! and [`AgentEvent::ApprovalDecided`](crate::agent::AgentEvent::ApprovalDecided).

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::ToolError;

#[cfg(feature = "http")]
mod signature;

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use signature::{input_digest, ApprovalKeys, KeyError, SignatureError, MIN_SECRET_BYTES};

/// A call waiting for approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The call's id (a model's tool-call id).
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments, as sent.
    pub arguments: String,
    /// Whether a policy decided it ([`Policy::Allow`] or [`Policy::Deny`]
    /// in the approval layer), so nobody is asked: a UI shows the decision.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub automatic: bool,
    /// The policy's words: why it is asked, or why it was decided so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ApprovalRequest {
    /// A request to approve the call `call_id` of `tool` with `arguments`,
    /// put to whoever decides.
    pub fn new(
        call_id: impl Into<String>,
        tool: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ApprovalRequest {
            call_id: call_id.into(),
            tool: tool.into(),
            arguments: arguments.into(),
            automatic: false,
            reason: None,
        }
    }
}

/// What an approval layer's policy says of a call, before anyone is asked
/// (`ApprovalLayer::policy` in `toolstack-layers`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// Not a call to approve: it runs, and nothing is told.
    Pass,
    /// Allowed by the policy: it runs, and the decision is told as automatic.
    Allow {
        /// Why (a UI shows it).
        reason: String,
    },
    /// Denied by the policy: the model reads the reason; the decision is
    /// told as automatic.
    Deny {
        /// Why, for the model and the UI.
        reason: String,
    },
    /// Someone decides: the person behind the call or the layer's approver.
    Ask {
        /// Why they are asked, if the policy says.
        reason: Option<String>,
    },
}

impl Policy {
    /// An automatic allowance.
    pub fn allow(reason: impl Into<String>) -> Self {
        Policy::Allow {
            reason: reason.into(),
        }
    }

    /// An automatic denial.
    pub fn deny(reason: impl Into<String>) -> Self {
        Policy::Deny {
            reason: reason.into(),
        }
    }

    /// A question, with why it is asked.
    pub fn ask(reason: impl Into<String>) -> Self {
        Policy::Ask {
            reason: Some(reason.into()),
        }
    }
}

/// What an approver decides for one call. Serializes as `"allow"`,
/// `{"deny": {"reason"}}` or `{"modify": {"arguments"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The call runs as asked.
    Allow,
    /// The call does not run: the model reads a `Denied` error with the
    /// reason, and can try something else.
    Deny {
        /// Why, for the model.
        reason: String,
    },
    /// The call runs with these arguments instead (validated as any).
    Modify {
        /// The arguments to run with.
        arguments: String,
    },
}

impl Decision {
    /// A denial, with the reason the model reads.
    pub fn deny(reason: impl Into<String>) -> Self {
        Decision::Deny {
            reason: reason.into(),
        }
    }

    /// An approval with other arguments.
    pub fn modify(arguments: impl Into<String>) -> Self {
        Decision::Modify {
            arguments: arguments.into(),
        }
    }

    /// `allow`, `deny` or `modified`: the decision's outcome as spans
    /// record it (`gen_ai.tool.call.decision`).
    pub fn outcome(&self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny { .. } => "deny",
            Decision::Modify { .. } => "modified",
        }
    }
}

/// Who decided a call: a typed value, so a front end tells the person's
/// own answer from a policy's or an approver's without comparing names.
///
/// Serializes as `"policy"`, `{"approver": name}` or `{"caller": name}`;
/// a plain name (what earlier versions stored) reads as the caller when it
/// is `the user`, as an approver otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecidedBy {
    /// The approval layer's policy, at once ([`Policy::Allow`],
    /// [`Policy::Deny`]): nobody was asked.
    Policy,
    /// The approval layer's own approver, by the name the layer gives it
    /// (`approver` unless set: `an operator`, `a reviewer`).
    Approver(String),
    /// The person behind the call, by the name their [`CallerApprover`]
    /// or the resume that brought their answer gives (`the user`).
    Caller(String),
}

impl DecidedBy {
    /// The person behind the call, named `by`.
    pub fn caller(by: impl Into<String>) -> Self {
        DecidedBy::Caller(by.into())
    }

    /// An approver named `by`.
    pub fn approver(by: impl Into<String>) -> Self {
        DecidedBy::Approver(by.into())
    }

    /// The name spans and events record (`gen_ai.tool.call.decided_by`):
    /// `policy`, or the approver's or caller's name.
    pub fn name(&self) -> &str {
        match self {
            DecidedBy::Policy => "policy",
            DecidedBy::Approver(name) | DecidedBy::Caller(name) => name,
        }
    }

    /// Whether the person behind the call decided (their answer is
    /// already in their front end).
    pub fn is_caller(&self) -> bool {
        matches!(self, DecidedBy::Caller(_))
    }
}

impl fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> Deserialize<'de> for DecidedBy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Typed {
            Policy,
            Approver(String),
            Caller(String),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Typed(Typed),
            Name(String),
        }
        Ok(match Either::deserialize(deserializer)? {
            Either::Typed(Typed::Policy) => DecidedBy::Policy,
            Either::Typed(Typed::Approver(name)) => DecidedBy::Approver(name),
            Either::Typed(Typed::Caller(name)) => DecidedBy::Caller(name),
            // Stored before the decider was typed: a name.
            Either::Name(name) if name == "the user" => DecidedBy::Caller(name),
            Either::Name(name) if name == "policy" => DecidedBy::Policy,
            Either::Name(name) => DecidedBy::Approver(name),
        })
    }
}

/// A decision made, as a UI shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// The call.
    pub request: ApprovalRequest,
    /// What was decided.
    pub decision: Decision,
    /// Who decided.
    pub by: DecidedBy,
}

/// A decision already made for one call — stored with its run, or
/// brought by a resume with the person's answer — which binds: an
/// approval layer that finds it in the call's extensions (for the call's
/// id) obeys it without asking anyone and before its policy. A stored
/// denial is never asked again nor overridden; a stored allowance is not
/// asked again.
///
/// An [`Agent`](crate::agent::Agent) puts one in a resumed call's
/// extensions; a denial it does not even hand to the toolbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingDecision {
    /// The call it is for (a layer ignores it on any other call).
    pub call_id: String,
    /// The decision.
    pub decision: Decision,
    /// Who made it.
    pub by: DecidedBy,
}

impl BindingDecision {
    /// `decision`, made by `by`, for the call `call_id`.
    pub fn new(call_id: impl Into<String>, decision: Decision, by: DecidedBy) -> Self {
        BindingDecision {
            call_id: call_id.into(),
            decision,
            by,
        }
    }

    /// The binding decision `request`'s extensions carry for it, if any.
    pub fn of(request: &crate::ToolRequest) -> Option<&BindingDecision> {
        request
            .extensions()
            .get::<BindingDecision>()
            .filter(|binding| binding.call_id == request.id())
    }
}

/// What the approval layer tells of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalEvent {
    /// A call waits for a decision.
    Requested(ApprovalRequest),
    /// It was decided.
    Decided(Decided),
}

type Sink = Arc<dyn Fn(ApprovalEvent) -> BoxFuture<'static, Result<(), ToolError>> + Send + Sync>;

/// Where the approval layer sends its [`ApprovalEvent`]s: put one in a
/// call's extensions. The layer awaits each send, so a consumer that
/// reads slowly slows the call, never loses an event; a sink that cannot
/// take an event ([`fallible`](Self::fallible): an agent that cannot
/// checkpoint the call's state) stops the call — it is neither asked
/// about nor run.
#[derive(Clone)]
pub struct ApprovalEvents {
    sink: Sink,
}

impl ApprovalEvents {
    /// Events go to `sink`.
    pub fn new<F, Fut>(sink: F) -> Self
    where
        F: Fn(ApprovalEvent) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        ApprovalEvents {
            sink: Arc::new(move |event| {
                let sent = sink(event);
                Box::pin(async move {
                    sent.await;
                    Ok(())
                })
            }),
        }
    }

    /// Events go to `sink`, which may refuse one: the call then ends with
    /// its error, without being asked about (a `Requested` refused) or run
    /// (a `Decided` refused).
    pub fn fallible<F, Fut>(sink: F) -> Self
    where
        F: Fn(ApprovalEvent) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), ToolError>> + Send + 'static,
    {
        ApprovalEvents {
            sink: Arc::new(move |event| Box::pin(sink(event))),
        }
    }

    /// Sends `event`; an error when the sink refused it.
    pub async fn send(&self, event: ApprovalEvent) -> Result<(), ToolError> {
        (self.sink)(event).await
    }
}

impl fmt::Debug for ApprovalEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalEvents").finish_non_exhaustive()
    }
}

type Decide = Arc<dyn Fn(&ApprovalRequest) -> BoxFuture<'static, Decision> + Send + Sync>;

/// The person at the other end of the caller's connection, able to
/// decide: a front end that can show a call and take an answer (the AI
/// SDK chat endpoint, [`http::ai_sdk`](crate::http::ai_sdk)) puts one in a
/// run's extensions. An approval layer set to
/// [`caller_decides`](https://docs.rs/toolstack-layers) asks it instead
/// of its own approver when a call carries one.
#[derive(Clone)]
pub struct CallerApprover {
    decide: Decide,
    by: Arc<str>,
}

impl CallerApprover {
    /// Decisions come from `decide`; `by` names who decides (`the user`).
    pub fn new<F, Fut>(by: &str, decide: F) -> Self
    where
        F: Fn(&ApprovalRequest) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Decision> + Send + 'static,
    {
        CallerApprover {
            decide: Arc::new(move |request| Box::pin(decide(request))),
            by: Arc::from(by),
        }
    }

    /// The decision for `request`, as long as the person takes.
    pub fn decide(&self, request: &ApprovalRequest) -> BoxFuture<'static, Decision> {
        (self.decide)(request)
    }

    /// Who decides, by name.
    pub fn by(&self) -> &str {
        &self.by
    }

    /// Who decides, as a decision records it: the caller.
    pub fn decided_by(&self) -> DecidedBy {
        DecidedBy::Caller(self.by.to_string())
    }
}

impl fmt::Debug for CallerApprover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallerApprover")
            .field("by", &self.by)
            .finish_non_exhaustive()
    }
}
