//! An [`Agent`] over HTTP in the Vercel AI SDK's *UI message stream*
//! protocol (v1): the protocol that the `ai` package's `useChat` and
//! `readUIMessageStream` read, so a front end written for the AI SDK
//! shows a toolstack agent as it works — text as it streams, each tool
//! call as its arguments are written, its streamed output, progress,
//! results, errors, and approval requests with their answers.
//!
//! [`ChatEndpoint`] is an axum [`Router`](axum::Router) with the route `POST /` (and
//! `GET /{chatId}/stream`, for [resumable](ChatEndpoint::resumable_streams)
//! responses), to [`nest`](axum::Router::nest) where the front end posts
//! (`/api/chat` is the AI SDK's default). It takes the chat request the AI SDK's
//! `DefaultChatTransport` sends — `{"id", "messages": [UIMessage…],
//! "trigger", "messageId"}` — and answers `200` with server-sent events,
//! each event's data one chunk of JSON, then `data: [DONE]`. The response
//! carries the protocol's header, `x-vercel-ai-ui-message-stream: v1`.
//!
//! # The caller
//!
//! The HTTP request's extensions go to
//! [`Agent::run_with`]: what an auth layer in front put there (a user id,
//! a role) is what the toolbox's resolver, a per-caller limit and the
//! tools see, exactly as with [`http`](crate::http). A client
//! that disconnects drops the response, and with it the run: the model
//! call and the running tools are cancelled — unless responses are
//! [resumable](ChatEndpoint::resumable_streams): then the run goes on to
//! its end.
//!
//! # The mapping
//!
//! | agent event | chunks |
//! |---|---|
//! | (the response opens) | `start` with a `messageId` |
//! | a model turn begins | `start-step` (and `finish-step` for the turn before, with its tool calls) |
//! | [`ReasoningDelta`](AgentEvent::ReasoningDelta) | `reasoning-start` (once per run of reasoning), `reasoning-delta`; `reasoning-end` when something else comes |
//! | [`TextDelta`](AgentEvent::TextDelta) | `text-start` (once per run of text), `text-delta`; `text-end` when something else comes |
//! | [`ToolCallStarted`](AgentEvent::ToolCallStarted) | `tool-input-start` |
//! | [`ToolCallInputDelta`](AgentEvent::ToolCallInputDelta) | `tool-input-delta` |
//! | [`ToolCall`](AgentEvent::ToolCall) | `tool-input-available` with the parsed input (`tool-input-error` if it is not JSON) |
//! | [`ToolOutput`](AgentEvent::ToolOutput) | `tool-output-available` with `preliminary: true`: the item (text as a string, JSON as its value, media as their JSON) |
//! | [`Progress`](AgentEvent::Progress) | `data-progress` with `id` = `progress-{toolCallId}` (updated in place) and `data` = `{toolCallId, progress, total, message}` |
//! | [`ApprovalRequested`](AgentEvent::ApprovalRequested) | `tool-approval-request` with an `approvalId` |
//! | [`ApprovalDecided`](AgentEvent::ApprovalDecided) by someone other than the caller | `tool-approval-response` |
//! | [`ToolResult`](AgentEvent::ToolResult) | `tool-output-available` (the structured content, else the text), `tool-output-error` (the error's message), or `tool-output-denied` for a denied call |
//! | [`GuardrailTriggered`](AgentEvent::GuardrailTriggered) | `data-guardrail` with `data` = `{guardrail, target, action, reason, toolCallId}` (`toolCallId` null for the model) |
//! | [`TurnDiscarded`](AgentEvent::TurnDiscarded) | `reset-step` (the half-written answer is removed) |
//! | [`Compacted`](AgentEvent::Compacted) | `data-compaction` with `data` = `{messagesBefore, messagesAfter, tokensBefore, tokensAfter}` |
//! | [`ToolsLoaded`](AgentEvent::ToolsLoaded) | `data-tools-loaded` with `data` = `{toolCallId, names}` |
//! | [`TextDelta`](AgentEvent::TextDelta) of an agent with a typed answer ([`Agent::output`]) | also `data-output` with `id` = `output` (updated in place) and `data` = `{value, final: false}`: the object as it forms |
//! | [`Output`](AgentEvent::Output) | `data-output` with `data` = `{value, final: true}` |
//! | [`Error`](AgentEvent::Error) | `error` with the message |
//! | [`Done`](AgentEvent::Done) | `finish-step`, `finish` with a `finishReason` (`stop`, `length`, `content-filter`, `error`, `other`) and `messageMetadata` = `{usage: {inputTokens, outputTokens}, steps, stop}` |
//!
//! Tool parts are static (`tool-{name}`), as the AI SDK makes them for
//! tools it knows.
//!
//! # Approval
//!
//! Every run carries a [`CallerApprover`]: with `toolstack-layers`'
//! approval layer set to `caller_decides()`, a call it asks about is put
//! to the person at the front end. The agent then runs on until every
//! running call waits for an answer
//! ([`AwaitingApproval`](AgentEvent::AwaitingApproval)); the response ends
//! there (`finish` with `finishReason: "tool-calls"`), and the run is
//! suspended in the run store — the agent's ([`Agent::store`]), or, for an
//! agent without one, a [`MemoryStore`] of the endpoint's own: its journal
//! stays there, the run waiting, held by no process. The calls that wait
//! have not started. The front end sends the answers the protocol's way —
//! the conversation again, the tool parts now `approval-responded`
//! (`addToolApprovalResponse` in `useChat`) — and that request, to any
//! process sharing the store, **resumes the same run** from the store:
//! each call gets its decision (a denial's `reason` is what the model
//! reads), a call left unanswered is denied, and the run's stream goes on
//! in the new response, continuing the same assistant message. Nothing is
//! re-run; a tool's side effects happen once. An answer for a run that has
//! ended is refused with `409` (`kind: "ended"`), one for a run another
//! process holds with `409` (`kind: "held"`).
//!
//! Every store call the endpoint makes (the waiting count and expiry, the
//! chunk log) rides out a short outage as the agent's runs do
//! ([`Agent::store_outage`]). While the run store still does not answer, a
//! request that needs it (an
//! answer, a message kept on the server, the stream-resume route) is
//! refused with `503` (`kind: "unavailable"`) and `Retry-After: 5`; a run
//! whose store stops answering mid-response ends with an `error` chunk
//! saying so and that the message or approval answer can be sent again,
//! then `finish` with `messageMetadata.stop: "store_failed"`.
//!
//! Waiting runs are bounded in number ([`max_waiting_runs`](ChatEndpoint::max_waiting_runs),
//! 10,000, counted in the run store, across every process that shares it)
//! and time ([`approval_timeout`](ChatEndpoint::approval_timeout), 10
//! minutes). Room is found before the person is first asked in a
//! response: when the store is full, the runs that have waited past the
//! timeout are forgotten by the store's time index, and if it is still
//! full the call is denied before the person is asked, shown as decided,
//! with a reason the model reads. An answer that comes after the timeout
//! finds its run expired, and the run is deleted. Its waiting calls never
//! ran, and none of its calls is still running (suspending the run stopped
//! it), so there is nothing to cancel. Like an answer for a run the store
//! does not keep (unknown, forgotten, or lost with the endpoint's own
//! memory store when the server restarted), the answer starts a new run
//! from the conversation, each call that waited reading as not run — or,
//! with [`server_history`](ChatEndpoint::server_history), is a `404`. The approval id — the run id's 128 random bits and the call's
//! id — is what entitles a request to resume a run (with `server_history`,
//! the chat's id and the call's: whoever may post to the chat may answer).
//!
//! # The conversation
//!
//! With [`server_history`](ChatEndpoint::server_history), the conversation
//! is the server's, kept by chat id, and only the client's new message is
//! read. Otherwise the `messages` become the run's history: `system` and `user` messages
//! their text parts; an `assistant` message, per step (`step-start`), its
//! text and tool calls, each answered by its output (`output-available`),
//! its `errorText`, a denial, or "not run". Other parts (files,
//! reasoning, data) are skipped. The body is bounded
//! ([`body_limit`](ChatEndpoint::body_limit), 4 MiB, checked before
//! parsing; JSON nesting as deep as `serde_json` allows, 128); a body that
//! is not a chat request is a `400` naming what is wrong.
//!
//! # Example
//!
//! ```
//! use axum::body::Body;
//! use axum::http::Request;
//! use tower::ServiceExt;
//! use toolstack::agent::Agent;
//! use toolstack::model::{ScriptedModel, Turn};
//! use toolstack::http::ai_sdk::ChatEndpoint;
//! use toolstack::Toolbox;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let agent = Agent::new(ScriptedModel::new([Turn::new().text("Hello!")]), Toolbox::new());
//! let app = axum::Router::new().nest("/api/chat", ChatEndpoint::new(agent).into_router());
//!
//! let body = r#"{"id":"c1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"Hi"}]}]}"#;
//! let response = app.oneshot(Request::post("/api/chat").body(Body::from(body)).unwrap()).await.unwrap();
//! assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
//! let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
//! let body = std::str::from_utf8(&body).unwrap();
//! assert!(body.contains(r#"{"type":"text-delta","id":"text-1","delta":"Hello!"}"#));
//! assert!(body.ends_with("data: [DONE]\n\n"));
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::agent::store::{MemoryStore, RunStore};
use crate::agent::Agent;
use crate::approval::ApprovalKeys;

// The items the docs above link to.
#[cfg(doc)]
use crate::agent::AgentEvent;
#[cfg(doc)]
use crate::approval::CallerApprover;

mod approvals;
mod capacity;
mod ids;
pub mod log;
mod mapper;
mod outgoing;
mod refusal;
mod request;
mod response;
#[cfg(feature = "restate")]
mod restate;
mod resume;
mod serve;
mod verify;

pub use self::log::{ChunkLog, Logged, MemoryChunkLog};
#[cfg(feature = "restate")]
#[cfg_attr(docsrs, doc(cfg(feature = "restate")))]
pub use self::restate::RestateIngress;

/// The default limit on a chat request's body: 4 MiB.
pub const DEFAULT_CHAT_BODY_LIMIT: usize = 4 * 1024 * 1024;

/// Renamed to [`DEFAULT_CHAT_BODY_LIMIT`]: the tool routes' limit on a
/// call's body is another ([`DEFAULT_CALL_BODY_LIMIT`](crate::http::DEFAULT_CALL_BODY_LIMIT)).
#[deprecated(note = "renamed to `DEFAULT_CHAT_BODY_LIMIT`")]
pub const DEFAULT_BODY_LIMIT: usize = DEFAULT_CHAT_BODY_LIMIT;

/// The default bound on runs kept for an approval answer, counted in the
/// run store — across every process that shares it.
pub const DEFAULT_MAX_WAITING_RUNS: usize = 10_000;

/// The default time a run is kept for an approval answer: 10 minutes.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest chat id a resumable stream is kept under.
pub const MAX_CHAT_ID_BYTES: usize = 256;

/// Who decides, as spans and events name the person at the front end.
const THE_USER: &str = "the user";

/// An agent served in the AI SDK's UI message stream protocol; see the
/// [module docs](self).
pub struct ChatEndpoint<M> {
    agent: Agent<M>,
    body_limit: usize,
    keep_alive: Option<Duration>,
    max_waiting_runs: usize,
    approval_timeout: Duration,
    store: Arc<dyn RunStore>,
    log: Option<Arc<dyn ChunkLog>>,
    keys: Option<Arc<ApprovalKeys>>,
    /// The conversation is kept on the server, by chat id.
    sessions: bool,
    /// The store is the endpoint's own (the agent had none).
    own_store: bool,
    /// The runs are Restate's.
    #[cfg(feature = "restate")]
    restate: Option<RestateIngress>,
}

impl<M: Clone> Clone for ChatEndpoint<M> {
    fn clone(&self) -> Self {
        ChatEndpoint {
            agent: self.agent.clone(),
            body_limit: self.body_limit,
            keep_alive: self.keep_alive,
            max_waiting_runs: self.max_waiting_runs,
            approval_timeout: self.approval_timeout,
            store: Arc::clone(&self.store),
            log: self.log.clone(),
            keys: self.keys.clone(),
            sessions: self.sessions,
            own_store: self.own_store,
            #[cfg(feature = "restate")]
            restate: self.restate.clone(),
        }
    }
}

impl<M> std::fmt::Debug for ChatEndpoint<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatEndpoint")
            .field("body_limit", &self.body_limit)
            .field("keep_alive", &self.keep_alive)
            .field("max_waiting_runs", &self.max_waiting_runs)
            .field("approval_timeout", &self.approval_timeout)
            .finish_non_exhaustive()
    }
}

impl<M> ChatEndpoint<M> {
    /// Serves `agent`, with the default limits and a keep-alive comment
    /// every 15 s of silence. Runs waiting for an approval are kept in the
    /// agent's run store ([`Agent::store`]) — or, for an agent without
    /// one, in a [`MemoryStore`] of the endpoint's own (they then do not
    /// survive a restart).
    pub fn new(agent: Agent<M>) -> Self {
        let own_store = agent.run_store().is_none();
        let (agent, store) = match agent.run_store() {
            Some(store) => {
                let store = Arc::clone(store);
                (agent, store)
            }
            None => {
                // What waits for an answer, and of a run that ended only
                // that it did (an answer sent again is refused, never run
                // again), for the approval timeout; a run its client left
                // is forgotten as long after its lease.
                let store = MemoryStore::new()
                    .finished_ttl(DEFAULT_APPROVAL_TIMEOUT)
                    .finished_heads_only()
                    .abandoned_ttl(DEFAULT_APPROVAL_TIMEOUT);
                (
                    agent.store(store.clone()),
                    Arc::new(store) as Arc<dyn RunStore>,
                )
            }
        };
        ChatEndpoint {
            agent,
            body_limit: DEFAULT_CHAT_BODY_LIMIT,
            keep_alive: Some(super::tools::DEFAULT_KEEP_ALIVE),
            max_waiting_runs: DEFAULT_MAX_WAITING_RUNS,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            store,
            log: None,
            keys: None,
            sessions: false,
            own_store,
            #[cfg(feature = "restate")]
            restate: None,
        }
    }

    /// Refuses a body longer than `bytes` with `413`, without reading more.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Sends a keep-alive comment each time `interval` passes without a
    /// chunk. Zero turns the comments off.
    pub fn keep_alive(mut self, interval: Duration) -> Self {
        self.keep_alive = (!interval.is_zero()).then_some(interval);
        self
    }

    /// Keeps at most `runs` runs waiting for an approval answer (10,000
    /// by default), counted in the run store — across every process that
    /// shares it. Room is checked before the person is first asked in a
    /// response: beyond the bound (after the runs waited past the
    /// [`approval_timeout`](Self::approval_timeout) are forgotten), the
    /// call is denied at once and shown as decided
    /// (`tool-approval-request` with `isAutomatic`, then
    /// `tool-approval-response` with the reason), never with an Approve
    /// button. Runs asking at the same moment may pass the bound by their
    /// number.
    pub fn max_waiting_runs(mut self, runs: usize) -> Self {
        self.max_waiting_runs = runs;
        self
    }

    /// Forgets a run whose approval answer has not come within `timeout`
    /// (10 minutes by default): an answer that comes later finds it
    /// expired (the run is deleted, and the conversation starts a new
    /// run), and a store that is full forgets it by its time index (see
    /// [`max_waiting_runs`](Self::max_waiting_runs)).
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// Runs the chat's runs on Restate (feature `restate`): a new
    /// message starts a run through `restate`'s ingress — served by
    /// [`RestateRuns`](crate::agent::restate::RestateRuns) in any number
    /// of processes, the agent given here unused but for its typed
    /// answer's schema —, and the response streams the run's events from
    /// the log the runs write them to. The person's answers go to the
    /// calls that wait for them (Restate keeps an answer until a process
    /// takes it) and the next response goes on from where the last one
    /// ended. What waits for a person is bounded and timed by the
    /// `RestateRuns` settings, not this endpoint's; with
    /// [`resumable_streams`](Self::resumable_streams), a reconnecting
    /// client resumes a response as with runs in process.
    ///
    /// Not on Restate yet: [`server_history`](Self::server_history) (the
    /// conversation is the client's), [`sign_approvals`](Self::sign_approvals)
    /// (an approval id is entitled by its run id's 128 random bits), and
    /// the request's extensions (an auth layer's caller does not reach
    /// the run's tools).
    #[cfg(feature = "restate")]
    #[cfg_attr(docsrs, doc(cfg(feature = "restate")))]
    pub fn restate(mut self, restate: RestateIngress) -> Self {
        self.restate = Some(restate);
        self
    }

    /// Makes responses resumable ([`log`]): each one's chunks go to `log`
    /// as they are sent, and `GET /{chatId}/stream` answers a front end
    /// that reconnects (`useChat({ resume: true })`) with the chat's
    /// response in progress, from its first chunk, then live — or `204`
    /// when there is none. A response then runs to its end even when its
    /// client goes away (the AI SDK treats a closed tab as a disconnect,
    /// not a stop). The chunks reach the log through a bounded queue off
    /// the response's way: a slow log never slows the stream; one that
    /// falls 4,096 chunks behind stops keeping that response.
    ///
    /// The `GET` route reads by chat id: put the same authentication in
    /// front of it as of the `POST`.
    pub fn resumable_streams(mut self, log: impl ChunkLog) -> Self {
        self.log = Some(Arc::new(log));
        self
    }

    /// Signs every approval request with `keys` (`signature` on
    /// `tool-approval-request`, the AI SDK's scheme with the key's id in
    /// front) and refuses an answer whose signature does not match the
    /// call waiting in the store — forged, made for other arguments, or
    /// replayed on another call or run — with `403`: the run keeps
    /// waiting, and nothing runs.
    pub fn sign_approvals(mut self, keys: ApprovalKeys) -> Self {
        self.keys = Some(Arc::new(keys));
        self
    }

    /// Keeps each chat's conversation on the server, by the chat's `id`
    /// (an agent [`Session`](crate::agent::Session) in the run store), as
    /// the AI SDK's persistence guide does: the client then sends only
    /// its new message (`{"id", "message"}`, from
    /// `prepareSendMessagesRequest`), and the model reads the history
    /// kept — compacted as the agent is set — never one the client sent.
    /// A client that sends its whole history still can: it is checked
    /// against the one kept, by what the user said (every user message
    /// kept is among those sent, in order, and the last ones agree), and
    /// refused with `409` (`kind: "history_mismatch"`) when it disagrees
    /// — a stale tab, a rewritten or injected message — or when the
    /// server keeps no such conversation. A request without a chat id is
    /// a `400`; one while the chat's last run goes on or waits for an
    /// answer, a `409` (`kind: "busy"` or `"waiting"`).
    ///
    /// A conversation is forgotten with its store's time for finished
    /// runs (a day, unless the store is set otherwise) after its last
    /// response; one whose run waited for an approval answer past the
    /// [`approval_timeout`](Self::approval_timeout) is forgotten with it.
    /// For an agent without a store, the endpoint's own memory store then
    /// keeps finished conversations whole (not only that they ended).
    pub fn server_history(mut self) -> Self
    where
        M: Clone,
    {
        self.sessions = true;
        if self.own_store {
            let store = MemoryStore::new().abandoned_ttl(self.approval_timeout);
            self.agent = self.agent.clone().store(store.clone());
            self.store = Arc::new(store);
        }
        self
    }

    /// How many runs wait for an approval answer now, in the store (which
    /// other processes may share), counted in constant time.
    pub async fn waiting_runs(&self) -> Result<usize, crate::agent::store::StoreError> {
        self.store.waiting_count().await
    }
}
