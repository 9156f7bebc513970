use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::notice::{default_notice, Cut};
use super::store::OutputStore;
use super::stream::Limits;
use super::{Budget, BYTES_PER_TOKEN};

type Notice = Arc<dyn Fn(&Cut) -> String + Send + Sync>;

/// Caps a call's output: see the [module docs](super).
#[derive(Clone)]
pub struct BudgetLayer {
    pub(super) max_items: Option<usize>,
    pub(super) max_bytes: Option<usize>,
    tail: u8,
    pub(super) notice: Notice,
    pub(super) keep: Option<Arc<dyn OutputStore>>,
}

impl BudgetLayer {
    /// No limit yet: set [`max_items`](Self::max_items),
    /// [`max_bytes`](Self::max_bytes) or [`max_tokens`](Self::max_tokens).
    pub fn new() -> Self {
        BudgetLayer {
            max_items: None,
            max_bytes: None,
            tail: 20,
            notice: Arc::new(default_notice),
            keep: None,
        }
    }

    /// At most `items` output items reach the model (progress does not
    /// count); with the notice, one more.
    pub fn max_items(mut self, items: usize) -> Self {
        self.max_items = Some(items);
        self
    }

    /// At most `bytes` bytes of output reach the model, the notice aside.
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = Some(bytes);
        self
    }

    /// At most about `tokens` tokens reach the model: a byte budget of
    /// [`BYTES_PER_TOKEN`] bytes a token (a rough count for English text
    /// and JSON; use [`max_bytes`](Self::max_bytes) for an exact bound).
    pub fn max_tokens(self, tokens: usize) -> Self {
        self.max_bytes(tokens.saturating_mul(BYTES_PER_TOKEN))
    }

    /// How much of the budget the tail keeps, in percent (default 20; 0
    /// keeps only the head).
    pub fn tail_percent(mut self, percent: u8) -> Self {
        self.tail = percent.min(100);
        self
    }

    /// Words the notice: `notice(&cut)` is the text the model reads where
    /// the output was cut.
    pub fn notice(mut self, notice: impl Fn(&Cut) -> String + Send + Sync + 'static) -> Self {
        self.notice = Arc::new(notice);
        self
    }

    /// Keeps the whole output of a call that is cut in `store`, and tells
    /// the model, in the notice, the handle to read it by with
    /// [`read_tool_result`](super::read_tool_result) (give the model that
    /// tool too, over the same store). See [keeping the whole
    /// output](super#keeping-the-whole-output).
    pub fn keep(mut self, store: impl OutputStore) -> Self {
        self.keep = Some(Arc::new(store));
        self
    }

    fn tail_of(&self, budget: usize) -> usize {
        budget * usize::from(self.tail) / 100
    }

    pub(super) fn limits(&self) -> Limits {
        // The tail keeps its share; the head the rest.
        let split = |max: Option<usize>| match max {
            Some(max) => (max - self.tail_of(max), self.tail_of(max)),
            None => (usize::MAX, usize::MAX),
        };
        let (head_items, tail_items) = split(self.max_items);
        let (head_bytes, tail_bytes) = split(self.max_bytes);
        Limits {
            head_items,
            head_bytes,
            tail_items,
            tail_bytes,
        }
    }
}

impl Default for BudgetLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for BudgetLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetLayer")
            .field("max_items", &self.max_items)
            .field("max_bytes", &self.max_bytes)
            .field("tail_percent", &self.tail)
            .field("keeps", &self.keep.is_some())
            .finish()
    }
}

impl<S> Layer<S> for BudgetLayer {
    type Service = Budget<S>;

    fn layer(&self, inner: S) -> Budget<S> {
        Budget::new(inner, self.clone())
    }
}
