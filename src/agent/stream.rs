//! [`AgentStream`](super::AgentStream): the events of one run, as it goes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::mpsc;

use super::event::AgentEvent;
use super::journal::RunJournal;
use super::resume::ResumeError;
use crate::ToolError;

/// The event stream of one agent run. Dropping it cancels the run.
pub struct AgentStream {
    pub(super) driver: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    pub(super) events: mpsc::Receiver<AgentEvent>,
    pub(super) journal: Arc<RunJournal>,
}

impl AgentStream {
    /// The run's id: what [`Agent::resume`](super::Agent::resume) takes (with a store).
    pub fn run_id(&self) -> &str {
        self.journal.run_id()
    }

    /// Stops the run here and leaves it in the store, waiting for a
    /// decision ([`RunStatus::Waiting`](super::store::RunStatus::Waiting),
    /// held by no process): for a front end that takes a person's answer
    /// in a later request, after [`AgentEvent::AwaitingApproval`](super::AgentEvent::AwaitingApproval).
    /// Whichever process gets the answer resumes it ([`Agent::resume`](super::Agent::resume)).
    /// The calls waiting for approval had not started; a call still
    /// running now is cancelled and reads, on resume, as started (see
    /// [`CallState`](super::store::CallState)).
    ///
    /// Without a store, the run is only dropped:
    /// [`ResumeError::NoStore`].
    pub async fn suspend(mut self) -> Result<(), ResumeError> {
        // Dropping the driver cancels the waiting calls; an append in
        // flight is dropped with it (the journal's lock is released).
        self.driver = None;
        if !self.journal.is_durable() {
            return Err(ResumeError::NoStore);
        }
        self.journal.suspend().await.map_err(ResumeError::from)
    }
}

impl AgentStream {
    /// Runs to the end and returns the run's typed answer
    /// ([`Agent::output`](super::Agent::output)) as a `T`; the events are
    /// dropped. A run that ended without one is an error saying how it
    /// ended (with the error event's message, when there was one).
    pub async fn output<T: serde::de::DeserializeOwned>(mut self) -> Result<T, ToolError> {
        use futures_util::StreamExt;
        let mut error = None;
        while let Some(event) = self.next().await {
            match event {
                AgentEvent::Error(err) => error = Some(err),
                AgentEvent::Done(done) => {
                    return match done.output {
                        Some(value) => serde_json::from_value(value).map_err(|err| {
                            ToolError::invalid_arguments(format!(
                                "the answer does not decode as the type asked for: {err}"
                            ))
                        }),
                        None => Err(match error {
                            Some(err) => ToolError::new(
                                err.kind(),
                                format!(
                                    "the run ended ({}) without an answer: {}",
                                    done.stop.as_str(),
                                    err.message()
                                ),
                            ),
                            None => ToolError::failed(format!(
                                "the run ended ({}) without an answer",
                                done.stop.as_str()
                            )),
                        }),
                    };
                }
                _ => {}
            }
        }
        Err(ToolError::failed("the run ended without a last event"))
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
            .field("run_id", &self.run_id())
            .field("running", &self.driver.is_some())
            .finish_non_exhaustive()
    }
}
