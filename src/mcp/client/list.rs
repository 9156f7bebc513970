//! `tools/list`: the server's tools, each a local [`McpTool`].

use std::sync::Arc;

use rmcp::service::ServiceError;

use super::connection::McpClient;
use super::error::{protocol_error, service_error};
use super::tool::McpTool;
use crate::mcp::convert;
use crate::mcp::telemetry::{OperationEnd, Target};
use crate::{ToolError, Toolbox};

impl McpClient {
    /// The server's tools, each a local tool service.
    pub async fn tools(&self) -> Result<Vec<McpTool>, ToolError> {
        let mut operation = self.operation("tools/list", Target::None, None);
        let tools = match self.running.list_all_tools().await {
            Ok(tools) => {
                operation.end(OperationEnd::Ok);
                tools
            }
            Err(ServiceError::McpError(data)) => {
                operation.end(OperationEnd::Rpc {
                    code: data.code.0,
                    message: &data.message,
                });
                return Err(protocol_error(data));
            }
            Err(err) => {
                let err = service_error(err);
                operation.end(OperationEnd::failed(&err));
                return Err(err);
            }
        };
        Ok(tools
            .iter()
            .map(|tool| McpTool {
                info: Arc::new(convert::tool_from_mcp(tool)),
                client: self.clone(),
            })
            .collect())
    }

    /// The server's tools in a [`Toolbox`] (add a resolver to it to decide
    /// per caller which remote tools are visible).
    pub async fn toolbox(&self) -> Result<Toolbox, ToolError> {
        let mut toolbox = Toolbox::new();
        for tool in self.tools().await? {
            if let Err(dup) = toolbox.try_insert(crate::BoxTool::new(tool)) {
                tracing::warn!(tool = dup.name(), "the MCP server listed a tool twice");
            }
        }
        Ok(toolbox)
    }
}
