//! Compaction: the history made smaller before a call that would not fit, or after a refusal for length.

use tracing::Instrument;

use crate::model::Message;
use crate::model::ModelService;
use crate::ToolError;

use crate::agent::compaction::{check_compaction, estimate_tokens, OnCompactionError};
use crate::agent::event::AgentEvent;
use crate::agent::journal::run_error;
use crate::agent::step_state::fail;

use super::Run;

impl<M> Run<M>
where
    M: ModelService,
{
    /// Compacts the history, with the agent's strategy, when the next
    /// request would pass the context budget (or `forced`: the endpoint
    /// refused it for its length); whether it did. A strategy that fails,
    /// or whose history breaks what must stay, leaves it as it is.
    pub(super) async fn compact(&mut self, forced: bool) -> bool {
        let Some(compaction) = self.agent.compaction.clone() else {
            return false;
        };
        let messages = self.journal.messages();
        // The provider's count where it reported one, plus what was added
        // since; never less than our own estimate of the whole.
        let tokens_before = self.estimate(&messages);
        let estimate = match self.reported {
            Some((prompt, sent)) if sent <= messages.len() => {
                prompt.saturating_add(estimate_tokens(&messages[sent..]))
            }
            _ => 0,
        }
        .max(tokens_before);
        if !forced && estimate <= compaction.budget {
            return false;
        }
        let span = tracing::info_span!(
            "compact",
            toolstack.compaction.forced = forced,
            toolstack.compaction.budget = compaction.budget,
            toolstack.compaction.tokens_before = tokens_before,
            toolstack.compaction.tokens_after = tracing::field::Empty,
            toolstack.compaction.messages_before = messages.len(),
            toolstack.compaction.messages_after = tracing::field::Empty,
        );
        // Owned, for a durable run's step to hold.
        let (strategy, history) = (compaction.strategy.clone(), messages.to_vec());
        let compact = async move { strategy.compact(&history).await }.instrument(span.clone());
        let outcome = self.steps.compaction(compact).await;
        let compacted = match outcome.and_then(|compacted| match compacted {
            Some(compacted) => check_compaction(&messages, &compacted).map(|()| Some(compacted)),
            None => Ok(None),
        }) {
            Ok(Some(compacted)) => compacted,
            Ok(None) => return false,
            Err(err) => {
                let stop = self.agent.on_compaction_error == OnCompactionError::Stop;
                match stop {
                    true => {
                        tracing::warn!(parent: &span, error = %err, "the history was not compacted; the run stops")
                    }
                    false => {
                        tracing::warn!(parent: &span, error = %err, "the history was not compacted; the run goes on with it as it is")
                    }
                }
                if stop {
                    let error = ToolError::new(
                        crate::ErrorKind::Unavailable,
                        format!("the history could not be compacted: {err}"),
                    )
                    .with_source(err);
                    self.compaction_failed = Some(error);
                }
                return false;
            }
        };
        let tokens_after = estimate_tokens(&compacted);
        span.record("toolstack.compaction.tokens_after", tokens_after);
        span.record("toolstack.compaction.messages_after", compacted.len());
        let (messages_before, messages_after) = (messages.len(), compacted.len());
        drop(messages);
        if let Err(err) = self.journal.compacted(compacted).await {
            fail(&self.failed, run_error(err));
        }
        // Estimated afresh until the next call reports.
        self.reported = None;
        self.estimated = (0, 0);
        let event = AgentEvent::Compacted {
            messages_before,
            messages_after,
            tokens_before,
            tokens_after,
        };
        let _ = self.tx.send(event).await;
        true
    }

    /// The estimated tokens of `messages` (the run's history), adding to
    /// what was estimated before only what came since.
    pub(super) fn estimate(&mut self, messages: &[Message]) -> u64 {
        let (mut tokens, counted) = self.estimated;
        let last = messages.len().saturating_sub(1);
        if counted > last {
            // Shorter than counted: not the history estimated before.
            tokens = estimate_tokens(&messages[..last]);
        } else {
            tokens += estimate_tokens(&messages[counted..last]);
        }
        self.estimated = (tokens, last);
        tokens + estimate_tokens(&messages[last..])
    }
}
