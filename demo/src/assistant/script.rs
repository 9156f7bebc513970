//! The scripted model: the assistant's turns, and the same script paced
//! like a real model for the web page.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use toolstack::model::{ChatRequest, Message, ModelDelta, ScriptedModel, Turn};
use toolstack::ToolError;

/// The scripted model's turns: find the orders, look, query twice, try
/// a write, answer.
pub fn turns() -> Vec<Turn> {
    vec![
        Turn::new()
            .text("Let me find where the orders live.")
            .tool_call("search_schema", r#"{"query":"order"}"#),
        Turn::new().text("A quick look at the data first.").tool_call("show_table", r#"{"table":"orders","limit":3}"#),
        Turn::new().text("Now every order with its customer's country.").tool_call(
            "execute_sql",
            r#"{"sql":"SELECT o.id, c.country, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY o.id"}"#,
        ),
        Turn::new().text("And the revenue per country.").tool_call(
            "execute_sql",
            r#"{"sql":"SELECT c.country, COUNT(*) AS orders, ROUND(SUM(o.amount), 2) AS revenue FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.country ORDER BY revenue DESC"}"#,
        ),
        Turn::new().text("Let me clear out the test orders under a cent first.").tool_call(
            "execute_sql",
            r#"{"sql":"DELETE FROM orders WHERE amount < 0.01"}"#,
        ),
        Turn::new().text("I was not allowed to delete anything, so the data stands as it is. Brazil leads on revenue; the per-country totals are in the last result."),
    ]
}

/// The scripted model: [`turns`].
pub fn script() -> ScriptedModel {
    ScriptedModel::new(turns())
}

/// The script again for every question, for the web page: the turn is
/// chosen by how many answers the model has given since the user's last
/// message, each delta `pace` after the last, as a real model's would.
#[derive(Clone)]
pub struct PacedScript {
    pace: Duration,
}

impl PacedScript {
    /// The script, a delta every `pace`.
    pub fn new(pace: Duration) -> Self {
        PacedScript { pace }
    }
}

impl tower::Service<ChatRequest> for PacedScript {
    type Response = futures_util::stream::BoxStream<'static, Result<ModelDelta, ToolError>>;
    type Error = ToolError;
    type Future = futures_util::future::Ready<Result<Self::Response, ToolError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ToolError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let since_user = request
            .messages
            .iter()
            .rev()
            .take_while(|m| !matches!(m, Message::User { .. }))
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let mut turn = turns().into_iter().nth(since_user);
        // The last turn reads what became of the write it asked about.
        let denied = request.messages.iter().rev().find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.contains("denied")),
            _ => None,
        });
        if since_user == 5 && denied == Some(false) {
            turn = Some(Turn::new().text(
                "The test orders under a cent are cleared out. Brazil leads on revenue; the per-country totals are in the last result.",
            ));
        }
        // Call ids unique in the process (a fresh script numbers from 0).
        static CALLS: AtomicU64 = AtomicU64::new(1);
        let n = CALLS.fetch_add(1, Ordering::Relaxed);
        let answer = ScriptedModel::new(turn).call(request).into_inner();
        let pace = self.pace;
        futures_util::future::ready(answer.map(|deltas| {
            deltas
                .then(move |delta| async move {
                    tokio::time::sleep(pace).await;
                    delta
                })
                .map(move |delta| match delta {
                    Ok(ModelDelta::ToolCall(mut call)) => {
                        if let Some(id) = &mut call.id {
                            *id = format!("{id}_{n}");
                        }
                        Ok(ModelDelta::ToolCall(call))
                    }
                    other => other,
                })
                .boxed()
        }))
    }
}
