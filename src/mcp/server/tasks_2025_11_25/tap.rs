//! [`Tap`]: a session's transport, with the 2025-11-25 task scheme's
//! shapes made at its edge, and the [`Session`] it marks every request
//! with.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::{
    ClientRequest, CustomRequest, CustomResult, GetExtensions, JsonRpcMessage, JsonRpcRequest,
    JsonRpcResponse, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;

use super::shapes::{with_capability, with_execution};
use crate::mcp::call::{TaskSupport, Tasks};
use crate::mcp::server::revision;

/// The session a request came on: a random name per session, put in the
/// request's extensions by the [`Tap`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Session(pub(super) Arc<str>);

/// A session's transport, with the 2025-11-25 task scheme's shapes made at
/// its edge (see the [module docs](super)).
pub(in crate::mcp::server) struct Tap<T> {
    inner: T,
    support: Arc<HashMap<String, TaskSupport>>,
    /// The server's tasks: a session's are cancelled when it closes.
    tasks: Arc<Tasks>,
    session: Session,
    /// Set once the session has negotiated 2025-11-25, when a tool runs as
    /// a task.
    legacy: bool,
}

impl<T> Tap<T> {
    pub(in crate::mcp::server) fn new(
        inner: T,
        support: Arc<HashMap<String, TaskSupport>>,
        tasks: Arc<Tasks>,
    ) -> Self {
        Tap {
            inner,
            support,
            tasks,
            session: Session(uuid::Uuid::new_v4().simple().to_string().into()),
            legacy: false,
        }
    }

    fn outgoing(&mut self, message: TxJsonRpcMessage<RoleServer>) -> TxJsonRpcMessage<RoleServer> {
        let JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc,
            id,
            result,
        }) = message
        else {
            return message;
        };
        let result = match result {
            ServerResult::InitializeResult(init)
                if revision::speaks_legacy_tasks(init.protocol_version.as_str())
                    && self.support.values().any(|s| *s != TaskSupport::Forbidden) =>
            {
                self.legacy = true;
                with_capability(serde_json::to_value(&init))
                    .map(|v| ServerResult::CustomResult(CustomResult(v)))
                    .unwrap_or(ServerResult::InitializeResult(init))
            }
            ServerResult::ListToolsResult(list) if self.legacy => {
                with_execution(serde_json::to_value(&list), &self.support)
                    .map(|v| ServerResult::CustomResult(CustomResult(v)))
                    .unwrap_or(ServerResult::ListToolsResult(list))
            }
            result => result,
        };
        JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc,
            id,
            result,
        })
    }

    fn incoming(&self, message: &mut RxJsonRpcMessage<RoleServer>) {
        let JsonRpcMessage::Request(JsonRpcRequest { request, .. }) = message else {
            return;
        };
        if self.legacy {
            // rmcp would answer these in the extension's shapes, and only
            // to a client that declared it.
            let custom = match request {
                ClientRequest::GetTaskRequest(get) => {
                    Some(("tasks/get", serde_json::to_value(&get.params)))
                }
                ClientRequest::CancelTaskRequest(cancel) => {
                    Some(("tasks/cancel", serde_json::to_value(&cancel.params)))
                }
                _ => None,
            };
            if let Some((method, Ok(params))) = custom {
                let mut custom = CustomRequest::new(method, Some(params));
                custom.extensions = std::mem::take(request.extensions_mut());
                *request = ClientRequest::CustomRequest(custom);
            }
        }
        request.extensions_mut().insert(self.session.clone());
    }
}

impl<T> Drop for Tap<T> {
    fn drop(&mut self) {
        if self.legacy {
            self.tasks.end_session(&self.session.0);
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Tap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let item = self.outgoing(item);
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let mut message = self.inner.receive().await?;
        self.incoming(&mut message);
        Some(message)
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
