//! Conversations that outlive a run: [`Session`], a conversation kept by
//! id in the agent's run store, each run continuing the last one's
//! history (as compacted), and why one may be refused ([`SessionError`]).
//!
//! A session *is* a stored run, journal and all, under the session's id:
//! its next run takes it with one append at the version read — its
//! status running, its counts started again, the new messages added — so
//! two runs of one session at once are never interleaved: the second is
//! refused ([`SessionError::Busy`]), in this process or another. While a
//! run of the session waits for approval, the session waits with it
//! ([`SessionError::Waiting`]: resume it with
//! [`Agent::resume`](super::Agent::resume), by the session's id).
//!
//! A session ends with its store's time for finished runs (the stores'
//! `finished_ttl`, a day by default) after its last run, or when it is
//! [deleted](Session::delete).

use std::fmt;
use std::sync::Arc;

use http::Extensions;

use crate::model::{Message, ModelService};

use super::journal::RunJournal;
use super::run::Run;
use super::running_sessions::SessionGuard;
use super::settings::Agent;
use super::store::checkpoint::now_ms;
use super::store::{RunStatus, StoreError};
use super::stream::AgentStream;

/// The longest session id: 256 bytes.
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// The default bound on a session's history: 10,000 messages. A session
/// whose history would pass it is refused ([`SessionError::TooLong`]);
/// compaction ([`Agent::compaction`]) keeps a history well below it.
pub const DEFAULT_MAX_SESSION_MESSAGES: usize = 10_000;

/// A conversation kept by id across runs, in the agent's run store: each
/// run continues the last one's history (as compacted).
///
/// A session *is* a stored run, journal and all, under the session's id:
/// its next run takes it with one append at the version read — its
/// status running, its counts started again, the new messages added — so
/// two runs of one session at once are never interleaved: the second is
/// refused ([`SessionError::Busy`]), in this process or another. While a
/// run of the session waits for approval, the session waits with it
/// ([`SessionError::Waiting`]: resume it with [`Agent::resume`], by the
/// session's id). A session ends with its store's `finished_ttl` (a day
/// by default) after its last run, or when it is
/// [deleted](Session::delete).
///
/// ```
/// use futures_util::StreamExt;
/// use toolstack::agent::store::MemoryStore;
/// use toolstack::agent::{Agent, AgentEvent};
/// use toolstack::model::{Message, ScriptedModel, Turn};
/// use toolstack::Toolbox;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new([Turn::new().text("Hello, Ada."), Turn::new().text("Ada.")]);
/// let agent = Agent::new(model, Toolbox::new()).store(MemoryStore::new());
/// let session = agent.session("chat-42");
///
/// let _: Vec<AgentEvent> = session.run(Message::user("I am Ada.")).await?.collect().await;
/// let _: Vec<AgentEvent> = session.run(Message::user("Who am I?")).await?.collect().await;
/// // The second run read the first's history: four messages, then its answer.
/// assert_eq!(session.history().await?.len(), 4);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Session<M> {
    agent: Agent<M>,
    id: Arc<str>,
    max_messages: usize,
    existing: bool,
}

impl<M> Agent<M> {
    /// The session `id`: a conversation kept in the agent's run store
    /// ([`Agent::store`]) across runs; see [`Session`].
    pub fn session(&self, id: impl Into<Arc<str>>) -> Session<M>
    where
        M: Clone,
    {
        Session {
            agent: self.clone(),
            id: id.into(),
            max_messages: DEFAULT_MAX_SESSION_MESSAGES,
            existing: false,
        }
    }
}

impl<M> Session<M> {
    /// The session's id (the run id its runs are stored under).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Refuses a run that would take the history past `messages`
    /// ([`DEFAULT_MAX_SESSION_MESSAGES`] unless set).
    pub fn max_messages(mut self, messages: usize) -> Self {
        self.max_messages = messages;
        self
    }

    /// Runs only a session the store has: an unknown id (never used,
    /// deleted, or expired) is [`SessionError::NotFound`] instead of the
    /// start of a new conversation.
    pub fn existing(mut self) -> Self {
        self.existing = true;
        self
    }
}

impl<M> Session<M>
where
    M: ModelService,
{
    /// The next run of the conversation: `message` after the history kept
    /// (the first run starts the conversation with it).
    pub async fn run(&self, message: Message) -> Result<AgentStream, SessionError> {
        self.run_with(vec![message], Extensions::new()).await
    }

    /// The next run, with more than one message added (a system prompt
    /// and the first question, say), on behalf of a caller (see
    /// [`Agent::run_with`]).
    pub async fn run_with(
        &self,
        messages: Vec<Message>,
        extensions: Extensions,
    ) -> Result<AgentStream, SessionError> {
        let durability = self.checked()?;
        let session = || self.id.to_string();
        let Some(guard) = SessionGuard::enter(&durability.process, &self.id) else {
            return Err(SessionError::Busy {
                session: session(),
                process: Some(durability.process.to_string()),
            });
        };
        let (journal, added) = match RunJournal::load(&durability, &self.id).await? {
            None if self.existing => return Err(SessionError::NotFound { session: session() }),
            None => {
                self.bound(messages.len())?;
                let fresh = RunJournal::fresh(Arc::clone(&self.id), messages, Some(durability));
                (fresh, Vec::new())
            }
            Some(stored) => {
                let checkpoint = &stored.checkpoint;
                match checkpoint.status {
                    RunStatus::Waiting => return Err(SessionError::Waiting { session: session() }),
                    // A run of this process that ended without a word (its
                    // stream dropped), or one whose holder's lease passed:
                    // taken over between steps, never mid-step.
                    RunStatus::Running
                        if checkpoint.held_by_other(&durability.process, now_ms()) =>
                    {
                        return Err(SessionError::Busy {
                            session: session(),
                            process: checkpoint.holder.as_ref().map(|h| h.process.clone()),
                        })
                    }
                    RunStatus::Running if !checkpoint.step.is_empty() => {
                        return Err(SessionError::Interrupted { session: session() })
                    }
                    _ if checkpoint.messages.is_empty() => {
                        return Err(SessionError::NotKept { session: session() })
                    }
                    _ => {}
                }
                self.bound(checkpoint.messages.len().saturating_add(messages.len()))?;
                (RunJournal::stored(durability, &self.id, stored), messages)
            }
        };
        journal
            .open_session(added, guard)
            .await
            .map_err(|err| match err {
                StoreError::Conflict { .. } => SessionError::Busy {
                    session: session(),
                    process: None,
                },
                err => SessionError::Store(err),
            })?;
        Ok(Run::start(self.agent.clone(), journal, extensions, None))
    }

    /// The conversation as stored: the history the next run continues
    /// (as compacted); [`SessionError::NotFound`] for an unknown id.
    pub async fn history(&self) -> Result<Vec<Message>, SessionError> {
        let durability = self.checked()?;
        match RunJournal::load(&durability, &self.id).await? {
            Some(stored) => Ok(Arc::unwrap_or_clone(stored.checkpoint.messages)),
            None => Err(SessionError::NotFound {
                session: self.id.to_string(),
            }),
        }
    }

    /// Forgets the session; whether the store had it. A run of it going
    /// on now fails at its next append. A store that does not answer is
    /// ridden out as a run's own calls are
    /// ([`Agent::store_outage`](crate::agent::Agent::store_outage)).
    pub async fn delete(&self) -> Result<bool, SessionError> {
        let durability = self.checked()?;
        let forget = || super::lifecycle::forget(&*durability.store, &self.id);
        let ride_out = durability.ride_out();
        Ok(ride_out
            .call("deleting session", &self.id, None, forget)
            .await?)
    }

    /// The agent's store, for a session id that can be stored.
    fn checked(&self) -> Result<super::journal::Durability, SessionError> {
        if self.id.is_empty()
            || self.id.len() > MAX_SESSION_ID_BYTES
            || self.id.chars().any(char::is_control)
        {
            return Err(SessionError::InvalidId {
                session: self.id.chars().take(64).collect(),
            });
        }
        self.agent.durability.clone().ok_or(SessionError::NoStore)
    }

    fn bound(&self, messages: usize) -> Result<(), SessionError> {
        match messages > self.max_messages {
            true => Err(SessionError::TooLong {
                session: self.id.to_string(),
                messages,
                max: self.max_messages,
            }),
            false => Ok(()),
        }
    }
}

/// Why a session's run could not begin (or its history be read).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SessionError {
    /// The agent has no store ([`Agent::store`]).
    NoStore,
    /// The id is empty, longer than [`MAX_SESSION_ID_BYTES`], or holds a
    /// control character.
    InvalidId {
        /// The id (its first 64 characters).
        session: String,
    },
    /// The store has no such session (never used, deleted, or expired).
    NotFound {
        /// The session.
        session: String,
    },
    /// A run of the session is going on (in this process, or in another
    /// whose lease has not passed), or began at the same moment.
    Busy {
        /// The session.
        session: String,
        /// The process running it, if known.
        process: Option<String>,
    },
    /// A run of the session waits for a person's decision: resume it
    /// ([`Agent::resume`], by the session's id) first.
    Waiting {
        /// The session.
        session: String,
    },
    /// The session's last run stopped mid-step (its process gone, its
    /// lease passed): resume it ([`Agent::resume`], by the session's id)
    /// to finish the step's calls first.
    Interrupted {
        /// The session.
        session: String,
    },
    /// The history would pass the session's bound
    /// ([`Session::max_messages`]).
    TooLong {
        /// The session.
        session: String,
        /// The messages it would hold.
        messages: usize,
        /// The bound.
        max: usize,
    },
    /// The store kept only that the session's last run ended, not its
    /// history (a store set to keep finished runs' heads only).
    NotKept {
        /// The session.
        session: String,
    },
    /// The store failed, or the session's journal is corrupt or of a
    /// newer format.
    Store(StoreError),
}

impl SessionError {
    /// The HTTP status a front end answers with: 400 (a bad id), 404, 409
    /// (busy, waiting, interrupted), 413 (too long), 503 (the store down),
    /// 500.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode;
        match self {
            SessionError::InvalidId { .. } => StatusCode::BAD_REQUEST,
            SessionError::NotFound { .. } => StatusCode::NOT_FOUND,
            SessionError::Busy { .. }
            | SessionError::Waiting { .. }
            | SessionError::Interrupted { .. } => StatusCode::CONFLICT,
            SessionError::TooLong { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            SessionError::Store(StoreError::Unavailable { .. }) => StatusCode::SERVICE_UNAVAILABLE,
            SessionError::NoStore | SessionError::NotKept { .. } | SessionError::Store(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::NoStore => {
                f.write_str("the agent keeps no run store: it cannot keep a session")
            }
            SessionError::InvalidId { session } => write!(
                f,
                "{session:?} is not a session id: give 1 to {MAX_SESSION_ID_BYTES} bytes with no control character"
            ),
            SessionError::NotFound { session } => {
                write!(f, "no session {session} is stored (never used, deleted, or expired)")
            }
            SessionError::Busy {
                session,
                process: Some(process),
            } => write!(
                f,
                "session {session} has a run going on in process {process}: wait for it to end"
            ),
            SessionError::Busy {
                session,
                process: None,
            } => write!(f, "session {session} was taken by another run at the same moment"),
            SessionError::Waiting { session } => write!(
                f,
                "session {session} waits for a decision on its last run: resume that run first"
            ),
            SessionError::Interrupted { session } => write!(
                f,
                "session {session}'s last run stopped in the middle of a tool step: resume it to finish the step first"
            ),
            SessionError::TooLong {
                session,
                messages,
                max,
            } => write!(
                f,
                "session {session} would hold {messages} messages, over its bound of {max}: compact the agent's history, or start a new session"
            ),
            SessionError::NotKept { session } => write!(
                f,
                "the store kept only that session {session}'s last run ended, not its history"
            ),
            SessionError::Store(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SessionError::Store(err) => Some(err),
            _ => None,
        }
    }
}

impl From<StoreError> for SessionError {
    fn from(err: StoreError) -> Self {
        SessionError::Store(err)
    }
}
