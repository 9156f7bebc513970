//! Asks before a tool call runs: allow it, deny it with a reason the model
//! reads, or allow it with other arguments.
//!
//! [`Approval`] asks an [`Approver`] — a closure, a channel a UI answers,
//! a person at a terminal — for each call its policy picks, and waits as
//! long as a human takes:
//!
//! * [`Decision::Allow`]: the call runs.
//! * [`Decision::Deny`]: it does not; the call fails with a
//!   [`Denied`](toolstack::ErrorKind::Denied) error carrying the reason,
//!   which the model reads and can act on (ask, try something else).
//! * [`Decision::Modify`]: it runs with the approver's arguments, which
//!   the tool (or a [`validate`](crate::validate) layer below) checks as
//!   any others.
//!
//! **Which calls ask** ([`ApprovalLayer::when`]): by default those of
//! tools not annotated read-only — destructive ones above all, as MCP's
//! annotations read; or any rule over the request (its tool, its
//! arguments, its caller in the extensions).
//!
//! **The wait is not the tool's time.** The tool is called only once the
//! decision is made: a [`timeout`](crate::timeout) layer *below* this one
//! starts counting then. (Above it, a deadline would count the wait.)
//!
//! **A decision made already binds.** A call whose extensions carry a
//! [`BindingDecision`] for it — an agent's resumed call, decided before
//! its process stopped or by the answer the resume brings — is decided by
//! it, before the policy and without asking anyone: a stored denial is
//! never overridden, a stored allowance never asked again, with or
//! without [`caller_decides`](ApprovalLayer::caller_decides).
//!
//! **Recorded**: each decision is a `tracing` event and is recorded on the
//! current span as `gen_ai.tool.call.decision` (`allow`, `deny`,
//! `modified`) and `gen_ai.tool.call.decided_by` — the trace layer's
//! `execute_tool` span declares both — and goes to the
//! [`ApprovalEvents`] in the request's extensions: under an
//! [`Agent`](toolstack::agent::Agent), as
//! `AgentEvent::ApprovalRequested` / `ApprovalDecided`.
//!
//! ```
//! use toolstack::approval::Decision;
//! use toolstack::{tool, ErrorKind, ToolAnnotations, ToolError, ToolRequest, Toolbox};
//! use toolstack_layers::approval::ApprovalLayer;
//! use tower::ServiceExt;
//!
//! #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
//! #[schemars(crate = "toolstack::schemars")]
//! struct Path { path: String }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! let delete = tool::from_fn("delete", |p: Path| async move { Ok::<_, ToolError>(format!("deleted {}", p.path)) })
//!     .with_annotations(ToolAnnotations { destructive_hint: Some(true), ..Default::default() });
//! // An approver that refuses anything under /etc.
//! let approver = |asked: &toolstack::approval::ApprovalRequest| {
//!     let deny = asked.arguments.contains("/etc");
//!     async move { if deny { Decision::deny("not under /etc") } else { Decision::Allow } }
//! };
//! let tools = Toolbox::new().layered(delete, ApprovalLayer::new(approver));
//! let err = tools.oneshot(ToolRequest::new("delete", r#"{"path": "/etc/passwd"}"#)).await.unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::Denied);
//! assert!(err.message().contains("not under /etc"));
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use pin_project_lite::pin_project;
use toolstack::{ErrorKind, ToolError, ToolRequest};
use tower_layer::Layer;
use tower_service::Service;

/// The vocabulary of approving a call, from `toolstack::approval` (which
/// the agent shares): one module to import for the layer and its words.
pub use toolstack::approval::{
    ApprovalEvent, ApprovalEvents, ApprovalRequest, BindingDecision, CallerApprover, Decided,
    DecidedBy, Decision, Policy,
};

/// Decides a call: see the [module docs](self). Any
/// `Fn(&ApprovalRequest) -> impl Future<Output = Decision>` is one.
pub trait Approver: Send + Sync + 'static {
    /// The decision for `request`; it may take as long as a person does.
    fn decide(&self, request: &ApprovalRequest) -> BoxFuture<'static, Decision>;
}

impl<F, Fut> Approver for F
where
    F: Fn(&ApprovalRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Decision> + Send + 'static,
{
    fn decide(&self, request: &ApprovalRequest) -> BoxFuture<'static, Decision> {
        Box::pin(self(request))
    }
}

type Rule = Arc<dyn Fn(&ToolRequest) -> Policy + Send + Sync>;

/// Asks before calls run: see the [module docs](self).
#[derive(Clone)]
pub struct ApprovalLayer {
    approver: Arc<dyn Approver>,
    policy: Rule,
    by: Arc<str>,
    caller_decides: bool,
}

/// The default policy: ask for any tool not annotated read-only.
fn not_read_only(request: &ToolRequest) -> Policy {
    let read_only = request
        .info()
        .is_some_and(|info| info.annotations().read_only_hint == Some(true));
    if read_only {
        Policy::Pass
    } else {
        Policy::Ask { reason: None }
    }
}

impl ApprovalLayer {
    /// Asks `approver` for every call of a tool not annotated read-only.
    pub fn new(approver: impl Approver) -> Self {
        ApprovalLayer {
            approver: Arc::new(approver),
            policy: Arc::new(not_read_only),
            by: Arc::from("approver"),
            caller_decides: false,
        }
    }

    /// Asks only for the calls `when` picks (the tool, its annotations and
    /// arguments, the caller in the extensions).
    pub fn when(mut self, when: impl Fn(&ToolRequest) -> bool + Send + Sync + 'static) -> Self {
        self.policy = Arc::new(move |request| match when(request) {
            true => Policy::Ask { reason: None },
            false => Policy::Pass,
        });
        self
    }

    /// Decides each call by `policy` first: [`Policy::Pass`] lets it
    /// through untold, [`Policy::Allow`] and [`Policy::Deny`] decide it
    /// at once — told as automatic, with the reason, as the AI SDK's
    /// `isAutomatic` approvals are —, and [`Policy::Ask`] puts it to the
    /// caller or the approver as usual, saying why. Replaces
    /// [`when`](Self::when).
    ///
    /// ```
    /// use toolstack::approval::{Decision, Policy};
    /// use toolstack::{tool, ErrorKind, ToolError, ToolRequest, Toolbox};
    /// use toolstack_layers::approval::ApprovalLayer;
    /// use tower::ServiceExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let sql = tool::from_fn("sql", |_: serde_json::Value| async { Ok::<_, ToolError>("done") });
    /// let person = |_: &toolstack::approval::ApprovalRequest| async { Decision::Allow };
    /// let layer = ApprovalLayer::new(person).policy(|call| {
    ///     let sql = call.arguments().to_lowercase();
    ///     if sql.contains("drop") {
    ///         Policy::deny("dropping tables is never allowed")
    ///     } else if sql.contains("select") {
    ///         Policy::allow("reads are always allowed")
    ///     } else {
    ///         Policy::ask("this writes")
    ///     }
    /// });
    /// let tools = Toolbox::new().layered(sql, layer);
    /// let err = tools.oneshot(ToolRequest::new("sql", r#"{"q": "DROP TABLE t"}"#)).await.unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Denied);
    /// assert!(err.message().contains("never allowed"));
    /// # }
    /// ```
    pub fn policy(
        mut self,
        policy: impl Fn(&ToolRequest) -> Policy + Send + Sync + 'static,
    ) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// Lets the person behind the call decide when there is one: a call
    /// whose extensions carry a [`CallerApprover`] — a front end that can
    /// ask (the AI SDK chat endpoint puts one in each run) — is decided by
    /// it, and named by its [`by`](CallerApprover::by); any other call by
    /// this layer's approver. Off by default: a policy approver is not
    /// overridden by whoever calls unless asked to.
    ///
    /// ```
    /// use toolstack::approval::{CallerApprover, Decision};
    /// use toolstack::{tool, ErrorKind, ToolError, ToolRequest, Toolbox};
    /// use toolstack_layers::approval::ApprovalLayer;
    /// use tower::ServiceExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let wipe = tool::from_fn("wipe", |_: serde_json::Value| async { Ok::<_, ToolError>("wiped") });
    /// let nobody = |_: &toolstack::approval::ApprovalRequest| async { Decision::deny("nobody to ask") };
    /// let tools = Toolbox::new().layered(wipe, ApprovalLayer::new(nobody).caller_decides());
    ///
    /// let user = CallerApprover::new("the user", |_| async { Decision::Allow });
    /// let mut call = ToolRequest::new("wipe", "{}");
    /// call.extensions_mut().insert(user);
    /// assert!(tools.clone().oneshot(call).await.is_ok());
    ///
    /// let err = tools.oneshot(ToolRequest::new("wipe", "{}")).await.unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Denied);
    /// # }
    /// ```
    pub fn caller_decides(mut self) -> Self {
        self.caller_decides = true;
        self
    }

    /// Who decides, as spans and events name them (default `approver`):
    /// `the user`, `policy`, `an operator`.
    pub fn decided_by(mut self, by: &str) -> Self {
        self.by = Arc::from(by);
        self
    }
}

impl fmt::Debug for ApprovalLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalLayer")
            .field("decided_by", &self.by)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for ApprovalLayer {
    type Service = Approval<S>;

    fn layer(&self, inner: S) -> Approval<S> {
        Approval {
            inner,
            config: self.clone(),
        }
    }
}

/// A tool whose calls are approved first; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Approval<S> {
    inner: S,
    config: ApprovalLayer,
}

impl<S> Approval<S> {
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

impl<S> Service<ToolRequest> for Approval<S>
where
    S: Service<ToolRequest> + Clone + Send + 'static,
    S::Error: Into<ToolError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future, S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        let verdict = match BindingDecision::of(&request) {
            // Decided already: the policy is not asked either.
            Some(_) => Policy::Ask { reason: None },
            None => (self.config.policy)(&request),
        };
        if verdict == Policy::Pass {
            return ResponseFuture {
                state: State::Pass {
                    future: self.inner.call(request),
                },
            };
        }
        // The ready service goes with the call; a clone stays.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture {
            state: State::Asking {
                future: Box::pin(approve(inner, request, self.config.clone(), verdict)),
            },
        }
    }
}

pin_project! {
    /// The response future of [`Approval`]: the tool's own for a call the
    /// policy lets through, else the wait for the decision and the call.
    pub struct ResponseFuture<F, R> {
        #[pin]
        state: State<F, R>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, R> {
        Pass { #[pin] future: F },
        Asking { future: BoxFuture<'static, Result<R, ToolError>> },
    }
}

impl<F, R, E> Future for ResponseFuture<F, R>
where
    F: Future<Output = Result<R, E>>,
    E: Into<ToolError>,
{
    type Output = Result<R, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Pass { future } => future.poll(cx).map_err(Into::into),
            StateProj::Asking { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, R> fmt::Debug for ResponseFuture<F, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.state {
            State::Pass { .. } => "approval::ResponseFuture (passed)",
            State::Asking { .. } => "approval::ResponseFuture (asking)",
        })
    }
}

async fn approve<S>(
    mut inner: S,
    mut request: ToolRequest,
    config: ApprovalLayer,
    verdict: Policy,
) -> Result<S::Response, ToolError>
where
    S: Service<ToolRequest>,
    S::Error: Into<ToolError>,
{
    let mut asked = ApprovalRequest::new(request.id(), request.name(), request.arguments());
    let events = request.extensions().get::<ApprovalEvents>().cloned();
    let (decision, by) = match BindingDecision::of(&request).cloned() {
        // Decided before (stored, or brought by a resume): nobody is asked.
        Some(binding) => (binding.decision, binding.by),
        None => {
            let automatic = match verdict {
                Policy::Allow { reason } => Some((Decision::Allow, reason)),
                Policy::Deny { reason } => Some((Decision::deny(reason.clone()), reason)),
                Policy::Ask { reason } => {
                    asked.reason = reason;
                    None
                }
                _ => None,
            };
            if let Some((_, reason)) = &automatic {
                asked.automatic = true;
                asked.reason = Some(reason.clone());
            }
            if let Some(events) = &events {
                events.send(ApprovalEvent::Requested(asked.clone())).await?;
            }
            let caller = config
                .caller_decides
                .then(|| request.extensions().get::<CallerApprover>().cloned())
                .flatten();
            match (automatic, &caller) {
                (Some((decision, _)), _) => (decision, DecidedBy::Policy),
                (None, Some(caller)) => (caller.decide(&asked).await, caller.decided_by()),
                (None, None) => (
                    config.approver.decide(&asked).await,
                    DecidedBy::approver(&*config.by),
                ),
            }
        }
    };
    let span = tracing::Span::current();
    span.record("gen_ai.tool.call.decision", decision.outcome());
    span.record("gen_ai.tool.call.decided_by", by.name());
    tracing::info!(
        gen_ai.tool.name = %asked.tool,
        gen_ai.tool.call.id = %asked.call_id,
        gen_ai.tool.call.decision = decision.outcome(),
        gen_ai.tool.call.decided_by = %by,
        "tool call {}", match &decision {
            Decision::Allow => "approved",
            Decision::Deny { .. } => "denied",
            Decision::Modify { .. } => "approved with other arguments",
        }
    );
    if let Some(events) = &events {
        let decided = Decided {
            request: asked,
            decision: decision.clone(),
            by: by.clone(),
        };
        events.send(ApprovalEvent::Decided(decided)).await?;
    }
    match decision {
        Decision::Allow => {}
        Decision::Modify { arguments } => request.set_arguments(arguments),
        Decision::Deny { reason } => {
            return Err(ToolError::new(
                ErrorKind::Denied,
                format!(
                    "the call of `{}` was denied by {by}: {reason}",
                    request.name(),
                ),
            ));
        }
    }
    inner.call(request).await.map_err(Into::into)
}
