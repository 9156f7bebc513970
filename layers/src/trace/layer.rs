use tower_layer::Layer;

use super::metrics::Metrics;
use super::Trace;
use super::{DefaultMakeSpan, DefaultOnEarlyDrop, DefaultOnEnd, DefaultOnFailure, DefaultOnOpen};

/// Applies [`Trace`] to a tool or a model; the builder methods replace one
/// hook each.
#[derive(Debug, Clone)]
pub struct TraceLayer<
    M = DefaultMakeSpan,
    OO = DefaultOnOpen,
    OE = DefaultOnEnd,
    OF = DefaultOnFailure,
    OD = DefaultOnEarlyDrop,
> {
    pub(super) make_span: M,
    pub(super) on_open: OO,
    pub(super) on_end: OE,
    pub(super) on_failure: OF,
    pub(super) on_early_drop: OD,
    pub(super) record_arguments: Option<usize>,
    pub(super) record_output: Option<usize>,
    pub(super) metrics: Metrics,
}

impl TraceLayer {
    /// The default span and events; arguments and output not recorded.
    pub fn new() -> Self {
        TraceLayer {
            make_span: DefaultMakeSpan::new(),
            on_open: DefaultOnOpen::new(),
            on_end: DefaultOnEnd::new(),
            on_failure: DefaultOnFailure::new(),
            on_early_drop: DefaultOnEarlyDrop::new(),
            record_arguments: None,
            record_output: None,
            metrics: Metrics::default(),
        }
    }
}

impl Default for TraceLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<OO, OE, OF, OD> TraceLayer<DefaultMakeSpan, OO, OE, OF, OD> {
    /// Names the model's provider on chat spans (`gen_ai.provider.name`,
    /// which the conventions require): `openai`, `anthropic`, … See
    /// [`DefaultMakeSpan::provider`].
    ///
    /// ```
    /// use toolstack::model::ScriptedModel;
    /// use toolstack_layers::trace::TraceLayer;
    /// use tower_layer::Layer;
    ///
    /// let model = TraceLayer::new().provider("openai").layer(ScriptedModel::new([]));
    /// # let _ = model;
    /// ```
    pub fn provider(mut self, name: &'static str) -> Self {
        self.make_span = self.make_span.provider(name);
        self.metrics = self.metrics.provider(name);
        self
    }
}

impl<M, OO, OE, OF, OD> TraceLayer<M, OO, OE, OF, OD> {
    /// Makes each call's span with `make_span` (a
    /// [`MakeSpan`](super::MakeSpan) or a closure `FnMut(&R) -> Span` for
    /// requests of type `R`: `&ToolRequest`, `&ChatRequest`).
    pub fn make_span_with<T>(self, make_span: T) -> TraceLayer<T, OO, OE, OF, OD> {
        TraceLayer {
            make_span,
            on_open: self.on_open,
            on_end: self.on_end,
            on_failure: self.on_failure,
            on_early_drop: self.on_early_drop,
            record_arguments: self.record_arguments,
            record_output: self.record_output,
            metrics: self.metrics,
        }
    }

    /// Calls `on_open` when the stream opens; `()` turns it off.
    pub fn on_open<T>(self, on_open: T) -> TraceLayer<M, T, OE, OF, OD> {
        TraceLayer {
            make_span: self.make_span,
            on_open,
            on_end: self.on_end,
            on_failure: self.on_failure,
            on_early_drop: self.on_early_drop,
            record_arguments: self.record_arguments,
            record_output: self.record_output,
            metrics: self.metrics,
        }
    }

    /// Calls `on_end` when the call ends (completed or failed); `()` turns
    /// it off.
    pub fn on_end<T>(self, on_end: T) -> TraceLayer<M, OO, T, OF, OD> {
        TraceLayer {
            make_span: self.make_span,
            on_open: self.on_open,
            on_end,
            on_failure: self.on_failure,
            on_early_drop: self.on_early_drop,
            record_arguments: self.record_arguments,
            record_output: self.record_output,
            metrics: self.metrics,
        }
    }

    /// Calls `on_failure` when the call fails; `()` turns it off.
    pub fn on_failure<T>(self, on_failure: T) -> TraceLayer<M, OO, OE, T, OD> {
        TraceLayer {
            make_span: self.make_span,
            on_open: self.on_open,
            on_end: self.on_end,
            on_failure,
            on_early_drop: self.on_early_drop,
            record_arguments: self.record_arguments,
            record_output: self.record_output,
            metrics: self.metrics,
        }
    }

    /// Calls `on_early_drop` when the consumer drops the call before its
    /// end; `()` turns it off.
    pub fn on_early_drop<T>(self, on_early_drop: T) -> TraceLayer<M, OO, OE, OF, T> {
        TraceLayer {
            make_span: self.make_span,
            on_open: self.on_open,
            on_end: self.on_end,
            on_failure: self.on_failure,
            on_early_drop,
            record_arguments: self.record_arguments,
            record_output: self.record_output,
            metrics: self.metrics,
        }
    }

    /// Records the call's input on the span, cut to `max_len` bytes (at a
    /// character boundary, marked by `…`): a tool's arguments as
    /// `gen_ai.tool.call.arguments`, a model's conversation (JSON messages)
    /// as `gen_ai.input.messages` (see [`Request::write_input`](crate::Request::write_input)).
    ///
    /// Off by default: inputs may carry personal data.
    pub fn record_arguments(mut self, max_len: usize) -> Self {
        self.record_arguments = Some(max_len);
        self
    }

    /// Records the calls' metrics on `meter` (feature `opentelemetry`)
    /// rather than on the global meter provider's, and for every call, a
    /// span made or not. See the [module docs](super#metrics).
    ///
    /// ```
    /// use opentelemetry::metrics::MeterProvider as _;
    /// use opentelemetry_sdk::metrics::SdkMeterProvider;
    /// use toolstack_layers::trace::TraceLayer;
    ///
    /// let provider = SdkMeterProvider::builder().build();
    /// let layer = TraceLayer::new().meter(provider.meter("toolstack"));
    /// # let _ = layer;
    /// ```
    #[cfg(feature = "opentelemetry")]
    pub fn meter(mut self, meter: opentelemetry::metrics::Meter) -> Self {
        let provider = self.metrics.provider_name();
        self.metrics = super::metrics::Metrics::with_meter(meter);
        if let Some(provider) = provider {
            self.metrics = self.metrics.provider(provider);
        }
        self
    }

    /// Records no metrics (the spans are as they were).
    pub fn no_metrics(mut self) -> Self {
        self.metrics = self.metrics.off();
        self
    }

    /// Records the start of the output on the span when the call ends, cut
    /// to `max_len` bytes (marked by `…`): a tool's text items and JSON
    /// items serialized as `gen_ai.tool.call.result`, a model's text as
    /// `gen_ai.output.messages` (see
    /// [`Output::write_output`](crate::Output::write_output)).
    ///
    /// Off by default: outputs may carry personal data.
    pub fn record_output(mut self, max_len: usize) -> Self {
        self.record_output = Some(max_len);
        self
    }
}

impl<S, M, OO, OE, OF, OD> Layer<S> for TraceLayer<M, OO, OE, OF, OD>
where
    M: Clone,
    OO: Clone,
    OE: Clone,
    OF: Clone,
    OD: Clone,
{
    type Service = Trace<S, M, OO, OE, OF, OD>;

    fn layer(&self, inner: S) -> Self::Service {
        Trace::new(inner, self.clone())
    }
}
