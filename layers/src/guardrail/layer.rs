use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::check::{Guardrail, OnCheckError, Settings};
use super::service::Guarded;

/// Checks a call's input before it is made and its output as it streams.
/// See the [module docs](super).
#[derive(Clone, Debug)]
pub struct GuardrailLayer {
    pub(super) settings: Arc<Settings>,
}

/// How long a check may take by default.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// How much already-passed output a streamed check sees by default, in
/// bytes.
pub const DEFAULT_LOOKBACK: usize = 256;

impl Default for GuardrailLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl GuardrailLayer {
    /// No guardrails yet, checks bounded by [`DEFAULT_CHECK_TIMEOUT`],
    /// failing checks refusing ([`OnCheckError::Refuse`]), a lookback of
    /// [`DEFAULT_LOOKBACK`] bytes.
    pub fn new() -> Self {
        GuardrailLayer {
            settings: Arc::new(Settings {
                input: Vec::new(),
                output: Vec::new(),
                timeout: DEFAULT_CHECK_TIMEOUT,
                on_error: OnCheckError::default(),
                lookback: DEFAULT_LOOKBACK,
            }),
        }
    }

    /// Checks the input with `guardrail` — a tool call's arguments, or each
    /// user and tool message a model is sent — before the call is made;
    /// input guardrails run in the order added.
    pub fn input(mut self, guardrail: Guardrail) -> Self {
        Arc::make_mut(&mut self.settings).input.push(guardrail);
        self
    }

    /// Checks each output item with `guardrail` before it passes — a
    /// tool's items (text and JSON), a model's text deltas; output
    /// guardrails run in the order added. An item waits for its checks:
    /// none gets through unchecked.
    pub fn output(mut self, guardrail: Guardrail) -> Self {
        Arc::make_mut(&mut self.settings).output.push(guardrail);
        self
    }

    /// How long one check may take before it counts as failed
    /// ([`DEFAULT_CHECK_TIMEOUT`] unless set).
    pub fn check_timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.settings).timeout = timeout;
        self
    }

    /// What a failed check (a panic, a timeout, an error) does:
    /// [`OnCheckError::Refuse`] unless set.
    pub fn on_check_error(mut self, on_error: OnCheckError) -> Self {
        Arc::make_mut(&mut self.settings).on_error = on_error;
        self
    }

    /// How many bytes of the output already passed a streamed check sees
    /// before the new item's text ([`DEFAULT_LOOKBACK`] unless set): what
    /// lets a pattern split across two items be found.
    pub fn lookback(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.settings).lookback = bytes;
        self
    }
}

impl<S> Guarded<S> {
    /// Checks the calls of `inner` as `layer` says.
    pub fn new(inner: S, layer: GuardrailLayer) -> Self {
        Guarded {
            inner,
            settings: layer.settings,
        }
    }
}

impl<S> Layer<S> for GuardrailLayer {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guarded::new(inner, self.clone())
    }
}
