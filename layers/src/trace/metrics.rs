//! The GenAI metrics of a traced call (feature `opentelemetry`): its
//! duration, and a model call's tokens, recorded when the call ends on
//! OpenTelemetry instruments.
//!
//! The instruments, their units and their bucket boundaries are the GenAI
//! semantic conventions' (`open-telemetry/semantic-conventions-genai`,
//! `model/gen-ai/metrics.yaml`, `token-metrics.yaml` and the boundaries
//! `docs/gen-ai/gen-ai-metrics.md` advises); the boundaries are given as
//! the instruments' advice, which the SDK uses unless a view says
//! otherwise. Without the feature the same names exist and record nothing.

#[cfg(feature = "opentelemetry")]
pub(super) use self::enabled::{CallMetrics, Metrics};

#[cfg(not(feature = "opentelemetry"))]
pub(super) use self::disabled::{CallMetrics, Metrics};

/// `gen_ai.client.operation.duration` and `gen_ai.execute_tool.duration`,
/// in seconds.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// `gen_ai.client.token.usage`, in tokens.
pub const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

#[cfg(feature = "opentelemetry")]
mod enabled {
    use std::fmt;
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use opentelemetry::metrics::{Counter, Histogram, Meter};
    use opentelemetry::KeyValue;
    use toolstack::model::Usage;

    use super::{DURATION_BUCKETS, TOKEN_BUCKETS};
    use crate::{CallKind, Request};

    /// The instruments a trace layer records on: the global meter
    /// provider's (taken at the first call it records, so a provider
    /// installed before the first call counts), a meter of one's own, or
    /// none.
    #[derive(Clone, Default)]
    pub(in crate::trace) struct Metrics {
        meter: Option<Meter>,
        off: bool,
        instruments: Arc<OnceLock<Arc<Instruments>>>,
        provider: Option<&'static str>,
    }

    impl fmt::Debug for Metrics {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("Metrics")
                .field("own_meter", &self.meter.is_some())
                .field("off", &self.off)
                .field("provider", &self.provider)
                .finish()
        }
    }

    impl Metrics {
        pub(in crate::trace) fn with_meter(meter: Meter) -> Self {
            Metrics {
                meter: Some(meter),
                ..Metrics::default()
            }
        }

        pub(in crate::trace) fn off(self) -> Self {
            Metrics { off: true, ..self }
        }

        pub(in crate::trace) fn provider(self, provider: &'static str) -> Self {
            Metrics {
                provider: Some(provider),
                ..self
            }
        }

        pub(in crate::trace) fn provider_name(&self) -> Option<&'static str> {
            self.provider
        }

        /// Whether calls are watched for the metrics alone: with a meter of
        /// one's own, yes; with the global one, they are recorded when
        /// something else (a span) watches the call.
        pub(in crate::trace) fn is_enabled(&self) -> bool {
            !self.off && self.meter.is_some()
        }

        /// What one call records at its end.
        pub(in crate::trace) fn call<R: Request>(&self, request: &R) -> Option<CallMetrics> {
            if self.off {
                return None;
            }
            let instruments = self.instruments.get_or_init(|| {
                Arc::new(match &self.meter {
                    Some(meter) => Instruments::new(meter),
                    None => Instruments::new(&opentelemetry::global::meter_with_scope(
                        opentelemetry::InstrumentationScope::builder("toolstack")
                            .with_version(env!("CARGO_PKG_VERSION"))
                            .build(),
                    )),
                })
            });
            let mut attributes = Vec::with_capacity(5);
            match R::KIND {
                CallKind::Tool => {
                    attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
                    attributes.push(KeyValue::new("gen_ai.tool.name", request.name().to_owned()));
                    attributes.push(KeyValue::new("gen_ai.tool.type", "function"));
                }
                CallKind::Model => {
                    attributes.push(KeyValue::new("gen_ai.operation.name", "chat"));
                    if let Some(provider) = self.provider {
                        attributes.push(KeyValue::new("gen_ai.provider.name", provider));
                    }
                    if !request.name().is_empty() {
                        attributes.push(KeyValue::new(
                            "gen_ai.request.model",
                            request.name().to_owned(),
                        ));
                    }
                }
            }
            Some(CallMetrics {
                instruments: Arc::clone(instruments),
                kind: R::KIND,
                attributes,
                response_model: None,
                usage: None,
            })
        }
    }

    /// One call's attributes and what its answer said, until it ends.
    pub(in crate::trace) struct CallMetrics {
        instruments: Arc<Instruments>,
        kind: CallKind,
        attributes: Vec<KeyValue>,
        response_model: Option<String>,
        usage: Option<Usage>,
    }

    impl CallMetrics {
        pub(in crate::trace) fn item<T: crate::Output>(&mut self, item: &T) {
            if let (None, Some(model)) = (&self.response_model, item.response_model()) {
                self.response_model = Some(model.to_owned());
            }
            if let Some(usage) = item.usage() {
                *self.usage.get_or_insert_with(Usage::default) += *usage;
            }
        }

        /// Records the call: its `duration`, `error_type` when it failed.
        pub(in crate::trace) fn end(mut self, duration: Duration, error_type: Option<&str>) {
            if let Some(error_type) = error_type {
                self.attributes
                    .push(KeyValue::new("error.type", error_type.to_owned()));
            }
            if let Some(model) = self.response_model.take() {
                self.attributes
                    .push(KeyValue::new("gen_ai.response.model", model));
            }
            let seconds = duration.as_secs_f64();
            let i = &self.instruments;
            match self.kind {
                CallKind::Tool => i.tool_duration.record(seconds, &self.attributes),
                CallKind::Model => {
                    i.operation_duration.record(seconds, &self.attributes);
                    self.tokens();
                }
            }
        }

        /// The tokens of a model call: the histogram by `gen_ai.token.type`
        /// when the model reported usage, and the counters always (`0`
        /// with no usage, as the conventions ask of a failed call).
        fn tokens(&mut self) {
            let i = &self.instruments;
            if let Some(usage) = &self.usage {
                for (kind, tokens) in [
                    ("input", usage.prompt_tokens),
                    ("output", usage.completion_tokens),
                ] {
                    self.attributes
                        .push(KeyValue::new("gen_ai.token.type", kind));
                    i.token_usage.record(tokens, &self.attributes);
                    self.attributes.pop();
                }
            }
            let usage = self.usage.unwrap_or_default();
            // A model's usage does not say how its tokens split by
            // modality: the conventions' `unknown`.
            self.attributes
                .push(KeyValue::new("gen_ai.token.modality", "unknown"));
            i.input_tokens.add(usage.prompt_tokens, &self.attributes);
            i.output_tokens
                .add(usage.completion_tokens, &self.attributes);
            i.cache_read_tokens
                .add(usage.cached_tokens, &self.attributes);
            i.cache_creation_tokens
                .add(usage.cache_creation_tokens, &self.attributes);
            i.reasoning_tokens
                .add(usage.reasoning_tokens, &self.attributes);
        }
    }

    impl fmt::Debug for CallMetrics {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("CallMetrics")
                .field("kind", &self.kind)
                .field("attributes", &self.attributes)
                .finish_non_exhaustive()
        }
    }

    /// The conventions' instruments, made once per meter.
    struct Instruments {
        operation_duration: Histogram<f64>,
        tool_duration: Histogram<f64>,
        token_usage: Histogram<u64>,
        input_tokens: Counter<u64>,
        output_tokens: Counter<u64>,
        cache_read_tokens: Counter<u64>,
        cache_creation_tokens: Counter<u64>,
        reasoning_tokens: Counter<u64>,
    }

    impl Instruments {
        fn new(meter: &Meter) -> Self {
            let counter = |name: &'static str, description: &'static str| {
                meter
                    .u64_counter(name)
                    .with_unit("{token}")
                    .with_description(description)
                    .build()
            };
            Instruments {
                operation_duration: meter
                    .f64_histogram("gen_ai.client.operation.duration")
                    .with_unit("s")
                    .with_description("GenAI operation duration.")
                    .with_boundaries(DURATION_BUCKETS.to_vec())
                    .build(),
                tool_duration: meter
                    .f64_histogram("gen_ai.execute_tool.duration")
                    .with_unit("s")
                    .with_description("The duration of a single tool execution.")
                    .with_boundaries(DURATION_BUCKETS.to_vec())
                    .build(),
                token_usage: meter
                    .u64_histogram("gen_ai.client.token.usage")
                    .with_unit("{token}")
                    .with_description("Number of input and output tokens used.")
                    .with_boundaries(TOKEN_BUCKETS.to_vec())
                    .build(),
                input_tokens: counter(
                    "gen_ai.client.inference.usage.input_tokens",
                    "The number of input (prompt) tokens used, including cached tokens.",
                ),
                output_tokens: counter(
                    "gen_ai.client.inference.usage.output_tokens",
                    "The number of output (completion) tokens used, including reasoning tokens.",
                ),
                cache_read_tokens: counter(
                    "gen_ai.client.inference.usage.cache_read.input_tokens",
                    "The number of input tokens served from a provider-managed cache.",
                ),
                cache_creation_tokens: counter(
                    "gen_ai.client.inference.usage.cache_creation.input_tokens",
                    "The number of input tokens written to a provider-managed cache.",
                ),
                reasoning_tokens: counter(
                    "gen_ai.client.inference.usage.reasoning.output_tokens",
                    "The number of output tokens used for reasoning.",
                ),
            }
        }
    }
}

#[cfg(not(feature = "opentelemetry"))]
mod disabled {
    use std::time::Duration;

    use crate::Request;

    /// Without the feature `opentelemetry`: nothing to record on.
    #[derive(Debug, Clone, Default)]
    pub(in crate::trace) struct Metrics {
        _none: (),
    }

    impl Metrics {
        pub(in crate::trace) fn off(self) -> Self {
            self
        }

        pub(in crate::trace) fn provider(self, _: &'static str) -> Self {
            self
        }

        pub(in crate::trace) fn is_enabled(&self) -> bool {
            false
        }

        pub(in crate::trace) fn call<R: Request>(&self, _: &R) -> Option<CallMetrics> {
            None
        }
    }

    /// Never made without the feature.
    #[derive(Debug)]
    pub(in crate::trace) enum CallMetrics {}

    impl CallMetrics {
        pub(in crate::trace) fn item<T: crate::Output>(&mut self, _: &T) {
            match *self {}
        }

        pub(in crate::trace) fn end(self, _: Duration, _: Option<&str>) {
            match self {}
        }
    }
}
