//! [`ClientLog`]: MCP logging (`notifications/message`) for tools.
//!
//! rmcp 3.11 marks MCP logging deprecated (SEP-2577 drops it from a future
//! protocol revision), but clients of the current revisions — and the
//! conformance suite — still use it, so this module opts in knowingly.
#![allow(deprecated)]

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::{Peer, RoleServer};
use serde_json::Value;

/// No level set yet: every message goes out.
pub(super) const LEVEL_UNSET: u8 = 0;

pub(super) fn level_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 1,
        LoggingLevel::Info => 2,
        LoggingLevel::Notice => 3,
        LoggingLevel::Warning => 4,
        LoggingLevel::Error => 5,
        LoggingLevel::Critical => 6,
        LoggingLevel::Alert => 7,
        LoggingLevel::Emergency => 8,
    }
}

/// Tools and logging.
pub(super) fn capabilities() -> rmcp::model::ServerCapabilities {
    rmcp::model::ServerCapabilities::builder()
        .enable_tools()
        .enable_logging()
        .build()
}

/// `logging/setLevel`: the least level of the messages the client gets
/// from now on (kept here with the rest of the deprecated logging API).
pub(super) fn set_level(store: &AtomicU8, level: LoggingLevel) {
    store.store(level_rank(level), Ordering::Relaxed);
}

/// Sends log messages to the MCP client that called the tool
/// (`notifications/message`), honouring the level the client set with
/// `logging/setLevel`.
///
/// The server puts one in the extensions of every call it makes; a tool
/// reads it from its [`ToolContext`](crate::ToolContext) (or its request)
/// and logs when called over MCP:
///
/// ```
/// use toolstack::mcp::ClientLog;
/// use toolstack::{tool, ToolContext, ToolError};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args {}
///
/// let t = tool::from_fn_with_context("work", |_: Args, ctx: ToolContext| async move {
///     if let Some(log) = ctx.extensions().get::<ClientLog>() {
///         log.info("starting").await;
///     }
///     Ok::<_, ToolError>("done")
/// });
/// # let _ = t;
/// ```
#[derive(Clone)]
pub struct ClientLog {
    peer: Peer<RoleServer>,
    level: Level,
}

/// The lowest level the client wants.
#[derive(Clone)]
enum Level {
    /// The session's, from `logging/setLevel` (up to 2025-11-25).
    Session(Arc<AtomicU8>),
    /// The request's, from its `_meta` (2026-07-28): none there, no
    /// messages.
    Request(Option<u8>),
}

impl ClientLog {
    /// A log at the session's level.
    pub(super) fn session(peer: Peer<RoleServer>, level: Arc<AtomicU8>) -> Self {
        ClientLog {
            peer,
            level: Level::Session(level),
        }
    }

    /// A log at the level the request's `_meta` asks for
    /// (`io.modelcontextprotocol/logLevel`); silent without one.
    pub(super) fn request(peer: Peer<RoleServer>, level: Option<LoggingLevel>) -> Self {
        ClientLog {
            peer,
            level: Level::Request(level.map(level_rank)),
        }
    }

    fn threshold(&self) -> Option<u8> {
        match &self.level {
            Level::Session(level) => Some(level.load(Ordering::Relaxed)),
            Level::Request(level) => *level,
        }
    }

    /// Sends `data` at `level`, unless the client asked for a higher level
    /// (or, on 2026-07-28, for no messages at all by setting none).
    /// A client that has gone away is not an error for the tool: the
    /// message is dropped.
    pub async fn log(&self, level: LoggingLevel, data: impl Into<Value>) {
        if self.threshold().is_none_or(|min| level_rank(level) < min) {
            return;
        }
        let param = LoggingMessageNotificationParam::new(level, data.into());
        if let Err(err) = self.peer.notify_logging_message(param).await {
            tracing::debug!(%err, "log notification not sent");
        }
    }

    /// Sends `data` at debug level.
    pub async fn debug(&self, data: impl Into<Value>) {
        self.log(LoggingLevel::Debug, data).await
    }

    /// Sends `data` at info level.
    pub async fn info(&self, data: impl Into<Value>) {
        self.log(LoggingLevel::Info, data).await
    }

    /// Sends `data` at warning level.
    pub async fn warning(&self, data: impl Into<Value>) {
        self.log(LoggingLevel::Warning, data).await
    }

    /// Sends `data` at error level.
    pub async fn error(&self, data: impl Into<Value>) {
        self.log(LoggingLevel::Error, data).await
    }
}

impl std::fmt::Debug for ClientLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientLog")
            .field("level", &self.threshold())
            .finish()
    }
}
