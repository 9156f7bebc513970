//! What an rmcp error means: a [`ToolError`] of the right kind, from the
//! connection's failures and the server's JSON-RPC errors.

use rmcp::model::ErrorCode;
use rmcp::service::ServiceError;

use crate::{ErrorKind, ToolError};

/// Classifies an rmcp error.
pub(super) fn service_error(err: ServiceError) -> ToolError {
    match err {
        ServiceError::McpError(data) => protocol_error(data),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => ToolError::new(
            ErrorKind::Unavailable,
            format!("the MCP connection is closed: {err}"),
        )
        .with_source(err),
        ServiceError::Timeout { .. } => {
            ToolError::timeout(crate::TimeoutPhase::Open, err.to_string()).with_source(err)
        }
        ServiceError::Cancelled { .. } => ToolError::cancelled(err.to_string()).with_source(err),
        other => ToolError::failed(other.to_string()).with_source(other),
    }
}

/// A JSON-RPC error from the server as a [`ToolError`]: of the kind in its
/// `data` (`{"kind": "not_found"}`, as [`McpServer`](crate::mcp::McpServer)
/// sends it), else guessed from the code and, for servers that send no
/// kind, the message.
pub(super) fn protocol_error(data: rmcp::ErrorData) -> ToolError {
    if let Some(serde_json::Value::Object(fields)) = &data.data {
        if fields.get("kind").is_some_and(serde_json::Value::is_string) {
            let mut sent = fields.clone();
            sent.insert("error".to_owned(), data.message.as_ref().into());
            if let Some(err) = ToolError::from_model_json(&serde_json::Value::Object(sent)) {
                return err;
            }
        }
    }
    if data.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY {
        let required = data
            .data
            .as_ref()
            .and_then(|d| d.get("requiredCapabilities"))
            .map(|caps| caps.to_string())
            .unwrap_or_else(|| "(not named)".to_owned());
        return ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "the MCP server needs a client capability this client did not declare: {required}"
            ),
        );
    }
    let kind =
        if data.code == ErrorCode::METHOD_NOT_FOUND || data.message.starts_with("unknown tool") {
            ErrorKind::NotFound
        } else if data.code == ErrorCode::INVALID_PARAMS {
            ErrorKind::InvalidArguments
        } else {
            ErrorKind::Failed
        };
    ToolError::new(kind, data.message.to_string())
}
