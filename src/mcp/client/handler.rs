//! The client side's handler: what the server may ask of the client
//! (sampling, roots, elicitation) answered by the caller's `Answer`.

#![allow(deprecated)] // sampling and roots: SEP-2577 deprecates them in rmcp

use std::sync::Arc;

use futures_util::future::BoxFuture;
use rmcp::model::{
    ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ErrorCode, InputRequest, ListRootsResult, NumberOrString,
};
use rmcp::service::RequestContext;
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient};

use crate::{ErrorKind, ToolError};

/// The client side of the connection: the user's answers to a server's
/// requests for input, if any.
pub(super) struct Handler {
    pub(super) info: ClientConfig,
    pub(super) answers: Option<Arc<dyn Answer>>,
}

pub(super) fn no_answers(what: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("this client answers no {what} requests"),
        None,
    )
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    // Revisions up to 2025-11-25: the server asks with a request.

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        match &self.answers {
            Some(answers) => answers.elicit(params, context).await,
            None => Err(no_answers("elicitation")),
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        match &self.answers {
            Some(answers) => answers.create_message(params, context).await,
            None => Err(no_answers("sampling")),
        }
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        match &self.answers {
            Some(answers) => answers.list_roots(context).await,
            None => Err(no_answers("roots")),
        }
    }
}

/// A user's rmcp [`ClientHandler`], type-erased: what answers a server's
/// requests for input, whichever way they come (a request on the session,
/// an input-required result, a task waiting for input).
pub(super) trait Answer: Send + Sync + 'static {
    fn elicit(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>>;
    fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>>;
    fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<ListRootsResult, ErrorData>>;
}

pub(super) struct Answers<H>(pub(super) Arc<H>);

impl<H: ClientHandler> Answer for Answers<H> {
    fn elicit(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        let handler = self.0.clone();
        Box::pin(async move { handler.create_elicitation(params, context).await })
    }

    fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        let handler = self.0.clone();
        Box::pin(async move { handler.create_message(params, context).await })
    }

    fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<ListRootsResult, ErrorData>> {
        let handler = self.0.clone();
        Box::pin(async move { handler.list_roots(context).await })
    }
}

/// Answers one request for input as its result's JSON.
pub(super) async fn answer_one(
    answers: &dyn Answer,
    key: String,
    request: InputRequest,
    peer: Peer<RoleClient>,
) -> Result<(String, serde_json::Value), ToolError> {
    let context = RequestContext::new(NumberOrString::String(key.as_str().into()), peer);
    let value = match request {
        InputRequest::Elicitation(request) => answers
            .elicit(request.params, context)
            .await
            .and_then(|r| to_json(&r)),
        InputRequest::CreateMessage(request) => answers
            .create_message(request.params, context)
            .await
            .and_then(|r| to_json(&r)),
        InputRequest::ListRoots(_) => answers.list_roots(context).await.and_then(|r| to_json(&r)),
        other => Err(ErrorData::invalid_params(
            format!("an input request of an unknown kind: {other:?}"),
            None,
        )),
    };
    value.map(|v| (key, v)).map_err(|err| {
        ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "could not answer the MCP server's request for input: {}",
                err.message
            ),
        )
    })
}

pub(super) fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, ErrorData> {
    serde_json::to_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}
