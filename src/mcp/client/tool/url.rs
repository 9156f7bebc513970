//! URL elicitations: the URLs of a `-32042` error put to the client's
//! handler, then the call sent again.

use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::ErrorData;

use crate::{ErrorKind, ToolError};

use crate::mcp::client::connection::MAX_INPUT_REQUESTS;

use super::RemoteCall;

/// The JSON-RPC error of a request that needs the user to open a URL
/// first (MCP 2025-11-25, "URL elicitation required").
pub(crate) const URL_ELICITATION_REQUIRED: i32 = -32042;

impl RemoteCall {
    /// A `-32042` error (URL elicitation required, 2025-11-25): each
    /// elicitation in its data put to the client's handler, as a URL
    /// elicitation; all accepted, the call is sent again. Without a
    /// handler, or with one declined, the error names each URL, so that a
    /// person can still open it.
    pub(crate) async fn open_urls(&mut self, data: &ErrorData) -> Result<(), ToolError> {
        let asked: Vec<ElicitRequestParams> = data
            .data
            .as_ref()
            .and_then(|d| d.get("elicitations"))
            .and_then(|e| e.as_array())
            .map(|all| {
                all.iter()
                    .take(MAX_INPUT_REQUESTS + 1)
                    .filter_map(|one| serde_json::from_value(one.clone()).ok())
                    .collect()
            })
            .unwrap_or_default();
        let urls: Vec<String> = asked
            .iter()
            .filter_map(|params| match params {
                ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                    Some(format!("{message} ({url})"))
                }
                _ => None,
            })
            .collect();
        let refused = |why: String| {
            let opened = match urls.is_empty() {
                true => String::new(),
                false => format!("; open: {}", urls.join("; ")),
            };
            ToolError::new(
                ErrorKind::Denied,
                format!("{}: {why}{opened}", data.message),
            )
        };
        if urls.is_empty() || urls.len() != asked.len() {
            return Err(refused(
                "the server named no URL to open (its error's data has no URL elicitation)".into(),
            ));
        }
        if asked.len() > MAX_INPUT_REQUESTS {
            return Err(refused(format!(
                "the server asked for more than {MAX_INPUT_REQUESTS} URLs at once"
            )));
        }
        self.count_round()
            .map_err(|err| refused(err.message().to_owned()))?;
        let client = self.guard.client.clone();
        let Some(answers) = client.answers.clone().filter(|_| client.opens_urls) else {
            return Err(refused(
                "this client has no handler that opens URLs (McpClient::builder().handler(..), declaring URL elicitation); open it, then call again".into(),
            ));
        };
        let peer = client.running.peer().clone();
        for (at, params) in asked.into_iter().enumerate() {
            let context = rmcp::service::RequestContext::new(
                rmcp::model::NumberOrString::Number(at as i64),
                peer.clone(),
            );
            let answer = answers.elicit(params, context).await;
            match answer {
                Ok(result) if result.action == ElicitationAction::Accept => {}
                Ok(result) => {
                    return Err(refused(format!(
                        "the user did not open it ({:?})",
                        result.action
                    )))
                }
                Err(err) => return Err(refused(format!("the handler failed: {}", err.message))),
            }
        }
        let params = self.spec.params()?;
        self.resend(params).await
    }
}
