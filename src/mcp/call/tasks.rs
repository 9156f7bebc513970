//! Calls run as MCP tasks: the registry of a server's tasks (the
//! 2026-07-28 extension and the 2025-11-25 scheme), what a task's watcher
//! is told, and how a task ends.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use futures_util::future::{self, Either, FutureExt};
use rmcp::model::{
    DetailedTask, ProgressToken, ServerNotification, Task, TaskPayload, TaskStatusNotification,
    TaskStatusNotificationParams,
};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, Peer, RoleServer};

use crate::mcp::convert;
use crate::mcp::input::{Backend, InputState};
use crate::{ErrorKind, Progress, ToolError, ToolResult};

use super::{progress_param, CallEvent, ServerCall};

/// The server's MCP tasks: rmcp's [`TaskManager`] runs and keeps them.
pub(crate) struct Tasks {
    pub(crate) manager: TaskManager,
    pub(crate) ttl: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) max_running: usize,
    /// The tasks of the 2025-11-25 scheme, by id: their session, and their
    /// end as `tasks/result` answers it.
    pub(super) legacy: Mutex<KeptTasks>,
}

/// The tasks of the 2025-11-25 scheme, and their ids in the order they
/// expire (every task is kept as long), so that dropping the expired ones
/// costs what they are, not what is kept.
#[derive(Default)]
pub(crate) struct KeptTasks {
    pub(super) tasks: HashMap<String, LegacyTask>,
    expiry: std::collections::VecDeque<(Instant, String)>,
}

impl KeptTasks {
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
pub(crate) struct LegacyTask {
    /// The session that made it; no other sees it.
    pub(crate) session: Arc<str>,
    pub(crate) input: Arc<InputState>,
    pub(crate) end: tokio::sync::watch::Receiver<Option<TaskEnd>>,
    kept_until: Instant,
}

/// How a task ended, as `tasks/result` answers it.
#[derive(Clone, Debug)]
pub(crate) enum TaskEnd {
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
    pub(crate) fn new() -> Self {
        Tasks {
            manager: TaskManager::new(),
            ttl: Duration::from_secs(300),
            poll_interval: Duration::from_millis(500),
            max_running: 1024,
            legacy: Mutex::default(),
        }
    }

    /// The 2025-11-25 task `id`, when `session` made it and it is kept.
    pub(crate) fn legacy(&self, id: &str, session: &str) -> Option<LegacyTask> {
        let legacy = self.legacy.lock().unwrap_or_else(|e| e.into_inner());
        let task = legacy.tasks.get(id)?;
        (&*task.session == session && task.kept_until > Instant::now()).then(|| task.clone())
    }

    /// Whether `id` is a task of the 2025-11-25 scheme (which the
    /// extension's methods do not show).
    pub(crate) fn is_legacy(&self, id: &str) -> bool {
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
    pub(crate) fn spawn_legacy(
        &self,
        call: ServerCall,
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
    pub(crate) fn finished_legacy(
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
    fn legacy_room(&self) -> Option<std::sync::MutexGuard<'_, KeptTasks>> {
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
    pub(crate) fn end_session(&self, session: &str) {
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
    pub(crate) fn spawn(&self, call: ServerCall, watcher: Option<Watcher>) -> Option<Task> {
        self.run(call, watcher, None)
    }

    /// Runs `call` as a task: of the extension (its input through the
    /// task), or, with `legacy`, of the 2025-11-25 scheme (its input on the
    /// session, its end sent to `legacy`).
    fn run(
        &self,
        mut call: ServerCall,
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
                            CallEvent::Progress(progress) => {
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
                            CallEvent::Done(result) => break result,
                            // Requests go to the task from now on; none can
                            // be left from the rounds before.
                            CallEvent::NeedsInput => {
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
    pub(crate) fn finished(&self, result: ToolResult) -> Option<Task> {
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
pub(crate) struct Watcher {
    pub(crate) peer: Peer<RoleServer>,
    pub(crate) progress_token: Option<ProgressToken>,
    pub(crate) manager: TaskManager,
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
pub(crate) fn ended(
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

/// A tool's result as a task's end: `completed` (with `isError` for a
/// tool error), or `failed` for a panic, which the protocol reserves for
/// failures of the server rather than the tool.
pub(crate) fn task_outcome(result: ToolResult) -> Result<rmcp::model::CallToolResult, TaskExit> {
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
pub(crate) fn say_why(
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
pub(crate) fn describe(progress: &Progress) -> String {
    let done = match progress.total {
        Some(total) => format!("{}/{}", progress.progress, total),
        None => progress.progress.to_string(),
    };
    match &progress.message {
        Some(message) => format!("{done}: {message}"),
        None => done,
    }
}
