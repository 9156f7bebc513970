//! An [`Agent`] over HTTP in the Vercel AI SDK's *UI message stream*
//! protocol (v1): the protocol that the `ai` package's `useChat` and
//! `readUIMessageStream` read, so a front end written for the AI SDK
//! shows a toolstack agent as it works — text as it streams, each tool
//! call as its arguments are written, its streamed output, progress,
//! results, errors, and approval requests with their answers.
//!
//! [`ChatEndpoint`] is an axum [`Router`] with one route, `POST /`, to
//! [`nest`](Router::nest) where the front end posts (`/api/chat` is the AI
//! SDK's default). It takes the chat request the AI SDK's
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
//! tools see, exactly as with [`serve::http`](crate::serve::http). A client
//! that disconnects drops the response, and with it the run: the model
//! call and the running tools are cancelled.
//!
//! # The mapping
//!
//! | agent event | chunks |
//! |---|---|
//! | (the response opens) | `start` with a `messageId` |
//! | a model turn begins | `start-step` (and `finish-step` for the turn before, with its tool calls) |
//! | [`TextDelta`](AgentEvent::TextDelta) | `text-start` (once per run of text), `text-delta`; `text-end` when something else comes |
//! | [`ToolCallStarted`](AgentEvent::ToolCallStarted) | `tool-input-start` |
//! | [`ToolCallInputDelta`](AgentEvent::ToolCallInputDelta) | `tool-input-delta` |
//! | [`ToolCall`](AgentEvent::ToolCall) | `tool-input-available` with the parsed input (`tool-input-error` if it is not JSON) |
//! | [`ToolOutput`](AgentEvent::ToolOutput) | `tool-output-available` with `preliminary: true`: the item (text as a string, JSON as its value, media as their JSON) |
//! | [`Progress`](AgentEvent::Progress) | `data-progress` with `id` = `progress-{toolCallId}` (updated in place) and `data` = `{toolCallId, progress, total, message}` |
//! | [`ApprovalRequested`](AgentEvent::ApprovalRequested) | `tool-approval-request` with an `approvalId` |
//! | [`ApprovalDecided`](AgentEvent::ApprovalDecided) by someone other than the caller | `tool-approval-response` |
//! | [`ToolResult`](AgentEvent::ToolResult) | `tool-output-available` (the structured content, else the text), `tool-output-error` (the error's message), or `tool-output-denied` for a denied call |
//! | [`TurnDiscarded`](AgentEvent::TurnDiscarded) | `reset-step` (the half-written answer is removed) |
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
//! there (`finish` with `finishReason: "tool-calls"`), and the run is kept,
//! as it is, under its approval ids. The front end sends the answers the
//! protocol's way — the conversation again, the tool parts now
//! `approval-responded` (`addToolApprovalResponse` in `useChat`) — and
//! that request **resumes the same run**: each call gets its decision (a
//! denial's `reason` is what the model reads), a call left unanswered is
//! denied, and the run's stream goes on in the new response, continuing
//! the same assistant message. Nothing is re-run; a tool's side effects
//! happen once.
//!
//! A kept run is bounded in number ([`max_waiting_runs`](ChatEndpoint::max_waiting_runs),
//! 256) and time ([`approval_timeout`](ChatEndpoint::approval_timeout),
//! 10 minutes; an expired run is dropped, cancelling its calls). When the
//! endpoint is full, a run's calls are denied at once with a reason the
//! model reads. An answer for a run no longer kept (expired, or the server
//! restarted) starts a new run from the conversation, each unanswered call
//! reading as not run. The approval id — 128 random bits — is what
//! entitles a request to resume a run.
//!
//! # The conversation
//!
//! The `messages` become the run's history: `system` and `user` messages
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
//! use toolstack::serve::ai_sdk::ChatEndpoint;
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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use futures_core::Stream;
use futures_util::{stream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower_service::Service;

use crate::agent::{Agent, AgentEvent, AgentStream, StopReason};
use crate::approval::{ApprovalRequest, CallerApprover, Decision};
use crate::model::{ChatRequest, Message, ModelDelta, ToolCall};
use crate::{ToolError, ToolOutput, ToolResult};

/// The default limit on a chat request's body: 4 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 4 * 1024 * 1024;

/// The default bound on runs kept for an approval answer.
pub const DEFAULT_MAX_WAITING_RUNS: usize = 256;

/// The default time a run is kept for an approval answer: 10 minutes.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

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
    waiting: Arc<Mutex<WaitingRuns>>,
}

impl<M: Clone> Clone for ChatEndpoint<M> {
    fn clone(&self) -> Self {
        ChatEndpoint {
            agent: self.agent.clone(),
            body_limit: self.body_limit,
            keep_alive: self.keep_alive,
            max_waiting_runs: self.max_waiting_runs,
            approval_timeout: self.approval_timeout,
            waiting: Arc::clone(&self.waiting),
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
    /// every 15 s of silence.
    pub fn new(agent: Agent<M>) -> Self {
        ChatEndpoint {
            agent,
            body_limit: DEFAULT_BODY_LIMIT,
            keep_alive: Some(super::http::DEFAULT_KEEP_ALIVE),
            max_waiting_runs: DEFAULT_MAX_WAITING_RUNS,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            waiting: Arc::default(),
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

    /// Keeps at most `runs` runs waiting for an approval answer; beyond
    /// that, a run's calls are denied at once.
    pub fn max_waiting_runs(mut self, runs: usize) -> Self {
        self.max_waiting_runs = runs;
        self
    }

    /// Drops a run whose approval answer has not come within `timeout`.
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// How many runs wait for an approval answer now.
    pub fn waiting_runs(&self) -> usize {
        lock(&self.waiting).runs.len()
    }
}

impl<M, St> ChatEndpoint<M>
where
    M: Service<ChatRequest, Response = St> + Clone + Send + Sync + 'static,
    M::Error: Into<ToolError>,
    M::Future: Send + 'static,
    St: Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
{
    /// The router: `POST /`. Generic over the state of the app it nests
    /// into (it carries its own).
    pub fn into_router<S>(self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new()
            .route("/", post(chat::<M, St>))
            .with_state(Arc::new(self))
    }

    /// The response to one chat request: a resumed run if it answers a
    /// kept one, else a new run.
    fn respond(&self, request: ChatBody, extensions: axum::http::Extensions) -> Response {
        let answers = request.approval_answers();
        let resumed = (!answers.is_empty())
            .then(|| self.resume(&answers))
            .flatten();
        let (live, message_id) = match resumed {
            Some(live) => {
                let id = request.last_assistant_id().map(str::to_owned);
                (live, id.unwrap_or_else(|| new_id("msg")))
            }
            None => {
                let history = match request.history() {
                    Ok(history) => history,
                    Err(why) => return bad_request(why),
                };
                let approvals = Arc::new(Approvals::default());
                let mut extensions = extensions;
                extensions.insert(approvals.caller());
                let events = self.agent.run_with(history, extensions);
                (Live::new(events, approvals), new_id("msg"))
            }
        };
        let open = Open {
            live: Some(live),
            out: VecDeque::from([Out::Chunk(
                json!({"type": "start", "messageId": message_id}),
            )]),
            stalled: None,
            waiting: Arc::clone(&self.waiting),
            max_waiting_runs: self.max_waiting_runs,
            approval_timeout: self.approval_timeout,
        };
        let events = Sse::new(open.into_stream());
        let mut response = match self.keep_alive {
            Some(interval) => events
                .keep_alive(KeepAlive::new().interval(interval))
                .into_response(),
            None => events.into_response(),
        };
        let headers = response.headers_mut();
        headers.insert(
            "x-vercel-ai-ui-message-stream",
            HeaderValue::from_static("v1"),
        );
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        response
    }

    /// Takes the kept run these answers are for, and gives each of its
    /// calls its decision.
    fn resume(&self, answers: &[Answer]) -> Option<Live> {
        let parked = {
            let mut waiting = lock(&self.waiting);
            waiting.sweep(self.approval_timeout);
            let key = answers
                .iter()
                .find_map(|answer| waiting.by_approval.get(&answer.approval_id).copied())?;
            waiting.take(key)?
        };
        for approval_id in &parked.approval_ids {
            let decision = match answers.iter().find(|a| &a.approval_id == approval_id) {
                Some(Answer { approved: true, .. }) => Decision::Allow,
                Some(Answer {
                    reason: Some(reason),
                    ..
                }) if !reason.trim().is_empty() => Decision::deny(reason.clone()),
                Some(_) => Decision::deny("the user denied the call"),
                None => Decision::deny("the user gave no answer"),
            };
            parked.live.approvals.answer(approval_id, decision);
        }
        Some(parked.live)
    }
}

async fn chat<M, St>(State(endpoint): State<Arc<ChatEndpoint<M>>>, request: Request) -> Response
where
    M: Service<ChatRequest, Response = St> + Clone + Send + Sync + 'static,
    M::Error: Into<ToolError>,
    M::Future: Send + 'static,
    St: Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
{
    let (parts, body) = request.into_parts();
    let bytes = match super::http::read_limited(body, endpoint.body_limit).await {
        Ok(bytes) => bytes,
        Err(rejection) => return rejection.into_response(),
    };
    let request: ChatBody = match serde_json::from_slice(&bytes) {
        Ok(request) => request,
        Err(err) => return bad_request(format!("the body is not a chat request: {err}")),
    };
    endpoint.respond(request, parts.extensions)
}

/// A `400` with the model-facing error shape of `serve::http`.
fn bad_request(why: String) -> Response {
    let body = json!({"error": why, "kind": "invalid_request"});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

// ---------------------------------------------------------------------------
// The request

/// What the AI SDK's `DefaultChatTransport` posts.
#[derive(Deserialize)]
struct ChatBody {
    messages: Vec<UiMessage>,
}

#[derive(Deserialize)]
struct UiMessage {
    #[serde(default)]
    id: Option<String>,
    role: String,
    #[serde(default)]
    parts: Vec<Value>,
}

/// A person's answer to one approval request.
struct Answer {
    approval_id: String,
    approved: bool,
    reason: Option<String>,
}

impl ChatBody {
    /// The approval answers in the last message, if it is the assistant's.
    fn approval_answers(&self) -> Vec<Answer> {
        let Some(last) = self.messages.last().filter(|m| m.role == "assistant") else {
            return Vec::new();
        };
        last.parts
            .iter()
            .filter(|part| part["state"] == "approval-responded")
            .filter_map(|part| {
                let approval = &part["approval"];
                Some(Answer {
                    approval_id: approval["id"].as_str()?.to_owned(),
                    approved: approval["approved"].as_bool()?,
                    reason: approval["reason"].as_str().map(str::to_owned),
                })
            })
            .collect()
    }

    fn last_assistant_id(&self) -> Option<&str> {
        let last = self.messages.last().filter(|m| m.role == "assistant")?;
        last.id.as_deref().filter(|id| !id.is_empty())
    }

    /// The conversation as the model's messages.
    fn history(&self) -> Result<Vec<Message>, String> {
        if self.messages.is_empty() {
            return Err("the conversation is empty: send at least one message".to_owned());
        }
        let mut out = Vec::with_capacity(self.messages.len());
        for (at, message) in self.messages.iter().enumerate() {
            match message.role.as_str() {
                "system" => out.push(Message::system(texts(&message.parts))),
                "user" => out.push(Message::user(texts(&message.parts))),
                "assistant" => assistant(&message.parts, &mut out)
                    .map_err(|why| format!("message {at} (assistant): {why}"))?,
                other => {
                    return Err(format!(
                        "message {at} has role `{}`: expected `system`, `user` or `assistant`",
                        other.chars().take(64).collect::<String>()
                    ))
                }
            }
        }
        Ok(out)
    }
}

/// The text parts of a message, joined.
fn texts(parts: &[Value]) -> String {
    let mut text = String::new();
    for part in parts.iter().filter(|part| part["type"] == "text") {
        if let Some(piece) = part["text"].as_str() {
            text.push_str(piece);
        }
    }
    text
}

/// An assistant message's steps as assistant messages and the tool
/// results that answer their calls.
fn assistant(parts: &[Value], out: &mut Vec<Message>) -> Result<(), String> {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut flush = |text: &mut String, calls: &mut Vec<ToolCall>, results: &mut Vec<Message>| {
        if !text.is_empty() || !calls.is_empty() {
            out.push(Message::Assistant {
                content: (!text.is_empty()).then(|| std::mem::take(text)),
                tool_calls: std::mem::take(calls),
            });
            out.append(results);
        }
    };
    for (at, part) in parts.iter().enumerate() {
        let kind = part["type"].as_str().unwrap_or_default();
        let name = match kind {
            "step-start" => {
                flush(&mut text, &mut calls, &mut results);
                continue;
            }
            "text" => {
                text.push_str(part["text"].as_str().unwrap_or_default());
                continue;
            }
            "dynamic-tool" => part["toolName"].as_str().unwrap_or_default(),
            _ => match kind.strip_prefix("tool-") {
                Some(name) => name,
                None => continue,
            },
        };
        let id = part["toolCallId"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| format!("part {at} (`{kind}`) has no `toolCallId`"))?;
        let arguments = match &part["input"] {
            Value::Null => "{}".to_owned(),
            input => input.to_string(),
        };
        let result = match part["state"].as_str().unwrap_or_default() {
            "output-available" => match &part["output"] {
                Value::String(text) => text.clone(),
                output => output.to_string(),
            },
            "output-error" => part["errorText"]
                .as_str()
                .unwrap_or("the call failed")
                .to_owned(),
            "output-denied" => match part["approval"]["reason"].as_str() {
                Some(reason) => format!("not run: the user denied the call: {reason}"),
                None => "not run: the user denied the call".to_owned(),
            },
            _ => "not run: the call got no answer (its approval was not given in time)".to_owned(),
        };
        calls.push(ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments,
        });
        results.push(Message::tool(id, result));
    }
    flush(&mut text, &mut calls, &mut results);
    Ok(())
}

// ---------------------------------------------------------------------------
// Approvals

/// One run's approval requests: the approval id each call got, the
/// answer's channel, and whether the caller's approver has been asked.
#[derive(Default)]
struct Approvals {
    inner: Mutex<ApprovalsInner>,
}

#[derive(Default)]
struct ApprovalsInner {
    slots: HashMap<String, Slot>,
    /// The response waiting for the caller's approver to be asked.
    waker: Option<Waker>,
}

struct Slot {
    approval_id: String,
    answer: Option<oneshot::Sender<Decision>>,
    wait: Option<oneshot::Receiver<Decision>>,
    asked: bool,
}

impl Slot {
    fn new() -> Self {
        let (answer, wait) = oneshot::channel();
        Slot {
            approval_id: new_token(),
            answer: Some(answer),
            wait: Some(wait),
            asked: false,
        }
    }
}

impl Approvals {
    /// The approver the run's calls ask.
    fn caller(self: &Arc<Self>) -> CallerApprover {
        let approvals = Arc::clone(self);
        CallerApprover::new(THE_USER, move |asked: &ApprovalRequest| {
            let wait = approvals.ask(&asked.call_id);
            async move {
                wait.await.unwrap_or_else(|_| {
                    Decision::deny("no answer came: the conversation ended without one")
                })
            }
        })
    }

    /// The approval id of `call_id`'s request.
    fn approval_id(&self, call_id: &str) -> String {
        let mut inner = lock(&self.inner);
        let slot = inner
            .slots
            .entry(call_id.to_owned())
            .or_insert_with(Slot::new);
        slot.approval_id.clone()
    }

    /// The caller's approver is asked about `call_id`: the answer's
    /// receiver. Asked again (the same id twice), it gets a new request.
    fn ask(&self, call_id: &str) -> oneshot::Receiver<Decision> {
        let mut inner = lock(&self.inner);
        let slot = inner
            .slots
            .entry(call_id.to_owned())
            .or_insert_with(Slot::new);
        if slot.wait.is_none() {
            *slot = Slot::new();
        }
        slot.asked = true;
        let wait = slot.wait.take().expect("a fresh or untaken slot");
        if let Some(waker) = inner.waker.take() {
            waker.wake();
        }
        wait
    }

    /// Whether the caller's approver was asked about every one of `calls`;
    /// if not, `waker` is woken when it is.
    fn all_asked(&self, calls: &[String], waker: &Waker) -> bool {
        let mut inner = lock(&self.inner);
        let all = calls
            .iter()
            .all(|call| inner.slots.get(call).is_some_and(|slot| slot.asked));
        if !all {
            inner.waker = Some(waker.clone());
        }
        all
    }

    fn asked(&self, call_id: &str) -> bool {
        lock(&self.inner)
            .slots
            .get(call_id)
            .is_some_and(|slot| slot.asked)
    }

    /// The approval ids of `calls`.
    fn ids_of(&self, calls: &[String]) -> Vec<String> {
        let inner = lock(&self.inner);
        calls
            .iter()
            .filter_map(|call| inner.slots.get(call).map(|s| s.approval_id.clone()))
            .collect()
    }

    /// Delivers the decision for `approval_id`.
    fn answer(&self, approval_id: &str, decision: Decision) {
        let mut inner = lock(&self.inner);
        let slot = inner
            .slots
            .values_mut()
            .find(|slot| slot.approval_id == approval_id);
        if let Some(answer) = slot.and_then(|slot| slot.answer.take()) {
            let _ = answer.send(decision);
        }
    }

    /// Denies every call still waiting, with `reason`.
    fn deny_all(&self, reason: &str) {
        let mut inner = lock(&self.inner);
        for slot in inner.slots.values_mut() {
            if let Some(answer) = slot.answer.take() {
                let _ = answer.send(Decision::deny(reason));
            }
        }
    }
}

/// The runs kept for an approval answer.
#[derive(Default)]
struct WaitingRuns {
    runs: HashMap<u64, Parked>,
    by_approval: HashMap<String, u64>,
    next: u64,
}

struct Parked {
    live: Live,
    approval_ids: Vec<String>,
    since: Instant,
}

impl WaitingRuns {
    /// Drops the runs kept longer than `timeout` (cancelling their calls).
    fn sweep(&mut self, timeout: Duration) {
        let now = Instant::now();
        let expired: Vec<u64> = self
            .runs
            .iter()
            .filter(|(_, parked)| now.duration_since(parked.since) >= timeout)
            .map(|(key, _)| *key)
            .collect();
        for key in expired {
            drop(self.take(key));
        }
    }

    fn take(&mut self, key: u64) -> Option<Parked> {
        let parked = self.runs.remove(&key)?;
        for id in &parked.approval_ids {
            self.by_approval.remove(id);
        }
        Some(parked)
    }
}

// ---------------------------------------------------------------------------
// The response

/// A run in progress, between responses when it waits: its events, what
/// the mapping has said, its approvals.
struct Live {
    events: AgentStream,
    map: Mapper,
    approvals: Arc<Approvals>,
}

impl Live {
    fn new(events: AgentStream, approvals: Arc<Approvals>) -> Self {
        Live {
            events,
            map: Mapper::default(),
            approvals,
        }
    }
}

enum Out {
    Chunk(Value),
    Done,
}

/// One response's stream.
struct Open {
    live: Option<Live>,
    out: VecDeque<Out>,
    /// The calls of an [`AgentEvent::AwaitingApproval`] not followed by
    /// another event: once the caller's approver is asked about all of
    /// them, the run is kept and the response ends.
    stalled: Option<Vec<String>>,
    waiting: Arc<Mutex<WaitingRuns>>,
    max_waiting_runs: usize,
    approval_timeout: Duration,
}

enum Step {
    Event(Option<AgentEvent>),
    AllAsked,
}

impl Open {
    fn into_stream(self) -> impl Stream<Item = Result<Event, Infallible>> + Send {
        stream::unfold(self, |mut open| async move {
            let out = open.next().await?;
            let event = match out {
                Out::Chunk(chunk) => Event::default().data(chunk.to_string()),
                Out::Done => Event::default().data("[DONE]"),
            };
            Some((Ok(event), open))
        })
    }

    async fn next(&mut self) -> Option<Out> {
        loop {
            if let Some(out) = self.out.pop_front() {
                return Some(out);
            }
            let live = self.live.as_mut()?;
            let stalled = self.stalled.as_deref();
            let step = std::future::poll_fn(|cx: &mut Context<'_>| {
                if let Some(calls) = stalled {
                    if live.approvals.all_asked(calls, cx.waker()) {
                        return Poll::Ready(Step::AllAsked);
                    }
                }
                live.events.poll_next_unpin(cx).map(Step::Event)
            })
            .await;
            match step {
                Step::AllAsked => self.park(),
                Step::Event(Some(AgentEvent::AwaitingApproval { call_ids })) => {
                    self.stalled = Some(call_ids);
                }
                Step::Event(Some(event)) => {
                    self.stalled = None;
                    let done = matches!(event, AgentEvent::Done(_));
                    let approvals = Arc::clone(&live.approvals);
                    live.map.event(event, &approvals, &mut self.out);
                    if done {
                        self.live = None;
                        self.out.push_back(Out::Done);
                    }
                }
                // The agent's stream always ends with `Done`; this is only
                // defence.
                Step::Event(None) => {
                    live.map.finish_step(&mut self.out);
                    self.out.push_back(Out::Chunk(
                        json!({"type": "finish", "finishReason": "other"}),
                    ));
                    self.out.push_back(Out::Done);
                    self.live = None;
                }
            }
        }
    }

    /// The run waits on the person: keep it under its approval ids and end
    /// the response — or, with no room, deny its calls and go on.
    fn park(&mut self) {
        let calls = self.stalled.take().unwrap_or_default();
        let Some(mut live) = self.live.take() else {
            return;
        };
        let mut waiting = lock(&self.waiting);
        waiting.sweep(self.approval_timeout);
        if waiting.runs.len() >= self.max_waiting_runs {
            drop(waiting);
            live.approvals.deny_all(
                "not run: the server holds too many conversations waiting for approval; ask again later",
            );
            self.live = Some(live);
            return;
        }
        live.map.finish_step(&mut self.out);
        self.out.push_back(Out::Chunk(
            json!({"type": "finish", "finishReason": "tool-calls"}),
        ));
        self.out.push_back(Out::Done);
        let approval_ids = live.approvals.ids_of(&calls);
        let key = waiting.next;
        waiting.next += 1;
        for id in &approval_ids {
            waiting.by_approval.insert(id.clone(), key);
        }
        waiting.runs.insert(
            key,
            Parked {
                live,
                approval_ids,
                since: Instant::now(),
            },
        );
    }
}

/// Turns agent events into chunks, keeping what the protocol needs: the
/// open text part, the step, the ids the tool parts got.
#[derive(Default)]
struct Mapper {
    step_open: bool,
    /// A tool event came in this step: the next model event begins another.
    after_tools: bool,
    text: Option<String>,
    texts: u64,
    /// The current answer's calls being written: index → the part's id.
    writing: BTreeMap<u32, String>,
    /// Call ids with a tool part.
    parts: HashSet<String>,
    /// A call's id → its part's id, where they differ (an id that came
    /// after the call's first fragment).
    alias: HashMap<String, String>,
    /// Calls denied by their approval: they end `tool-output-denied`.
    denied: HashSet<String>,
}

impl Mapper {
    fn event(&mut self, event: AgentEvent, approvals: &Approvals, out: &mut VecDeque<Out>) {
        let mut push = |chunk: Value| out.push_back(Out::Chunk(chunk));
        match event {
            AgentEvent::TextDelta(delta) => {
                self.model_event(&mut push);
                let id = match &self.text {
                    Some(id) => id.clone(),
                    None => {
                        self.texts += 1;
                        let id = format!("text-{}", self.texts);
                        push(json!({"type": "text-start", "id": id}));
                        self.text = Some(id.clone());
                        id
                    }
                };
                push(json!({"type": "text-delta", "id": id, "delta": delta}));
            }
            AgentEvent::ToolCallStarted { index, id, name } => {
                self.model_event(&mut push);
                self.close_text(&mut push);
                let id = id.unwrap_or_else(|| format!("call_{index}"));
                self.writing.insert(index, id.clone());
                self.parts.insert(id.clone());
                push(json!({"type": "tool-input-start", "toolCallId": id, "toolName": name}));
            }
            AgentEvent::ToolCallInputDelta { index, arguments } => {
                if let Some(id) = self.writing.get(&index) {
                    push(
                        json!({"type": "tool-input-delta", "toolCallId": id, "inputTextDelta": arguments}),
                    );
                }
            }
            AgentEvent::ToolCall(call) => {
                self.tool_event(&mut push);
                let id = self.part_of_call(&call.id);
                let text = crate::arguments::or_empty_object(&call.arguments);
                match serde_json::from_str::<Value>(text) {
                    Ok(input) => push(json!({
                        "type": "tool-input-available", "toolCallId": id,
                        "toolName": call.name, "input": input,
                    })),
                    Err(err) => push(json!({
                        "type": "tool-input-error", "toolCallId": id, "toolName": call.name,
                        "input": call.arguments, "errorText": format!("the arguments are not JSON: {err}"),
                    })),
                }
            }
            AgentEvent::ToolOutput { call_id, output } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                push(json!({
                    "type": "tool-output-available", "toolCallId": id,
                    "output": item_value(&output), "preliminary": true,
                }));
            }
            AgentEvent::Progress { call_id, progress } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                push(json!({
                    "type": "data-progress", "id": format!("progress-{id}"),
                    "data": {"toolCallId": id, "progress": progress.progress,
                             "total": progress.total, "message": progress.message},
                }));
            }
            AgentEvent::ApprovalRequested { call_id, .. } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                let approval_id = approvals.approval_id(&call_id);
                push(
                    json!({"type": "tool-approval-request", "approvalId": approval_id, "toolCallId": id}),
                );
            }
            AgentEvent::ApprovalDecided {
                call_id, decision, ..
            } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                let approved = !matches!(decision, Decision::Deny { .. });
                if !approved {
                    self.denied.insert(id);
                }
                // The caller's own answer is already in its message.
                if !approvals.asked(&call_id) {
                    let approval_id = approvals.approval_id(&call_id);
                    let mut chunk = json!({"type": "tool-approval-response", "approvalId": approval_id, "approved": approved});
                    if let Decision::Deny { reason } = decision {
                        chunk["reason"] = Value::String(reason);
                    }
                    push(chunk);
                }
            }
            AgentEvent::ToolResult {
                call_id,
                name,
                result,
            } => {
                self.tool_event(&mut push);
                let id = self.part_id(&call_id);
                if self.parts.insert(id.clone()) {
                    // A call refused before it was announced.
                    push(
                        json!({"type": "tool-input-available", "toolCallId": id, "toolName": name, "input": {}}),
                    );
                }
                if self.denied.remove(&id) {
                    push(json!({"type": "tool-output-denied", "toolCallId": id}));
                } else if result.is_error {
                    let message = result
                        .error
                        .as_ref()
                        .map_or_else(|| result.text(), |err| err.message().to_owned());
                    push(
                        json!({"type": "tool-output-error", "toolCallId": id, "errorText": message}),
                    );
                } else {
                    push(
                        json!({"type": "tool-output-available", "toolCallId": id, "output": result_value(&result)}),
                    );
                }
            }
            AgentEvent::TurnDiscarded { .. } => {
                self.text = None;
                self.writing.clear();
                push(json!({"type": "reset-step"}));
            }
            AgentEvent::Error(err) => {
                self.close_text(&mut push);
                push(json!({"type": "error", "errorText": err.message()}));
            }
            AgentEvent::Done(done) => {
                self.finish_step(out);
                let usage = done.usage.map(|usage| {
                    json!({"inputTokens": usage.prompt_tokens, "outputTokens": usage.completion_tokens})
                });
                out.push_back(Out::Chunk(json!({
                    "type": "finish",
                    "finishReason": finish_reason(done.stop),
                    "messageMetadata": {"usage": usage, "steps": done.steps, "stop": done.stop.as_str()},
                })));
            }
            // Handled by the response; any later event is ignored here.
            _ => {}
        }
    }

    /// A model event: it opens a step, or a new one after the tool calls.
    fn model_event(&mut self, push: &mut impl FnMut(Value)) {
        if self.step_open && !self.after_tools {
            return;
        }
        if self.step_open {
            self.close_text(push);
            push(json!({"type": "finish-step"}));
        }
        push(json!({"type": "start-step"}));
        self.step_open = true;
        self.after_tools = false;
        self.writing.clear();
    }

    fn tool_event(&mut self, push: &mut impl FnMut(Value)) {
        self.close_text(push);
        self.after_tools = true;
    }

    fn close_text(&mut self, push: &mut impl FnMut(Value)) {
        if let Some(id) = self.text.take() {
            push(json!({"type": "text-end", "id": id}));
        }
    }

    fn finish_step(&mut self, out: &mut VecDeque<Out>) {
        let mut push = |chunk: Value| out.push_back(Out::Chunk(chunk));
        self.close_text(&mut push);
        if std::mem::take(&mut self.step_open) {
            push(json!({"type": "finish-step"}));
        }
    }

    /// The part of a complete call: the one its first fragment opened.
    fn part_of_call(&mut self, call_id: &str) -> String {
        let written = self
            .writing
            .iter()
            .find(|(_, id)| *id == call_id)
            .map(|(index, _)| *index);
        let id = match written {
            Some(index) => self.writing.remove(&index),
            None => self.writing.pop_first().map(|(_, id)| id),
        };
        let id = id.unwrap_or_else(|| call_id.to_owned());
        if id != call_id {
            self.alias.insert(call_id.to_owned(), id.clone());
        }
        self.parts.insert(id.clone());
        id
    }

    fn part_id(&self, call_id: &str) -> String {
        self.alias
            .get(call_id)
            .cloned()
            .unwrap_or_else(|| call_id.to_owned())
    }
}

fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::Finished => "stop",
        StopReason::Length => "length",
        StopReason::ContentFilter => "content-filter",
        StopReason::ModelError => "error",
        _ => "other",
    }
}

/// One streamed item as a preliminary output: text as a string, JSON as
/// its value, anything else as its JSON.
fn item_value(output: &ToolOutput) -> Value {
    if let Some(text) = output.as_text() {
        return Value::String(text.to_owned());
    }
    if let Some(json) = output.as_json() {
        return json.value();
    }
    serde_json::to_value(output).unwrap_or(Value::Null)
}

/// A result as the final output: its structured content, else its text.
fn result_value(result: &ToolResult) -> Value {
    result
        .structured_content()
        .unwrap_or_else(|| Value::String(result.text()))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `{prefix}-` and a process-unique number (ids of messages).
fn new_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{prefix}-{}",
        new_token_with(NEXT.fetch_add(1, Ordering::Relaxed))
    )
}

/// 128 unpredictable bits, hex: an approval id.
fn new_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    new_token_with(NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Two SipHash values of `n` under std's randomly keyed hashers: without
/// the process's keys, not to be guessed from other tokens.
fn new_token_with(n: u64) -> String {
    let a = std::collections::hash_map::RandomState::new().hash_one(n);
    let b = std::collections::hash_map::RandomState::new().hash_one(!n);
    format!("{a:016x}{b:016x}")
}
