//! The endpoint serving: its router, a chat request answered with a new
//! or resumed run, a reconnecting client's replay.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::extract::Path;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

use crate::agent::lifecycle;
use crate::agent::{Resume, ResumeError, SessionError};
use crate::approval::Decision;
use crate::model::ModelService;

use super::approvals::{split_approval_id, Approvals};
use super::ids::new_id;
use super::outgoing::Outgoing;
use super::refusal::{bad_request, refused, resume_refused, session_refused, store_unavailable};
use super::request::{ApprovalAnswer, ChatBody};
use super::response::{LiveRun, OpenResponse};
use super::resume;
use super::{ChatEndpoint, MAX_CHAT_ID_BYTES, THE_USER};

impl<M> ChatEndpoint<M>
where
    M: ModelService + Sync,
{
    /// The router: `POST /` and `GET /{chatId}/stream`. Generic over the state of the app it nests
    /// into (it carries its own).
    pub fn into_router<S>(self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new()
            .route("/", post(chat::<M>))
            .route("/{chat_id}/stream", get(reconnect::<M>))
            .with_state(Arc::new(self))
    }

    /// The response to one chat request: a resumed run if it answers a
    /// kept one, else a new run.
    pub(super) async fn respond(
        &self,
        request: ChatBody,
        extensions: axum::http::Extensions,
    ) -> Response {
        #[cfg(feature = "restate")]
        if let Some(restate) = &self.restate {
            let _ = extensions;
            return self.respond_on_restate(restate, request).await;
        }
        let answers = request.approval_answers();
        let resumed = match answers.is_empty() {
            true => None,
            false => match self
                .resume(&answers, self.chat(&request), extensions.clone())
                .await
            {
                Ok(None) if self.sessions => {
                    // The history is the server's: a run no longer kept
                    // cannot be started again from the client's.
                    let why = "no run waits for these answers any more (it ended, or waited past the approval timeout): reload the chat";
                    return refused(StatusCode::NOT_FOUND, "not_found", why.to_owned());
                }
                Ok(resumed) => resumed,
                Err(refused) => return refused,
            },
        };
        let (live, message_id) = match resumed {
            Some(mut live) => {
                // The calls of the resumed step have their parts already.
                live.map.announced(request.last_assistant_calls());
                let id = request.last_assistant_id().map(str::to_owned);
                (live, id.unwrap_or_else(|| new_id("msg")))
            }
            None if self.sessions => match self.session_run(&request, extensions).await {
                Ok(live) => (live, new_id("msg")),
                Err(refused) => return refused,
            },
            None => {
                let history = match request.history() {
                    Ok(history) => history,
                    Err(why) => return bad_request(why),
                };
                let approvals = Arc::new(Approvals::new(self.keys.clone()));
                let mut extensions = extensions;
                extensions.insert(approvals.caller());
                let events = self.agent.run_with(history, extensions);
                let _ = approvals.run_id.set(events.run_id().to_owned());
                (LiveRun::new(events, approvals), new_id("msg"))
            }
        };
        let mut live = live;
        live.map.typed = self.agent.output_schema().is_some();
        let open = OpenResponse {
            live: Some(live),
            out: VecDeque::from([Outgoing::Chunk(
                json!({"type": "start", "messageId": message_id}),
            )]),
            stalled: None,
            store: Arc::clone(&self.store),
            max_waiting_runs: self.max_waiting_runs,
            approval_timeout: self.approval_timeout,
            ride_out: self.agent.store_ride_out(),
            room: None,
        };
        let chat_id = request
            .id
            .filter(|id| !id.is_empty() && id.len() <= MAX_CHAT_ID_BYTES);
        match (&self.log, chat_id) {
            (Some(log), Some(chat_id)) => {
                let ride_out = open.ride_out;
                let live = resume::produce(open, Arc::clone(log), chat_id, ride_out).await;
                self.sse(live)
            }
            _ => self.sse(open.into_stream()),
        }
    }

    /// The chat whose session answers resume, for a conversation kept on
    /// the server.
    pub(super) fn chat<'a>(&self, request: &'a ChatBody) -> Option<&'a str> {
        let id = request.id.as_deref()?;
        (self.sessions && !id.is_empty() && id.len() <= MAX_CHAT_ID_BYTES).then_some(id)
    }

    /// A new run of the conversation kept under the chat's id: the
    /// client's new message after the history kept, once the history it
    /// sent (if any) agrees with it.
    pub(super) async fn session_run(
        &self,
        request: &ChatBody,
        extensions: axum::http::Extensions,
    ) -> Result<LiveRun, Response> {
        let Some(chat_id) = request
            .id
            .as_deref()
            .filter(|id| !id.is_empty() && id.len() <= MAX_CHAT_ID_BYTES)
        else {
            return Err(bad_request(format!(
                "the conversation is kept on the server by chat id: send the chat's `id` (1 to {MAX_CHAT_ID_BYTES} bytes)"
            )));
        };
        let message = request.new_user_message().map_err(bad_request)?;
        let session = self.agent.session(chat_id);
        if request.messages.len() > 1 {
            let kept = match session.history().await {
                Ok(kept) => kept,
                Err(SessionError::NotFound { .. }) => {
                    let why = format!("the server keeps no conversation {chat_id}: the history sent is not trusted; send only the new message to start one");
                    return Err(refused(StatusCode::CONFLICT, "history_mismatch", why));
                }
                Err(err) => return Err(session_refused(&err)),
            };
            if let Err(why) = request.agrees_with(&kept) {
                return Err(refused(StatusCode::CONFLICT, "history_mismatch", why));
            }
        }
        let approvals = Arc::new(Approvals::new(self.keys.clone()));
        let mut extensions = extensions;
        extensions.insert(approvals.caller());
        let events = session
            .run_with(vec![message], extensions)
            .await
            .map_err(|err| session_refused(&err))?;
        let _ = approvals.run_id.set(events.run_id().to_owned());
        Ok(LiveRun::new(events, approvals))
    }

    /// An SSE response of the protocol, with its keep-alive comments.
    pub(super) fn sse<S>(&self, events: S) -> Response
    where
        S: futures_core::Stream<
                Item = Result<axum::response::sse::Event, std::convert::Infallible>,
            > + Send
            + 'static,
    {
        let events = Sse::new(events);
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

    /// Resumes the stored run these answers are for, each of its waiting
    /// calls with its decision (a call left unanswered is denied). `None`
    /// when no such run is kept (never, expired, or the answers name none):
    /// the conversation then starts a new run.
    pub(super) async fn resume(
        &self,
        answers: &[ApprovalAnswer],
        chat: Option<&str>,
        extensions: axum::http::Extensions,
    ) -> Result<Option<LiveRun>, Response> {
        let Some(run_id) = answers
            .iter()
            .find_map(|answer| split_approval_id(&answer.approval_id, chat))
            .map(|(run_id, _)| run_id.to_owned())
        else {
            return Ok(None);
        };
        if let Some(keys) = &self.keys {
            self.verify(keys, &run_id, chat, answers).await?;
        }
        let mut resume = Resume::new()
            .by(THE_USER)
            .otherwise(Decision::deny("the user gave no answer"))
            .max_age(self.approval_timeout);
        for answer in answers {
            let Some((_, call_id)) = split_approval_id(&answer.approval_id, chat)
                .filter(|(answer_run, _)| *answer_run == run_id)
            else {
                continue;
            };
            let decision = match answer {
                ApprovalAnswer { approved: true, .. } => Decision::Allow,
                ApprovalAnswer {
                    reason: Some(reason),
                    ..
                } if !reason.trim().is_empty() => Decision::deny(reason.clone()),
                _ => Decision::deny("the user denied the call"),
            };
            resume = resume.decide(call_id, decision);
        }
        let approvals = Arc::new(Approvals::new(self.keys.clone()));
        let _ = approvals.run_id.set(run_id.clone());
        let mut extensions = extensions;
        extensions.insert(approvals.caller());
        match self
            .agent
            .resume(&run_id, resume.extensions(extensions))
            .await
        {
            Ok(events) => Ok(Some(LiveRun::new(events, approvals))),
            Err(ResumeError::NotFound { .. }) => Ok(None),
            Err(ResumeError::Expired { .. }) => {
                // It waited too long: forget it (its calls never ran). A
                // store that stays down leaves it to the expiry by the
                // time index.
                let forgotten = self
                    .agent
                    .store_ride_out()
                    .call("forgetting run", &run_id, None, || {
                        lifecycle::forget(&*self.store, &run_id)
                    })
                    .await;
                if let Err(err) = forgotten {
                    tracing::warn!(run_id, error = %err, "a run that waited past the approval timeout was not forgotten");
                }
                Ok(None)
            }
            Err(err) => Err(resume_refused(&err)),
        }
    }
}

/// `GET /{chatId}/stream`: the chat's response in progress, from its
/// first chunk; `204` when there is none (or responses are not kept).
pub(super) async fn reconnect<M>(
    State(endpoint): State<Arc<ChatEndpoint<M>>>,
    Path(chat_id): Path<String>,
) -> Response
where
    M: ModelService + Sync,
{
    let Some(log) = &endpoint.log else {
        return StatusCode::NO_CONTENT.into_response();
    };
    if chat_id.len() > MAX_CHAT_ID_BYTES {
        return bad_request(format!("a chat id is at most {MAX_CHAT_ID_BYTES} bytes"));
    }
    let ride_out = endpoint.agent.store_ride_out();
    let active = ride_out
        .call(
            "finding the response in progress of chat",
            &chat_id,
            None,
            || log.active(&chat_id),
        )
        .await;
    match active {
        Ok(Some(stream_id)) => endpoint.sse(resume::replay(Arc::clone(log), stream_id, ride_out)),
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Err(err) => store_unavailable(&err),
    }
}

pub(super) async fn chat<M>(
    State(endpoint): State<Arc<ChatEndpoint<M>>>,
    request: Request,
) -> Response
where
    M: ModelService + Sync,
{
    let (parts, body) = request.into_parts();
    let bytes = match crate::http::tools::read_limited(body, endpoint.body_limit).await {
        Ok(bytes) => bytes,
        Err(rejection) => return rejection.into_response(),
    };
    let request: ChatBody = match serde_json::from_slice(&bytes) {
        Ok(request) => ChatBody::normalized(request),
        Err(err) => return bad_request(format!("the body is not a chat request: {err}")),
    };
    endpoint.respond(request, parts.extensions).await
}
