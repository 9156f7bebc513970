//! A `tools/call` as the server drives it: the tool's stream collected
//! into a result, stopping where the tool waits for the client's input
//! (a 2026-07-28 round), kept between rounds, or run as an MCP task.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use futures_util::future::{self, Either, FutureExt};
use rmcp::model::{
    DetailedTask, ProgressNotificationParam, ProgressToken, ServerNotification, Task, TaskPayload,
    TaskStatusNotification, TaskStatusNotificationParams,
};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, Peer, RoleServer};

use super::convert;
use super::input::{Backend, InputState};
use crate::boxed::ResponseFuture;
use crate::result::{Collecting, Seen};
use crate::{ErrorKind, Progress, ToolError, ToolResult, ToolStream};

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
pub(super) enum Step {
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
pub(super) struct Call {
    tool: String,
    phase: Phase,
    pub(super) input: Arc<InputState>,
    result: ToolResult,
}

impl Call {
    pub(super) fn new(tool: String, opened: ResponseFuture, input: Arc<InputState>) -> Self {
        Call {
            tool,
            phase: Phase::Opening(Box::pin(opened)),
            input,
            result: ToolResult::default(),
        }
    }

    pub(super) fn tool(&self) -> &str {
        &self.tool
    }

    fn finish(&mut self) -> Step {
        self.phase = Phase::Finished;
        Step::Done(std::mem::take(&mut self.result))
    }

    pub(super) fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<Step> {
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
                        return Poll::Ready(Step::Progress(progress));
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
                    return Poll::Ready(Step::Done(std::mem::take(&mut self.result)));
                }
            }
        }
        // The tool waits: for the client, when it has just asked.
        if self.input.poll_unsent(cx.waker()) {
            Poll::Ready(Step::NeedsInput)
        } else {
            Poll::Pending
        }
    }

    /// The next step.
    pub(super) fn step(&mut self) -> impl Future<Output = Step> + '_ {
        future::poll_fn(|cx| self.poll_step(cx))
    }

    /// The next step if the call can take it without waiting.
    pub(super) fn look(&mut self) -> impl Future<Output = Option<Step>> + '_ {
        future::poll_fn(|cx| match self.poll_step(cx) {
            Poll::Ready(step) => Poll::Ready(Some(step)),
            Poll::Pending => Poll::Ready(None),
        })
    }
}

/// Calls waiting for their client's next round, under their
/// `requestState`: a random 128-bit token, so a client can resume only a
/// call it was given (a forged or altered state finds nothing).
pub(super) struct Waiting {
    calls: Mutex<HashMap<String, (Call, Instant)>>,
    pub(super) ttl: Duration,
    pub(super) max: usize,
}

impl Waiting {
    pub(super) fn new() -> Self {
        Waiting {
            calls: Mutex::new(HashMap::new()),
            ttl: Duration::from_secs(600),
            max: 1024,
        }
    }

    /// Keeps `call` until its client retries; its `requestState`, or
    /// `None` when too many calls wait already.
    pub(super) fn park(&self, call: Call) -> Option<String> {
        let now = Instant::now();
        let token = uuid::Uuid::new_v4().simple().to_string();
        let expired = {
            let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
            let expired = take_expired(&mut calls, now);
            if calls.len() >= self.max {
                return None;
            }
            calls.insert(token.clone(), (call, now + self.ttl));
            expired
        };
        drop(expired);
        Some(token)
    }

    /// The call kept under `token`, if it is a call of `tool` and has not
    /// expired. A token is good for one retry.
    pub(super) fn resume(&self, token: &str, tool: &str) -> Option<Call> {
        let now = Instant::now();
        let (found, expired) = {
            let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
            let found = calls.remove(token);
            (found, take_expired(&mut calls, now))
        };
        drop(expired);
        let (call, deadline) = found?;
        if call.tool() != tool || deadline <= now {
            return None;
        }
        Some(call)
    }

    pub(super) fn len(&self) -> usize {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Takes out the calls whose clients never came back, to be dropped (which
/// cancels their tools) once the lock is released: a tool's drop runs no
/// code under it.
fn take_expired(
    calls: &mut HashMap<String, (Call, Instant)>,
    now: Instant,
) -> Vec<(Call, Instant)> {
    let expired: Vec<String> = calls
        .iter()
        .filter(|(_, (_, deadline))| *deadline <= now)
        .map(|(token, _)| token.clone())
        .collect();
    expired.iter().filter_map(|t| calls.remove(t)).collect()
}

/// The server's MCP tasks: rmcp's [`TaskManager`] runs and keeps them.
pub(super) struct Tasks {
    pub(super) manager: TaskManager,
    pub(super) ttl: Duration,
    pub(super) poll_interval: Duration,
    pub(super) max_running: usize,
    /// The tasks of the 2025-11-25 scheme, by id: their session, and their
    /// end as `tasks/result` answers it.
    legacy: Mutex<Kept>,
}

/// The tasks of the 2025-11-25 scheme, and their ids in the order they
/// expire (every task is kept as long), so that dropping the expired ones
/// costs what they are, not what is kept.
#[derive(Default)]
struct Kept {
    tasks: HashMap<String, LegacyTask>,
    expiry: std::collections::VecDeque<(Instant, String)>,
}

impl Kept {
    fn insert(&mut self, id: String, task: LegacyTask) {
        self.expiry.push_back((task.kept_until, id.clone()));
        self.tasks.insert(id, task);
    }

    /// Drops the tasks kept past their time.
    fn expire(&mut self, now: Instant) {
        while let Some((until, _)) = self.expiry.front() {
            if *until > now {
                break;
            }
            if let Some((_, id)) = self.expiry.pop_front() {
                self.tasks.remove(&id);
            }
        }
    }
}

/// A task of the 2025-11-25 scheme.
#[derive(Clone)]
pub(super) struct LegacyTask {
    /// The session that made it; no other sees it.
    pub(super) session: Arc<str>,
    pub(super) input: Arc<InputState>,
    pub(super) end: tokio::sync::watch::Receiver<Option<TaskEnd>>,
    kept_until: Instant,
}

/// How a task ended, as `tasks/result` answers it.
#[derive(Clone, Debug)]
pub(super) enum TaskEnd {
    /// The call's result (`isError` for a tool error).
    Result(rmcp::model::CallToolResult),
    /// A failure of the server (a panic): a JSON-RPC error.
    Failed(ErrorData),
    Cancelled,
}

impl TaskEnd {
    fn of(outcome: &Result<rmcp::model::CallToolResult, TaskExit>) -> Self {
        match outcome {
            Ok(result) => TaskEnd::Result(result.clone()),
            Err(TaskExit::Cancelled) => TaskEnd::Cancelled,
            Err(TaskExit::Error(error)) => TaskEnd::Failed(error.clone()),
        }
    }
}

impl Tasks {
    pub(super) fn new() -> Self {
        Tasks {
            manager: TaskManager::new(),
            ttl: Duration::from_secs(300),
            poll_interval: Duration::from_millis(500),
            max_running: 1024,
            legacy: Mutex::default(),
        }
    }

    /// The 2025-11-25 task `id`, when `session` made it and it is kept.
    pub(super) fn legacy(&self, id: &str, session: &str) -> Option<LegacyTask> {
        let legacy = self.legacy.lock().unwrap_or_else(|e| e.into_inner());
        let task = legacy.tasks.get(id)?;
        (&*task.session == session && task.kept_until > Instant::now()).then(|| task.clone())
    }

    /// Whether `id` is a task of the 2025-11-25 scheme (which the
    /// extension's methods do not show).
    pub(super) fn is_legacy(&self, id: &str) -> bool {
        self.legacy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tasks
            .contains_key(id)
    }

    /// At most this many tasks of the 2025-11-25 scheme are kept, running
    /// or ended: eight times the running bound.
    fn max_legacy(&self) -> usize {
        self.max_running.saturating_mul(8)
    }

    /// Runs the rest of `call` as a task of the 2025-11-25 scheme for
    /// `session`: its input goes on the session, `watcher` hears its
    /// progress (not the extension's status notifications), and its end is
    /// kept for `tasks/result`. `None` when too many run, or are kept.
    pub(super) fn spawn_legacy(
        &self,
        call: Call,
        watcher: Option<Watcher>,
        session: Arc<str>,
    ) -> Option<Task> {
        let mut legacy = self.legacy_room()?;
        let (sender, end) = tokio::sync::watch::channel(None);
        let input = call.input.clone();
        let task = self.run(call, watcher, Some(sender))?;
        legacy.insert(task.task_id.clone(), self.kept(session, input, end));
        Some(task)
    }

    /// A 2025-11-25 task that has its result already.
    pub(super) fn finished_legacy(
        &self,
        input: Arc<InputState>,
        result: ToolResult,
        session: Arc<str>,
    ) -> Option<Task> {
        let mut legacy = self.legacy_room()?;
        let outcome = task_outcome(result);
        let (_, end) = tokio::sync::watch::channel(Some(TaskEnd::of(&outcome)));
        let task = self.manager.spawn(self.options(), move |task| {
            say_why(&task, &outcome, true);
            Box::pin(future::ready(outcome))
        });
        legacy.insert(task.task_id.clone(), self.kept(session, input, end));
        Some(task)
    }

    /// The kept tasks, those past their time dropped, when there is room
    /// for one more (and for one more running). The ids of a closed
    /// session's tasks count until they expire: what is kept stays bounded.
    fn legacy_room(&self) -> Option<std::sync::MutexGuard<'_, Kept>> {
        if self.manager.running_task_count() >= self.max_running {
            return None;
        }
        let mut legacy = self.legacy.lock().unwrap_or_else(|e| e.into_inner());
        legacy.expire(Instant::now());
        (legacy.expiry.len() < self.max_legacy()).then_some(legacy)
    }

    fn kept(
        &self,
        session: Arc<str>,
        input: Arc<InputState>,
        end: tokio::sync::watch::Receiver<Option<TaskEnd>>,
    ) -> LegacyTask {
        LegacyTask {
            session,
            input,
            end,
            // rmcp keeps a task its time to live, and as long again once
            // it has ended.
            kept_until: Instant::now() + self.ttl.saturating_mul(2),
        }
    }

    /// Forgets the 2025-11-25 tasks of a session that has closed, and
    /// cancels those still running: nobody can reach them any more.
    pub(super) fn end_session(&self, session: &str) {
        let mut ended = Vec::new();
        self.legacy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tasks
            .retain(|id, task| {
                let theirs = &*task.session == session;
                if theirs {
                    ended.push(id.clone());
                }
                !theirs
            });
        for id in ended {
            let _ = self.manager.cancel_task(&id);
        }
    }

    /// The options of a task: kept for the server's time to live.
    fn options(&self) -> TaskOptions {
        TaskOptions::new()
            .with_ttl_ms(self.ttl.as_millis() as u64)
            .with_poll_interval_ms(self.poll_interval.as_millis() as u64)
    }

    /// Runs the rest of `call` as a task; `None` when too many run already.
    /// On a session, `watcher` gets the task's progress and status as
    /// notifications while it runs (a stateless client polls `tasks/get`).
    pub(super) fn spawn(&self, call: Call, watcher: Option<Watcher>) -> Option<Task> {
        self.run(call, watcher, None)
    }

    /// Runs `call` as a task: of the extension (its input through the
    /// task), or, with `legacy`, of the 2025-11-25 scheme (its input on the
    /// session, its end sent to `legacy`).
    fn run(
        &self,
        mut call: Call,
        watcher: Option<Watcher>,
        legacy: Option<tokio::sync::watch::Sender<Option<TaskEnd>>>,
    ) -> Option<Task> {
        if self.manager.running_task_count() >= self.max_running {
            return None;
        }
        Some(self.manager.spawn(self.options(), move |task| {
            if legacy.is_none() {
                call.input.set_backend(Backend::Task(task.clone()));
            } else {
                call.input.set_related_task(task.task_id());
            }
            let statuses = legacy.is_none();
            Box::pin(async move {
                let status = task.clone();
                let watching = watcher.clone();
                let run = AssertUnwindSafe(async move {
                    loop {
                        match call.step().await {
                            Step::Progress(progress) => {
                                status.set_status_message(describe(&progress));
                                if let Some(watcher) = &watching {
                                    let related = (!statuses).then(|| status.task_id());
                                    watcher.progress(&progress, related).await;
                                    if statuses {
                                        let now = watcher.manager.get_task(status.task_id()).ok();
                                        watcher.status(now).await;
                                    }
                                }
                            }
                            Step::Done(result) => break result,
                            // Requests go to the task from now on; none can
                            // be left from the rounds before.
                            Step::NeedsInput => {
                                break ToolResult::from_error(ToolError::failed(
                                    "the tool asked for input outside its task",
                                ))
                            }
                        }
                    }
                })
                .catch_unwind();
                let cancelled = std::pin::pin!(task.cancelled());
                let outcome = match future::select(std::pin::pin!(run), cancelled).await {
                    // `tasks/cancel` drops the stream, which cancels the tool.
                    Either::Right(((), _)) => Err(TaskExit::Cancelled),
                    Either::Left((Err(_panic), _)) => Err(TaskExit::Error(
                        ErrorData::internal_error("the tool panicked", None),
                    )),
                    Either::Left((Ok(result), _)) => task_outcome(result),
                };
                say_why(&task, &outcome, legacy.is_some());
                if let Some(sender) = legacy {
                    sender.send_replace(Some(TaskEnd::of(&outcome)));
                } else if let Some(watcher) = &watcher {
                    // The end, as `tasks/get` will show it once rmcp
                    // records it.
                    let task = watcher.manager.get_task(task.task_id()).ok();
                    watcher.status(task.map(|t| ended(t, &outcome))).await;
                }
                outcome
            })
        }))
    }

    /// A task that has its result already.
    pub(super) fn finished(&self, result: ToolResult) -> Option<Task> {
        if self.manager.running_task_count() >= self.max_running {
            return None;
        }
        let outcome = task_outcome(result);
        Some(
            self.manager
                .spawn(self.options(), move |_| Box::pin(future::ready(outcome))),
        )
    }
}

/// Who hears of a task's progress and status: the session that made it.
#[derive(Clone)]
pub(super) struct Watcher {
    pub(super) peer: Peer<RoleServer>,
    pub(super) progress_token: Option<ProgressToken>,
    pub(super) manager: TaskManager,
}

impl Watcher {
    /// Sends `progress`; of a 2025-11-25 task (`related`), tied to it in
    /// its `_meta`.
    async fn progress(&self, progress: &Progress, related: Option<&str>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let param = progress_param(token.clone(), progress.clone());
        let mut notification = rmcp::model::ProgressNotification::new(param);
        if let Some(id) = related {
            let mut meta = rmcp::model::NotificationMetaObject::new();
            meta.0.insert(
                crate::mcp::RELATED_TASK_META.into(),
                serde_json::json!({ "taskId": id }),
            );
            notification.extensions.insert(meta);
        }
        let sent = self
            .peer
            .send_notification(ServerNotification::ProgressNotification(notification))
            .await;
        if let Err(err) = sent {
            tracing::debug!(%err, "task progress not sent");
        }
    }

    async fn status(&self, task: Option<DetailedTask>) {
        let Some(task) = task else { return };
        let notification = TaskStatusNotification::new(TaskStatusNotificationParams::new(task));
        let sent = self
            .peer
            .send_notification(ServerNotification::TaskStatusNotification(notification))
            .await;
        if let Err(err) = sent {
            tracing::debug!(%err, "task status not sent");
        }
    }
}

/// `task` with the end `outcome` gives it.
fn ended(
    task: DetailedTask,
    outcome: &Result<rmcp::model::CallToolResult, TaskExit>,
) -> DetailedTask {
    let object = |value: serde_json::Result<serde_json::Value>| match value {
        Ok(serde_json::Value::Object(map)) => map,
        _ => Default::default(),
    };
    let payload = match outcome {
        Ok(result) => TaskPayload::Completed {
            result: object(serde_json::to_value(result)),
        },
        Err(TaskExit::Cancelled) => TaskPayload::Cancelled,
        Err(TaskExit::Error(error)) => TaskPayload::Failed {
            error: object(serde_json::to_value(error)),
        },
    };
    DetailedTask::new(task.task, payload)
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

/// A tool's result as a task's end: `completed` (with `isError` for a
/// tool error), or `failed` for a panic, which the protocol reserves for
/// failures of the server rather than the tool.
fn task_outcome(result: ToolResult) -> Result<rmcp::model::CallToolResult, TaskExit> {
    match &result.error {
        Some(err) if err.kind() == ErrorKind::Panicked => Err(TaskExit::Error(
            ErrorData::internal_error(err.message().to_owned(), None),
        )),
        _ => Ok(convert::call_result(result)),
    }
}

/// A task that failed or was cancelled says why in its status message
/// (the specifications' SHOULD); in the 2025-11-25 scheme a tool's error
/// fails its task too, and says what the tool said.
fn say_why(
    task: &rmcp::task_manager::TaskContext,
    outcome: &Result<rmcp::model::CallToolResult, TaskExit>,
    legacy: bool,
) {
    match outcome {
        Err(TaskExit::Error(error)) => task.set_status_message(error.message.clone()),
        Err(TaskExit::Cancelled) => {
            task.set_status_message("cancelled by the client (tasks/cancel)")
        }
        Ok(result) if legacy && result.is_error == Some(true) => {
            let text: String = result
                .content
                .iter()
                .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
                .collect::<Vec<_>>()
                .join("\n")
                .chars()
                .take(1000)
                .collect();
            task.set_status_message(text)
        }
        Ok(_) => {}
    }
}

/// A progress report as a task's status message.
fn describe(progress: &Progress) -> String {
    let done = match progress.total {
        Some(total) => format!("{}/{}", progress.progress, total),
        None => progress.progress.to_string(),
    };
    match &progress.message {
        Some(message) => format!("{done}: {message}"),
        None => done,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::{BoxTool, ToolInfo, ToolRequest};

    /// Counts the dropped calls of a tool that never answers.
    struct Dropped(Arc<AtomicUsize>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waiting_call(dropped: &Arc<AtomicUsize>) -> Call {
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
        Call::new(
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
        let mut waiting = Waiting::new();
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
        let mut waiting = Waiting::new();
        waiting.ttl = Duration::from_millis(50);
        let token = waiting.park(waiting_call(&dropped)).unwrap();
        tokio::time::advance(Duration::from_millis(51)).await;
        assert!(waiting.resume(&token, "ask").is_none());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_call_resumes_once_and_the_bound_refuses_more() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut waiting = Waiting::new();
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
