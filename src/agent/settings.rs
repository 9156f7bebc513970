//! [`Agent`](super::Agent): a model, a toolbox and the settings of their runs.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::model::Prices;
use crate::toolbox::ToolSearch;
use crate::Toolbox;

use super::compaction::{Compact, OnCompactionError};
use super::journal::{
    Durability, OnStoreError, DEFAULT_CHECKPOINT_TIMEOUT, DEFAULT_LEASE, DEFAULT_STORE_OUTAGE,
};
use super::output::{OutputMode, TypedOutput};
use super::search::DEFAULT_SEARCH_LIMIT;
use super::step_tools::{PrepareStep, StepContext, StepSettings};
use super::store::RunStore;
use crate::model::ToolChoice;

#[cfg(doc)]
use crate::ToolError;

/// `invoke_agent {name}`, or `invoke_agent` for an agent without a name.
struct AgentSpanName<'a>(Option<&'a str>);

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
    pub(super) compaction: Option<Compaction>,
    pub(super) on_compaction_error: OnCompactionError,
    pub(super) tool_choice: ToolChoice,
    pub(super) prepare_step: Option<PrepareStep>,
    pub(super) output: Option<TypedOutput>,
    /// The search over the toolbox's deferred tools, built at the first
    /// run that needs it (shared by the agent's clones).
    pub(super) search: Arc<OnceLock<Option<Arc<ToolSearch>>>>,
    pub(super) search_limit: usize,
    /// Whether the search tool lists the names of the tools not shown.
    pub(super) names_in_view: bool,
}

/// When and how an agent compacts its history.
#[derive(Clone)]
pub(super) struct Compaction {
    /// The tokens the model's context may hold.
    pub(super) budget: u64,
    pub(super) strategy: Arc<dyn Compact>,
}

impl std::fmt::Debug for Compaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compaction")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
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
            compaction: None,
            on_compaction_error: OnCompactionError::Continue,
            tool_choice: ToolChoice::Auto,
            prepare_step: None,
            output: None,
            search: Arc::default(),
            search_limit: DEFAULT_SEARCH_LIMIT,
            names_in_view: false,
        }
    }

    /// How many tools a [tool search](crate::Toolbox::deferred) returns
    /// when the model does not say: 5 by default, 1 to
    /// [`MAX_SEARCH_LIMIT`](super::MAX_SEARCH_LIMIT) (a value outside is
    /// brought inside).
    pub fn tool_search_limit(mut self, limit: usize) -> Self {
        self.search_limit = limit.clamp(1, super::MAX_SEARCH_LIMIT);
        self
    }

    /// Shows the model the names of the deferred tools it has not loaded,
    /// grouped by their prefix (the server they were nested under), in the
    /// `search_tools` tool's description — no schemas: the model loads one
    /// by calling `search_tools` with its exact name, or searches by what
    /// it needs. It costs a few tokens a name on every model call
    /// (docs/benchmarks.md has the figure against showing every
    /// definition); off by default. At most
    /// [`MAX_NAMES_IN_VIEW`](super::MAX_NAMES_IN_VIEW) names are listed.
    pub fn deferred_names_in_view(mut self, yes: bool) -> Self {
        self.names_in_view = yes;
        self
    }

    /// The search the model's `search_tools` calls go to: by default one
    /// by words over the toolbox's deferred tools, built at the first run
    /// that needs it. Give one built by meaning as well
    /// ([`ToolSearch::hybrid`]) to rank by what a request means:
    ///
    /// ```no_run
    /// # async fn f(model: impl toolstack::model::ModelService, toolbox: toolstack::Toolbox, embeddings: toolstack::embed::Embeddings) {
    /// use toolstack::agent::Agent;
    /// use toolstack::toolbox::ToolSearch;
    ///
    /// let search = ToolSearch::hybrid(&toolbox, &embeddings).await.min_similarity(0.2);
    /// let agent = Agent::new(model, toolbox).tool_search(search);
    /// # }
    /// ```
    ///
    /// A search built over another toolbox finds tools this agent may not
    /// have: build it over the agent's own.
    pub fn tool_search(self, search: ToolSearch) -> Self {
        let cell = OnceLock::new();
        let _ = cell.set(Some(Arc::new(search)));
        Agent {
            search: Arc::new(cell),
            ..self
        }
    }

    /// The search over the toolbox's deferred tools, if it has any (or
    /// the one given).
    pub(super) fn deferred_search(&self) -> Option<&Arc<ToolSearch>> {
        self.search
            .get_or_init(|| {
                self.toolbox
                    .has_deferred()
                    .then(|| Arc::new(ToolSearch::new(&self.toolbox)))
            })
            .as_ref()
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

    /// Keeps every run's journal in `store` — each model answer and each
    /// change of a tool call's state appended, the size of the change —
    /// so a run can be resumed ([`Agent::resume`](super::Agent::resume))
    /// after a restart or by another process sharing the store. See
    /// [`store`](super::store).
    ///
    /// A change is stored before the call it records goes on (a tool
    /// starts only once its start is stored), never in the middle of the
    /// model's stream; each append is bounded by
    /// [`checkpoint_timeout`](Self::checkpoint_timeout).
    pub fn store(mut self, store: impl RunStore) -> Self {
        self.durability = Some(Durability {
            store: Arc::new(store),
            process: Arc::from(crate::id::new_token()),
            lease: DEFAULT_LEASE,
            timeout: DEFAULT_CHECKPOINT_TIMEOUT,
            outage: DEFAULT_STORE_OUTAGE,
            on_error: OnStoreError::default(),
            releases: Default::default(),
        });
        self
    }

    /// The store runs are journalled in, if any.
    pub fn run_store(&self) -> Option<&Arc<dyn RunStore>> {
        self.durability.as_ref().map(|durability| &durability.store)
    }

    /// How a store call made for this agent's runs outside them (the AI
    /// SDK endpoint's waiting count, expiry, chunk log) rides out an
    /// outage: as the runs' own calls do
    /// ([`store_outage`](Self::store_outage), each attempt within the
    /// [`checkpoint_timeout`](Self::checkpoint_timeout)); tried once
    /// without a store.
    #[cfg(feature = "http")]
    pub(crate) fn store_ride_out(&self) -> super::RideOut {
        self.durability.as_ref().map_or(
            super::RideOut {
                bound: Duration::ZERO,
                timeout: DEFAULT_CHECKPOINT_TIMEOUT,
            },
            Durability::ride_out,
        )
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

    /// How long a running run stays this process's without an append
    /// (60 s by default): past it, another process may take it over.
    pub fn lease(mut self, lease: Duration) -> Self {
        if let Some(durability) = &mut self.durability {
            durability.lease = lease;
        }
        self
    }

    /// Bounds each append to the store (5 s by default): past it, the append
    /// counts as failed ([`OnStoreError`]).
    pub fn checkpoint_timeout(mut self, timeout: Duration) -> Self {
        if let Some(durability) = &mut self.durability {
            durability.timeout = timeout;
        }
        self
    }

    /// How long a run rides out a store that does not answer (15 s by
    /// default: long enough for a Redis restart or a Sentinel failover):
    /// each store call the run makes (an append, a load) that fails as
    /// [`Unavailable`](super::store::StoreError::Unavailable) is tried
    /// again, with exponential backoff and jitter (50 ms doubling to 1 s),
    /// each attempt still bounded by
    /// [`checkpoint_timeout`](Self::checkpoint_timeout); an append whose
    /// answer was lost but which landed is not applied twice. A conflict,
    /// a record too large or a format unknown is not tried again. Past the
    /// bound the save fails ([`OnStoreError`]) with an `Unavailable` error
    /// that says so. `Duration::ZERO` tries each call once.
    ///
    /// The bound used is at most half the [`lease`](Self::lease): while a
    /// run retries, its lease (from its last append) must not pass, or
    /// another process could take the run over while this one still means
    /// to write it. A longer setting is clamped. Needs a
    /// [`store`](Self::store).
    pub fn store_outage(mut self, bound: Duration) -> Self {
        if let Some(durability) = &mut self.durability {
            durability.outage = bound;
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

    /// Compacts the history with `strategy` before a model call whose
    /// request would pass `context_tokens` — the provider's last reported
    /// prompt tokens plus an estimate of what was added since — and once
    /// when the model's endpoint refuses a request for its length
    /// ([`ContextExceeded`](crate::model::ContextExceeded)), asking again
    /// once, never in a loop. Each compaction is a record in the run's
    /// journal (a resumed run goes on from the compacted history), an
    /// [`AgentEvent::Compacted`](super::AgentEvent::Compacted) and a
    /// `compact` span. A strategy that fails leaves the history as it was,
    /// with a warning — or stops the run, as
    /// [`compaction_failure`](Self::compaction_failure) says; so does one
    /// whose result breaks a call from its result, or drops the latest
    /// user message or a system message: that result is never used.
    /// See [`compaction`](super::compaction) for the strategies.
    pub fn compaction(mut self, context_tokens: u64, strategy: impl Compact) -> Self {
        self.compaction = Some(Compaction {
            budget: context_tokens,
            strategy: Arc::new(strategy),
        });
        self
    }

    /// What a run does when its history could not be compacted: goes on
    /// with it as it is (the default), or stops
    /// ([`OnCompactionError`]).
    pub fn compaction_failure(mut self, then: OnCompactionError) -> Self {
        self.on_compaction_error = then;
        self
    }

    /// Lets, or makes, the model call tools ([`ToolChoice`]: `Auto`, the
    /// provider's default; `None`; `Required`; one `Tool`) in every step
    /// of its runs, unless [`prepare_step`](Self::prepare_step) says
    /// otherwise for a step. A choice naming a tool the caller may not
    /// see, or requiring a call when no tool is offered, stops the run
    /// before the model call ([`StopReason::InvalidToolChoice`](super::StopReason::InvalidToolChoice)).
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }

    /// Sets each step's active tools and tool choice from the run so far:
    /// `hook` is called before every model call with the step's number,
    /// the history and the tools the caller may see. The model is shown
    /// only the step's active tools, and a call to another tool is
    /// answered with a `Denied` error naming the tools it may call now; an
    /// active tool the caller may not see stops the run before the call.
    ///
    /// ```
    /// use toolstack::agent::{Agent, StepSettings};
    /// use toolstack::model::{ScriptedModel, ToolChoice};
    /// use toolstack::Toolbox;
    ///
    /// // Look something up first, then answer in words.
    /// let agent = Agent::new(ScriptedModel::new([]), Toolbox::new()).prepare_step(|step| match step.step {
    ///     0 => StepSettings::new().active_tools(["search"]).tool_choice(ToolChoice::Required),
    ///     _ => StepSettings::new().tool_choice(ToolChoice::None),
    /// });
    /// # let _ = agent;
    /// ```
    pub fn prepare_step<F>(mut self, hook: F) -> Self
    where
        F: Fn(&StepContext<'_>) -> StepSettings + Send + Sync + 'static,
    {
        self.prepare_step = Some(PrepareStep(std::sync::Arc::new(hook)));
        self
    }

    /// Ends each run with a value of type `T`, checked: the request asks
    /// for it ([`OutputMode::Native`] by default: the provider's
    /// structured output, the schema derived from `T`), the final answer
    /// is decoded as `T`, and one that does not decode goes back to the
    /// model with the error naming the field, up to
    /// [`output_retries`](Self::output_retries) times; then the run stops
    /// ([`StopReason::OutputInvalid`](super::StopReason::OutputInvalid)).
    /// The value is [`AgentEvent::Output`](super::AgentEvent::Output),
    /// [`AgentDone::output`](super::AgentDone::output), and what
    /// [`AgentStream::output`](super::AgentStream::output) returns.
    pub fn output<T>(mut self) -> Self
    where
        T: serde::de::DeserializeOwned + schemars::JsonSchema + 'static,
    {
        let (mode, retries) = self.output.as_ref().map_or(
            (OutputMode::Native, super::output::DEFAULT_OUTPUT_RETRIES),
            |o| (o.mode, o.retries),
        );
        let mut output = TypedOutput::of::<T>();
        output.mode = mode;
        output.retries = retries;
        self.output = Some(output);
        self
    }

    /// The schema of the typed answer the agent asks for, if it does.
    pub fn output_schema(&self) -> Option<&crate::model::OutputSchema> {
        self.output.as_ref().map(|output| &output.schema)
    }

    /// How the typed answer is asked for ([`OutputMode`]); set after
    /// [`output`](Self::output).
    pub fn output_mode(mut self, mode: OutputMode) -> Self {
        if let Some(output) = &mut self.output {
            output.mode = mode;
        }
        self
    }

    /// How many times an answer that does not decode goes back to the
    /// model before the run stops (2 by default); set after
    /// [`output`](Self::output).
    pub fn output_retries(mut self, retries: usize) -> Self {
        if let Some(output) = &mut self.output {
            output.retries = retries;
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
    /// [`AgentEvent::TurnDiscarded`](super::AgentEvent::TurnDiscarded) tells the consumer to forget its
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

impl<M> Agent<M> {
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
            toolstack.store.retries = tracing::field::Empty,
            toolstack.store.outage_ms = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    }
}
