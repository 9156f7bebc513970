//! [`ElidedOutputs`]: an output store as the place an agent's compaction
//! keeps the tool results it elides, read back with
//! [`read_tool_result`](super::read_tool_result).

use std::sync::Arc;

use futures_util::future::BoxFuture;
use toolstack::agent::compaction::{CompactionError, KeepElided};
use toolstack::{ErrorKind, ToolError};

use super::read_tool::READ_TOOL_NAME;
use super::store::STORE_TIMEOUT;
use super::store::{OutputStore, WholeOutput};

/// Keeps the results an agent's compaction elides
/// ([`ElideToolResults::keep_in`](toolstack::agent::compaction::ElideToolResults::keep_in))
/// in an [`OutputStore`] — the one the budget layer keeps cut outputs in,
/// or its own — so that each notice carries a handle and the exact
/// [`read_tool_result`](super::read_tool_result) call that reads the
/// result back. Give the model that tool, over the same store.
///
/// A result longer than the store's
/// [`max_output_bytes`](OutputStore::max_output_bytes) keeps its
/// beginning (the tool says how much was kept); a store that fails or
/// takes more than [`STORE_TIMEOUT`] fails the compaction, which then
/// does not happen: nothing is elided that the model could not read back.
///
/// ```
/// use toolstack::agent::compaction::ElideToolResults;
/// use toolstack_layers::budget::{read_tool_result, ElidedOutputs, MemoryOutputStore};
///
/// let outputs = MemoryOutputStore::new(1 << 20, std::time::Duration::from_secs(3600));
/// let strategy = ElideToolResults::new(4).keep_in(ElidedOutputs::new(outputs.clone()));
/// let reader = read_tool_result(outputs); // in the agent's toolbox
/// # let _ = (strategy, reader);
/// ```
#[derive(Clone)]
pub struct ElidedOutputs {
    store: Arc<dyn OutputStore>,
}

impl ElidedOutputs {
    /// Keeps elided results in `store`.
    pub fn new(store: impl OutputStore) -> Self {
        ElidedOutputs {
            store: Arc::new(store),
        }
    }
}

impl std::fmt::Debug for ElidedOutputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElidedOutputs").finish_non_exhaustive()
    }
}

impl KeepElided for ElidedOutputs {
    fn keep<'a>(
        &'a self,
        tool: &'a str,
        call_id: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<String, CompactionError>> {
        Box::pin(async move {
            let handle = toolstack::id::new_token();
            let cap = self.store.max_output_bytes();
            let kept = &text[..text.floor_char_boundary(cap)];
            let put = self
                .store
                .put(&handle, WholeOutput::new(kept.to_owned(), text.len()));
            let failed = |why: String| {
                CompactionError::Failed(ToolError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the result of {tool} call {call_id} could not be kept to elide it: {why}"
                    ),
                ))
            };
            match tokio::time::timeout(STORE_TIMEOUT, put).await {
                Ok(Ok(())) => Ok(format!(
                    "{READ_TOOL_NAME} {{\"handle\":\"{handle}\",\"offset\":0}}"
                )),
                Ok(Err(err)) => Err(failed(err.to_string())),
                Err(_) => Err(failed(format!(
                    "the store did not answer within {STORE_TIMEOUT:?}"
                ))),
            }
        })
    }
}
