//! A `tools/call` as the server drives it: the tool's stream collected
//! into a result, stopping where the tool waits for the client's input
//! (a 2026-07-28 round), kept between rounds, or run as an MCP task.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future;
use rmcp::model::{ProgressNotificationParam, ProgressToken};

use super::input::InputState;
use crate::boxed::ResponseFuture;
use crate::result::{Collecting, Seen};
use crate::{Progress, ToolError, ToolResult, ToolStream};

mod parked;
mod tasks;

pub(super) use self::parked::ParkedCalls;
pub(super) use self::tasks::{LegacyTask, TaskEnd, Tasks, Watcher};

/// Whether a tool's calls may run as MCP tasks (the tasks extension,
/// `io.modelcontextprotocol/tasks`), set per tool with
/// [`McpServer::task_support`](super::McpServer::task_support).
///
/// A client that did not declare the extension never gets a task: its
/// calls of an [`Optional`](TaskSupport::Optional) tool run as ordinary
/// calls, and those of a [`Required`](TaskSupport::Required) one are
/// refused with the protocol's *missing required client capability* error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskSupport {
    /// Calls always run to their result (the default).
    #[default]
    Forbidden,
    /// A call that has not finished by the time it first waits (on
    /// anything but the client's input) becomes a task; one that finishes
    /// at once answers at once.
    Optional,
    /// Every call from a client that supports tasks is a task.
    Required,
}

/// What driving a call gave.
pub(super) enum CallEvent {
    /// A progress report, to pass on.
    Progress(Progress),
    /// The call's result.
    Done(ToolResult),
    /// The tool waits for the client's input: the requests are in the
    /// call's input state.
    NeedsInput,
}

enum Phase {
    Opening(Pin<Box<ResponseFuture>>),
    Streaming(Collecting<ToolStream>),
    Finished,
}

/// One call of a tool, between its rounds.
pub(super) struct ServerCall {
    tool: String,
    phase: Phase,
    pub(super) input: Arc<InputState>,
    result: ToolResult,
}

impl ServerCall {
    pub(super) fn new(tool: String, opened: ResponseFuture, input: Arc<InputState>) -> Self {
        ServerCall {
            tool,
            phase: Phase::Opening(Box::pin(opened)),
            input,
            result: ToolResult::default(),
        }
    }

    pub(super) fn tool(&self) -> &str {
        &self.tool
    }

    fn finish(&mut self) -> CallEvent {
        self.phase = Phase::Finished;
        CallEvent::Done(std::mem::take(&mut self.result))
    }

    pub(super) fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<CallEvent> {
        loop {
            match &mut self.phase {
                Phase::Opening(opened) => match opened.as_mut().poll(cx) {
                    Poll::Ready(Ok(stream)) => {
                        self.phase = Phase::Streaming(Collecting::new(stream))
                    }
                    Poll::Ready(Err(err)) => {
                        self.result.push_error(err);
                        return Poll::Ready(self.finish());
                    }
                    Poll::Pending => break,
                },
                Phase::Streaming(collecting) => match collecting.poll_next(cx) {
                    Poll::Ready(Seen::Progress(progress)) => {
                        return Poll::Ready(CallEvent::Progress(progress));
                    }
                    Poll::Ready(Seen::Output) => {}
                    Poll::Ready(Seen::Done(result)) => {
                        self.result = result;
                        return Poll::Ready(self.finish());
                    }
                    Poll::Pending => break,
                },
                Phase::Finished => {
                    self.result
                        .push_error(ToolError::polled_after_completion("an MCP call"));
                    return Poll::Ready(CallEvent::Done(std::mem::take(&mut self.result)));
                }
            }
        }
        // The tool waits: for the client, when it has just asked.
        if self.input.poll_unsent(cx.waker()) {
            Poll::Ready(CallEvent::NeedsInput)
        } else {
            Poll::Pending
        }
    }

    /// The next step.
    pub(super) fn step(&mut self) -> impl Future<Output = CallEvent> + '_ {
        future::poll_fn(|cx| self.poll_step(cx))
    }

    /// The next step if the call can take it without waiting.
    pub(super) fn look(&mut self) -> impl Future<Output = Option<CallEvent>> + '_ {
        future::poll_fn(|cx| match self.poll_step(cx) {
            Poll::Ready(step) => Poll::Ready(Some(step)),
            Poll::Pending => Poll::Ready(None),
        })
    }
}

/// A progress report as an MCP progress notification.
pub(super) fn progress_param(
    token: ProgressToken,
    progress: Progress,
) -> ProgressNotificationParam {
    let mut param = ProgressNotificationParam::new(token, progress.progress);
    if let Some(total) = progress.total {
        param = param.with_total(total);
    }
    if let Some(message) = progress.message {
        param = param.with_message(message);
    }
    param
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use std::time::Duration;

    use super::*;
    use crate::mcp::input::Backend;
    use crate::{BoxTool, ToolInfo, ToolRequest};

    /// Counts the dropped calls of a tool that never answers.
    struct Dropped(Arc<AtomicUsize>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waiting_call(dropped: &Arc<AtomicUsize>) -> ServerCall {
        let dropped = dropped.clone();
        let tool = BoxTool::with_info(
            ToolInfo::new("ask"),
            tower::service_fn(move |_: ToolRequest| {
                let guard = Dropped(dropped.clone());
                async move {
                    let _guard = guard;
                    futures_util::future::pending::<Result<ToolStream, ToolError>>().await
                }
            }),
        );
        let input = InputState::new(Backend::Rounds, None);
        ServerCall::new(
            "ask".into(),
            tool.call_shared(ToolRequest::new("ask", "{}")),
            input,
        )
    }

    /// The kept 2025-11-25 tasks are bounded (8 × the running bound), and
    /// those past their time go, making room, without a scan of the rest.
    #[tokio::test(start_paused = true)]
    async fn kept_legacy_tasks_are_bounded_and_expire_in_order() {
        let mut tasks = Tasks::new();
        tasks.max_running = 2;
        tasks.ttl = Duration::from_millis(50);
        let session: Arc<str> = "s".into();
        let finished = |tasks: &Tasks| {
            let input = InputState::new(Backend::Rounds, None);
            let result = ToolResult::from_error(ToolError::failed("done"));
            tasks.finished_legacy(input, result, session.clone())
        };
        let mut ids = Vec::new();
        for _ in 0..16 {
            ids.push(finished(&tasks).expect("room").task_id);
            // The finished tasks end: only the kept bound is left.
            tokio::task::yield_now().await;
        }
        assert!(finished(&tasks).is_none(), "over 8 × 2 kept");
        assert!(tasks.legacy(&ids[0], "s").is_some());
        assert!(
            tasks.legacy(&ids[0], "other").is_none(),
            "another session's"
        );
        tokio::time::advance(Duration::from_millis(101)).await;
        assert!(tasks.legacy(&ids[0], "s").is_none(), "past its time");
        assert!(finished(&tasks).is_some(), "room again");
        assert_eq!(tasks.legacy.lock().unwrap().tasks.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_call_is_dropped_by_the_next_park_and_cannot_be_resumed() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut waiting = ParkedCalls::new();
        waiting.ttl = Duration::from_millis(50);
        let first = waiting.park(waiting_call(&dropped)).unwrap();
        tokio::time::advance(Duration::from_millis(100)).await;
        // Another call that waits sweeps the expired one out: its tool is
        // dropped though its client never came back.
        let second = waiting.park(waiting_call(&dropped)).unwrap();
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!(waiting.len(), 1);
        // The first call's retry, too late, finds nothing.
        assert!(waiting.resume(&first, "ask").is_none());
        // A state is for its own tool, and for one retry.
        assert!(waiting.resume(&second, "other").is_none());
        assert!(waiting.resume(&second, "ask").is_none());
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_the_timeout_is_refused_even_with_nothing_parked_since() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut waiting = ParkedCalls::new();
        waiting.ttl = Duration::from_millis(50);
        let token = waiting.park(waiting_call(&dropped)).unwrap();
        tokio::time::advance(Duration::from_millis(51)).await;
        assert!(waiting.resume(&token, "ask").is_none());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_call_resumes_once_and_the_bound_refuses_more() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut waiting = ParkedCalls::new();
        waiting.max = 1;
        let token = waiting.park(waiting_call(&dropped)).unwrap();
        assert!(
            waiting.park(waiting_call(&dropped)).is_none(),
            "over the bound"
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(waiting.resume(&token, "ask").is_some());
        assert!(waiting.resume(&token, "ask").is_none());
    }
}
