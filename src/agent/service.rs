//! [`Agent`]: its settings, its runs ([`AgentStream`]), and the agent as a
//! `Service<AgentRequest>`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use futures_util::future::{ready, Ready};
use http::Extensions;
use tokio::sync::mpsc;
use tower_service::Service;
use tracing::Instrument;

use crate::model::Message;
use crate::model::{ModelService, Prices, RunId};
use crate::{ToolError, ToolInfo, Toolbox};

use super::durable::{
    Checkpointer, Durability, OnStoreError, DEFAULT_CHECKPOINT_TIMEOUT, DEFAULT_LEASE,
};
use super::event::AgentEvent;
use super::run::Run;
use super::step::{approval_events, Failed, StepState};
use super::store::{Checkpoint, RunStatus, RunStore, Version};

/// `invoke_agent {name}`, or `invoke_agent` for an agent without a name.
pub(super) struct AgentSpanName<'a>(Option<&'a str>);

impl std::fmt::Display for AgentSpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(name) => write!(f, "invoke_agent {name}"),
            None => f.write_str("invoke_agent"),
        }
    }
}

/// Drives a model and a toolbox: calls the model, runs the tool calls it
/// asks for (concurrently, up to a bound), feeds the results back, and
/// repeats until the model answers without a tool call or a limit is hit.
///
/// Tool failures, invalid arguments and unknown tools go back to the model
/// as tool results (the model-facing JSON of the [`ToolError`]), and the
/// loop goes on. Dropping the event stream cancels the model call and the
/// running tools. An `Agent` is a `Service<Vec<Message>>` answering with
/// its event stream.
#[derive(Debug, Clone)]
pub struct Agent<M> {
    pub(super) model: M,
    pub(super) name: Option<Arc<str>>,
    pub(super) provider: Option<&'static str>,
    pub(super) model_name: Option<Arc<str>>,
    pub(super) toolbox: Toolbox,
    pub(super) max_steps: usize,
    pub(super) max_tool_calls: usize,
    pub(super) parallel: usize,
    pub(super) turn_retries: usize,
    pub(super) durability: Option<Durability>,
    pub(super) prices: Option<Prices>,
}

impl<M> Agent<M> {
    /// An agent over `model` and `toolbox`: at most 10 model turns, 32
    /// tool calls, 4 tools at once; a turn that breaks off is not asked
    /// again.
    pub fn new(model: M, toolbox: Toolbox) -> Self {
        Agent {
            model,
            name: None,
            provider: None,
            model_name: None,
            toolbox,
            max_steps: 10,
            max_tool_calls: 32,
            parallel: 4,
            turn_retries: 0,
            durability: None,
            prices: None,
        }
    }

    /// Prices each tool call's result ([`AgentDone::tool_costs`]): the
    /// prompt tokens it added, at the price of the model's (uncached)
    /// prompt tokens. The model is the one the answer names, else
    /// [`model_name`](Self::model_name)'s.
    ///
    /// [`AgentDone::tool_costs`]: super::AgentDone::tool_costs
    pub fn prices(mut self, prices: Prices) -> Self {
        self.prices = Some(prices);
        self
    }

    /// Checkpoints every run into `store` — at every step boundary and
    /// every change of a tool call's state — so a run can be resumed
    /// ([`Agent::resume`]) after a restart or by another process sharing
    /// the store. See [`store`](super::store).
    ///
    /// A checkpoint is saved before the call it records goes on (a tool
    /// starts only once its start is stored), never in the middle of the
    /// model's stream; each save is bounded by
    /// [`checkpoint_timeout`](Self::checkpoint_timeout).
    pub fn store(mut self, store: impl RunStore) -> Self {
        self.durability = Some(Durability {
            store: Arc::new(store),
            process: Arc::from(crate::id::new_token()),
            lease: DEFAULT_LEASE,
            timeout: DEFAULT_CHECKPOINT_TIMEOUT,
            on_error: OnStoreError::default(),
        });
        self
    }

    /// The store runs are checkpointed in, if any.
    pub fn run_store(&self) -> Option<&Arc<dyn RunStore>> {
        self.durability.as_ref().map(|durability| &durability.store)
    }

    /// Names this process in the store (a random id, drawn when the store
    /// is given, by default): a run it
    /// holds is resumed only by it until its lease passes. Set it to
    /// something stable (a host name) for a process that restarts and
    /// should take its own runs back at once. Needs a [`store`](Self::store).
    pub fn process_id(mut self, id: impl Into<Arc<str>>) -> Self {
        if let Some(durability) = &mut self.durability {
            durability.process = id.into();
        }
        self
    }

    /// How long a running run stays this process's without a checkpoint
    /// (60 s by default): past it, another process may take it over.
    pub fn lease(mut self, lease: Duration) -> Self {
        if let Some(durability) = &mut self.durability {
            durability.lease = lease;
        }
        self
    }

    /// Bounds each checkpoint's save (5 s by default): past it, the save
    /// counts as failed ([`OnStoreError`]).
    pub fn checkpoint_timeout(mut self, timeout: Duration) -> Self {
        if let Some(durability) = &mut self.durability {
            durability.timeout = timeout;
        }
        self
    }

    /// What a run does when a checkpoint fails: stop (the default) or go
    /// on in memory.
    pub fn on_store_error(mut self, then: OnStoreError) -> Self {
        if let Some(durability) = &mut self.durability {
            durability.on_error = then;
        }
        self
    }

    /// Names the agent: its runs' `invoke_agent` spans are
    /// `invoke_agent {name}`, with `gen_ai.agent.name`.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Names the model's provider (`openai`, `anthropic`, … as the
    /// OpenTelemetry GenAI conventions spell them): its runs'
    /// `invoke_agent` spans record it as `gen_ai.provider.name`.
    pub fn provider(mut self, provider: &'static str) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The agent's name, if it has one.
    pub fn agent_name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Asks for the model `name` in every model request
    /// ([`ChatRequest::model`](crate::model::ChatRequest::model)): the OpenAI-compatible client sends it
    /// instead of its own, and a trace layer names the span `chat {name}`.
    pub fn model_name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.model_name = Some(name.into());
        self
    }

    /// At most `steps` model turns per run.
    pub fn max_steps(mut self, steps: usize) -> Self {
        self.max_steps = steps;
        self
    }

    /// At most `calls` tool calls per run.
    pub fn max_tool_calls(mut self, calls: usize) -> Self {
        self.max_tool_calls = calls;
        self
    }

    /// At most `tools` tool calls of one step running at once.
    pub fn parallel_tools(mut self, tools: usize) -> Self {
        self.parallel = tools.max(1);
        self
    }

    /// Asks the model again, up to `retries` times per turn, when its
    /// answer breaks off with a retryable error (a dropped connection, an
    /// idle timeout) *after* it began to stream — the fault a retry layer
    /// cannot take back, since deltas have already reached the agent. Off
    /// (0) by default.
    ///
    /// Asking again is safe: the partial answer is discarded — not added to
    /// the conversation, none of its tool calls run — and an
    /// [`AgentEvent::TurnDiscarded`] tells the consumer to forget its
    /// streamed text. A failure before the first delta is left to the
    /// retry layer (`stream_retry`, with backoff and `Retry-After`), and a
    /// non-retryable error ends the run as before.
    ///
    /// ```
    /// use futures_util::StreamExt;
    /// use toolstack::agent::{Agent, AgentEvent, StopReason};
    /// use toolstack::model::{Message, ScriptedModel, Turn};
    /// use toolstack::{ErrorKind, ToolError, Toolbox};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let cut = ToolError::new(ErrorKind::Unavailable, "connection reset");
    /// let model = ScriptedModel::new([
    ///     Turn::new().text("Half an ans").fail(cut),
    ///     Turn::new().text("A whole answer."),
    /// ]);
    /// let agent = Agent::new(model, Toolbox::new()).retry_model_turns(1);
    /// let events: Vec<AgentEvent> = agent.run(vec![Message::user("hi")]).collect().await;
    /// assert!(events.iter().any(|e| matches!(e, AgentEvent::TurnDiscarded { .. })));
    /// let Some(AgentEvent::Done(done)) = events.last() else { panic!() };
    /// assert_eq!(done.stop, StopReason::Finished);
    /// assert_eq!(done.messages.last(), Some(&Message::assistant("A whole answer.")));
    /// # }
    /// ```
    pub fn retry_model_turns(mut self, retries: usize) -> Self {
        self.turn_retries = retries;
        self
    }
}

impl<M> Agent<M>
where
    M: ModelService,
{
    /// Runs the agent on a conversation.
    pub fn run(&self, messages: Vec<Message>) -> AgentStream {
        self.run_with(messages, Extensions::new())
    }

    /// Runs the agent on behalf of a caller: `extensions` (the caller's
    /// identity, say, as an auth layer found it) go with every model
    /// request and every tool call of the run, so the toolbox's resolver
    /// decides which tools the model is shown and may call, and per-caller
    /// limits and the tools themselves see who is asking.
    pub fn run_with(&self, messages: Vec<Message>, extensions: Extensions) -> AgentStream {
        // The driver runs inside the stream's own polls (nothing is
        // spawned), so dropping the stream drops the model call and tools.
        let (tx, rx) = mpsc::channel(32);
        let agent = self.clone();
        let run_id: Arc<str> = Arc::from(crate::id::new_token());
        let checkpoints = self.durability.clone().map(|durability| {
            let checkpoint = Checkpoint {
                run_id: run_id.to_string(),
                status: RunStatus::Running,
                messages: Vec::new(),
                step: Vec::new(),
                usage: None,
                steps: 0,
                tool_calls: 0,
                holder: None,
                saved_at_ms: 0,
            };
            Arc::new(Checkpointer::new(durability, checkpoint, Version::NONE))
        });
        // The run's span is the parent of its model and tool calls' spans
        // (the driver runs inside it); a disabled span costs a branch.
        let span = self.span(checkpoints.is_some().then_some(&*run_id));
        let mut extensions = extensions;
        extensions.insert(RunId::new(Arc::clone(&run_id)));
        let driver = agent.drive(messages, extensions, tx, checkpoints.clone());
        AgentStream {
            driver: Some(Box::pin(driver.instrument(span))),
            events: rx,
            run_id,
            checkpoints,
        }
    }

    /// The `invoke_agent` span of a run, with the OpenTelemetry GenAI
    /// attributes; usage and the outcome are recorded when it ends.
    pub(super) fn span(&self, run_id: Option<&str>) -> tracing::Span {
        let name = self.name.as_deref();
        tracing::info_span!(
            "invoke_agent",
            otel.name = %AgentSpanName(name),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = name,
            toolstack.run.id = run_id,
            gen_ai.provider.name = self.provider,
            gen_ai.request.model = self.model_name.as_deref(),
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
            gen_ai.usage.reasoning.output_tokens = tracing::field::Empty,
            toolstack.agent.steps = tracing::field::Empty,
            toolstack.agent.stop = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    }

    async fn drive(
        self,
        messages: Vec<Message>,
        extensions: Extensions,
        tx: mpsc::Sender<AgentEvent>,
        checkpoints: Option<Arc<Checkpointer>>,
    ) {
        let tools: Arc<[ToolInfo]> = self.toolbox.infos_for(&extensions).cloned().collect();
        // An approval layer below the tools tells the run what it asks and
        // what was decided (each event names its call); set once, every
        // call's extensions carry it.
        let mut extensions = extensions;
        let step = Arc::new(std::sync::Mutex::new(StepState::default()));
        let failed = Failed::default();
        extensions.insert(approval_events(
            tx.clone(),
            Arc::clone(&step),
            checkpoints.clone(),
            Arc::default(),
            Arc::clone(&failed),
        ));
        let run = Run {
            agent: self,
            // Shared with each model request; by the time the history grows
            // the model has let go of it, so `make_mut` does not copy it.
            messages: Arc::new(messages),
            tools,
            extensions,
            tx,
            step,
            usage: None,
            steps: 0,
            tool_calls: 0,
            checkpoints,
            failed,
            costs: Default::default(),
        };
        // The run is first stored while the model gives its first answer.
        run.finish(None).await;
    }
}

/// The event stream of one agent run. Dropping it cancels the run.
pub struct AgentStream {
    pub(super) driver: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    pub(super) events: mpsc::Receiver<AgentEvent>,
    pub(super) run_id: Arc<str>,
    pub(super) checkpoints: Option<Arc<Checkpointer>>,
}

impl AgentStream {
    /// The run's id: what [`Agent::resume`] takes (with a store).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Stops the run here and leaves it in the store, waiting for a
    /// decision ([`RunStatus::Waiting`], held by no process): for a front
    /// end that takes a person's answer in a later request, after
    /// [`AgentEvent::AwaitingApproval`]. Whichever process gets the answer
    /// resumes it ([`Agent::resume`]). The calls waiting for approval had
    /// not started; a call still running now is cancelled and reads, on
    /// resume, as started (see [`CallState`](super::store::CallState)).
    ///
    /// Without a store, the run is only dropped:
    /// [`ResumeError::NoStore`](super::ResumeError::NoStore).
    pub async fn suspend(mut self) -> Result<(), super::ResumeError> {
        // Dropping the driver cancels the waiting calls; a save in flight
        // is dropped with it (the checkpoint's lock is released).
        self.driver = None;
        let checkpoints = self.checkpoints.take().ok_or(super::ResumeError::NoStore)?;
        checkpoints
            .update(|checkpoint| checkpoint.status = RunStatus::Waiting)
            .await
            .map_err(super::ResumeError::from)
    }
}

impl Stream for AgentStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        if let Some(driver) = &mut self.driver {
            if driver.as_mut().poll(cx).is_ready() {
                self.driver = None;
            }
        }
        // The driver holds the only sender: once it is done and the queue
        // drained, this yields `None`.
        self.events.poll_recv(cx)
    }
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentStream")
            .field("run_id", &self.run_id)
            .field("running", &self.driver.is_some())
            .finish_non_exhaustive()
    }
}

/// A conversation and the caller's extensions: what [`Agent`] takes as a
/// `Service` (see [`Agent::run_with`]).
#[derive(Debug, Clone, Default)]
pub struct AgentRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Per-run data for the model requests and tool calls (caller identity…).
    pub extensions: Extensions,
}

impl AgentRequest {
    /// A request with no extensions.
    pub fn new(messages: Vec<Message>) -> Self {
        AgentRequest {
            messages,
            extensions: Extensions::new(),
        }
    }

    /// Inserts a per-run value into the extensions.
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }
}

impl From<Vec<Message>> for AgentRequest {
    fn from(messages: Vec<Message>) -> Self {
        AgentRequest::new(messages)
    }
}

/// Requests are an [`AgentRequest`] or anything that converts into one
/// (a plain `Vec<Message>`).
impl<M, R> Service<R> for Agent<M>
where
    R: Into<AgentRequest>,
    M: ModelService,
{
    type Response = AgentStream;
    type Error = ToolError;
    type Future = Ready<Result<AgentStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        let AgentRequest {
            messages,
            extensions,
        } = request.into();
        ready(Ok(self.run_with(messages, extensions)))
    }
}
