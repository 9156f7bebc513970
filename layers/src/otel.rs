//! Spans and metrics to an OpenTelemetry collector (feature `otel`):
//! `tracing` and the [trace](crate::trace) layer's metrics wired to the
//! OpenTelemetry SDK, exported over OTLP/HTTP (protobuf), configured by the
//! standard `OTEL_*` variables.
//!
//! [`init_from_env`] is the one call an application makes at start: when a
//! collector is named (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) it installs a global `tracing`
//! subscriber that sends every span at `INFO` and above — the agent's
//! `invoke_agent`, the [trace](crate::trace) layer's `chat` and
//! `execute_tool` — to it, makes a meter provider that exports the GenAI
//! metrics OpenTelemetry's global one, and returns a guard that sends what
//! is left and shuts both exporters down when dropped. When none is named it installs
//! nothing and returns `None`, so the same binary runs with and without a
//! collector.
//!
//! ```no_run
//! # fn main() -> Result<(), toolstack_layers::otel::OtelError> {
//! // OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=assistant
//! let _otel = toolstack_layers::otel::init_from_env()?;
//! // … run the agent; its spans go to the collector …
//! # Ok(())
//! # }
//! ```
//!
//! An application with a subscriber of its own (a `fmt` layer, a filter)
//! adds the OpenTelemetry layer to it instead, from
//! [`tracer_provider_from_env`] and [`layer`]:
//!
//! ```
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! # fn main() -> Result<(), toolstack_layers::otel::OtelError> {
//! let provider = toolstack_layers::otel::tracer_provider_from_env()?;
//! let subscriber = tracing_subscriber::registry()
//!     // `None` (no collector named) is a layer that does nothing.
//!     .with(provider.as_ref().map(toolstack_layers::otel::layer));
//! let _default = tracing::subscriber::set_default(subscriber);
//! // … and at the end, so that the last spans are sent:
//! if let Some(provider) = provider {
//!     provider.shutdown().ok();
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # The variables
//!
//! | variable | what it does |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | the collector's base URL (`http://127.0.0.1:4318`); spans go to `{base}/v1/traces` |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the full URL for spans, instead |
//! | `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` | the full URL for metrics, instead of `{base}/v1/metrics` |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource: `service.name` and more |
//! | `OTEL_EXPORTER_OTLP_HEADERS` (`_TRACES_HEADERS`, `_METRICS_HEADERS`) | `key=value,…` sent with each export (an API key) |
//! | `OTEL_EXPORTER_OTLP_TIMEOUT` (`_TRACES_TIMEOUT`, `_METRICS_TIMEOUT`) | the export timeout, in milliseconds |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL` (`_TRACES_PROTOCOL`, `_METRICS_PROTOCOL`) | `http/protobuf`, the only one built in; another is an error |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | sampling (`parentbased_traceidratio`, `0.1`) |
//! | `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE`, … | the batch processor |
//! | `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` | how often metrics are sent (ms; 60 000), cumulative or delta |
//! | `OTEL_TRACES_EXPORTER=none`, `OTEL_METRICS_EXPORTER=none` | that signal is not exported |
//! | `OTEL_SDK_DISABLED=true` | nothing is installed, as with no endpoint |
//!
//! The OpenTelemetry SDK and its OTLP exporter read them (this module only
//! decides whether to export at all); an `https` endpoint needs the feature
//! `otel-tls`.
//!
//! # Cost
//!
//! Spans are batched and exported on the SDK's own thread, with a blocking
//! HTTP client there (no async runtime is needed or used); a call pays for
//! building its span and queuing it. With no collector named nothing is
//! installed, and the layers' spans cost what they cost when nobody
//! listens.

use std::fmt;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";

/// The variables of one signal: its exporter, endpoint and protocol.
#[derive(Debug, Clone, Copy)]
struct Signal {
    exporter: &'static str,
    endpoint: &'static str,
    protocol: &'static str,
    path: &'static str,
}

const TRACES: Signal = Signal {
    exporter: "OTEL_TRACES_EXPORTER",
    endpoint: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    protocol: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    path: "/v1/traces",
};

const METRICS: Signal = Signal {
    exporter: "OTEL_METRICS_EXPORTER",
    endpoint: "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    protocol: "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    path: "/v1/metrics",
};

/// Installs a global `tracing` subscriber that exports spans (`INFO` and
/// above) to the OpenTelemetry collector the environment names, makes the
/// meter provider that exports metrics to it OpenTelemetry's global one,
/// and returns the guard that flushes and shuts both down; `None` when no
/// collector is named (see the [module docs](self) for the variables).
///
/// Either signal can be turned off on its own (`OTEL_TRACES_EXPORTER=none`,
/// `OTEL_METRICS_EXPORTER=none`). With metrics but no spans, the subscriber
/// still enables `INFO` spans (exporting none), for the
/// [trace](crate::trace) layer records a call's metrics when its span is
/// made. The tracer provider is also made OpenTelemetry's global one, for
/// libraries that trace through OpenTelemetry's own API.
///
/// Fails when the variables ask for what is not built in (a `grpc`
/// protocol, another exporter), when an exporter cannot be built, or when
/// a global subscriber is already installed.
pub fn init_from_env() -> Result<Option<OtelGuard>, OtelError> {
    let tracer = tracer_provider_from_env()?;
    let meter = match meter_provider_from_env() {
        Ok(meter) => meter,
        Err(err) => {
            if let Some(tracer) = tracer {
                let _ = tracer.shutdown();
            }
            return Err(err);
        }
    };
    if tracer.is_none() && meter.is_none() {
        return Ok(None);
    }
    let subscriber = tracing_subscriber::registry()
        .with(tracer.as_ref().map(layer))
        .with(LevelFilter::INFO);
    let guard = OtelGuard { tracer, meter };
    if let Err(err) = tracing::subscriber::set_global_default(subscriber) {
        // Nothing will feed them: their threads and clients go now (the
        // guard's drop).
        drop(guard);
        return Err(OtelError::new(
            OtelErrorKind::AlreadyInstalled,
            Inner::Global(err),
        ));
    }
    if let Some(tracer) = &guard.tracer {
        opentelemetry::global::set_tracer_provider(tracer.clone());
    }
    if let Some(meter) = &guard.meter {
        opentelemetry::global::set_meter_provider(meter.clone());
    }
    Ok(Some(guard))
}

/// The tracer provider that exports spans in batches over OTLP/HTTP to the
/// collector the environment names; `None` when none is named. The
/// provider's resource, sampler and batching read the standard variables
/// too (see the [module docs](self)).
///
/// Call [`SdkTracerProvider::shutdown`] at the end, or the last batch is
/// lost.
pub fn tracer_provider_from_env() -> Result<Option<SdkTracerProvider>, OtelError> {
    if !exports(TRACES, |name| std::env::var(name).ok())? {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|err| OtelError::new(OtelErrorKind::Exporter, Inner::Exporter(err)))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .build();
    Ok(Some(provider))
}

/// The meter provider that exports metrics over OTLP/HTTP to the collector
/// the environment names, every `OTEL_METRIC_EXPORT_INTERVAL` milliseconds
/// (60 s by default) and at shutdown; `None` when none is named or
/// `OTEL_METRICS_EXPORTER=none`. Cumulative temporality, the OTLP default
/// (`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta` for delta).
///
/// The conventions' histograms carry their bucket boundaries as advice
/// (see [`trace`](crate::trace#metrics)), which this provider follows; a
/// provider of one's own follows it too unless a view says otherwise.
///
/// Call [`SdkMeterProvider::shutdown`] at the end, or the last
/// measurements are lost.
pub fn meter_provider_from_env() -> Result<Option<SdkMeterProvider>, OtelError> {
    if !exports(METRICS, |name| std::env::var(name).ok())? {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .build()
        .map_err(|err| OtelError::new(OtelErrorKind::Exporter, Inner::Exporter(err)))?;
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .build();
    Ok(Some(provider))
}

/// The `tracing` layer that records spans through `provider`: the
/// `tracing-opentelemetry` layer with this crate's tracer (instrumentation
/// scope `toolstack`), for a subscriber of one's own.
pub fn layer<S>(provider: &SdkTracerProvider) -> OpenTelemetryLayer<S, SdkTracer>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let scope = InstrumentationScope::builder("toolstack")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    tracing_opentelemetry::layer().with_tracer(provider.tracer_with_scope(scope))
}

/// Whether the environment (read through `var`) asks for the `signal` to be
/// exported: a collector is named and nothing turns export off. Asking for
/// what is not built in is an error rather than a silent nothing.
fn exports(signal: Signal, var: impl Fn(&str) -> Option<String>) -> Result<bool, OtelError> {
    let set = |name: &str| var(name).filter(|value| !value.trim().is_empty());
    if set(SDK_DISABLED).is_some_and(|value| value.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    if let Some(exporters) = set(signal.exporter) {
        let mut names = exporters.split(',').map(str::trim);
        if names.clone().all(|name| name.eq_ignore_ascii_case("none")) {
            return Ok(false);
        }
        if !names.any(|name| name.eq_ignore_ascii_case("otlp")) {
            return Err(OtelError::config(format!(
                "{}={exporters}: only `otlp` (or `none`) is built in",
                signal.exporter
            )));
        }
    }
    if set(signal.endpoint).is_none() && set(ENDPOINT).is_none() {
        return Ok(false);
    }
    let protocol = set(signal.protocol)
        .map(|value| (signal.protocol, value))
        .or_else(|| set(PROTOCOL).map(|value| (PROTOCOL, value)));
    if let Some((name, value)) = protocol {
        if value.trim() != "http/protobuf" {
            return Err(OtelError::config(format!(
                "{name}={value}: only `http/protobuf` is built in (OTLP over HTTP, to port 4318, `{}`)",
                signal.path
            )));
        }
    }
    Ok(true)
}

/// Shuts the tracer and meter providers down when dropped — the spans
/// still queued and the metrics measured since the last export are
/// exported first — so the end of a run reaches the collector. Keep it
/// alive for as long as the application runs (`let _otel = …` in `main`).
#[derive(Debug)]
#[must_use = "dropping the guard shuts the exporters down at once"]
pub struct OtelGuard {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl OtelGuard {
    /// The tracer provider that exports the spans; `None` when spans are
    /// not exported (`OTEL_TRACES_EXPORTER=none`).
    pub fn tracer_provider(&self) -> Option<&SdkTracerProvider> {
        self.tracer.as_ref()
    }

    /// The meter provider that exports the metrics; `None` when metrics
    /// are not exported (`OTEL_METRICS_EXPORTER=none`).
    pub fn meter_provider(&self) -> Option<&SdkMeterProvider> {
        self.meter.as_ref()
    }

    /// Exports the spans queued and the metrics measured so far, without
    /// shutting down.
    pub fn flush(&self) -> Result<(), OtelError> {
        let spans = self.tracer.as_ref().map_or(Ok(()), |p| p.force_flush());
        let metrics = self.meter.as_ref().map_or(Ok(()), |p| p.force_flush());
        spans
            .and(metrics)
            .map_err(|err| OtelError::new(OtelErrorKind::Export, Inner::Sdk(err)))
    }

    /// Exports what is left and shuts down, saying whether that worked
    /// (dropping the guard does the same, silently).
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        let spans = self.tracer.take().map_or(Ok(()), |p| p.shutdown());
        let metrics = self.meter.take().map_or(Ok(()), |p| p.shutdown());
        spans
            .and(metrics)
            .map_err(|err| OtelError::new(OtelErrorKind::Export, Inner::Sdk(err)))
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        // A failed last export has no one left to tell.
        if let Some(tracer) = self.tracer.take() {
            let _ = tracer.shutdown();
        }
        if let Some(meter) = self.meter.take() {
            let _ = meter.shutdown();
        }
    }
}

/// What kind of thing went wrong setting up or flushing the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OtelErrorKind {
    /// The `OTEL_*` variables ask for what is not built in.
    Config,
    /// An OTLP exporter could not be built (a bad endpoint, headers).
    Exporter,
    /// A global `tracing` subscriber was already installed.
    AlreadyInstalled,
    /// Exporting or shutting down failed.
    Export,
}

/// Setting up, flushing or shutting down the OpenTelemetry export failed;
/// the message says why and what to change.
#[derive(Debug)]
pub struct OtelError {
    kind: OtelErrorKind,
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Config(String),
    Exporter(opentelemetry_otlp::ExporterBuildError),
    Global(tracing::subscriber::SetGlobalDefaultError),
    Sdk(OTelSdkError),
}

impl OtelError {
    fn new(kind: OtelErrorKind, inner: Inner) -> Self {
        OtelError { kind, inner }
    }

    fn config(message: String) -> Self {
        OtelError::new(OtelErrorKind::Config, Inner::Config(message))
    }

    /// What kind of thing went wrong.
    pub fn kind(&self) -> OtelErrorKind {
        self.kind
    }
}

impl fmt::Display for OtelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Config(message) => write!(f, "OpenTelemetry export: {message}"),
            Inner::Exporter(err) => write!(f, "the OTLP exporter could not be built: {err}"),
            Inner::Global(_) => f.write_str(
                "a global tracing subscriber is already installed: add `otel::layer` to it instead",
            ),
            Inner::Sdk(err) => write!(f, "exporting spans or metrics failed: {err}"),
        }
    }
}

impl std::error::Error for OtelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.inner {
            Inner::Config(_) => None,
            Inner::Exporter(err) => Some(err),
            Inner::Global(err) => Some(err),
            Inner::Sdk(err) => Some(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint() {
        assert!(!exports(TRACES, env(&[])).unwrap());
        assert!(!exports(TRACES, env(&[(ENDPOINT, " ")])).unwrap());
        assert!(!exports(TRACES, env(&[(PROTOCOL, "http/protobuf")])).unwrap());
    }

    #[test]
    fn either_endpoint_turns_export_on() {
        assert!(exports(TRACES, env(&[(ENDPOINT, "http://127.0.0.1:4318")])).unwrap());
        assert!(exports(TRACES, env(&[(TRACES.endpoint, "http://c:4318/v1/traces")])).unwrap());
        assert!(exports(
            TRACES,
            env(&[
                (ENDPOINT, "http://127.0.0.1:4318"),
                (TRACES.exporter, "otlp"),
                (PROTOCOL, "http/protobuf"),
            ])
        )
        .unwrap());
    }

    #[test]
    fn the_standard_off_switches_turn_export_off() {
        let on = (ENDPOINT, "http://127.0.0.1:4318");
        assert!(!exports(TRACES, env(&[on, (SDK_DISABLED, "TRUE")])).unwrap());
        assert!(!exports(TRACES, env(&[on, (TRACES.exporter, "none")])).unwrap());
        assert!(exports(TRACES, env(&[on, (SDK_DISABLED, "false")])).unwrap());
    }

    #[test]
    fn what_is_not_built_in_is_an_error_that_names_the_variable() {
        let on = (ENDPOINT, "http://127.0.0.1:4317");
        let grpc = exports(TRACES, env(&[on, (PROTOCOL, "grpc")])).unwrap_err();
        assert_eq!(grpc.kind(), OtelErrorKind::Config);
        assert!(grpc
            .to_string()
            .contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"));
        // The signal's own variable wins over the general one.
        let traces = [
            on,
            (PROTOCOL, "http/protobuf"),
            (TRACES.protocol, "http/json"),
        ];
        assert!(exports(TRACES, env(&traces))
            .unwrap_err()
            .to_string()
            .contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json"));
        let zipkin = exports(TRACES, env(&[on, (TRACES.exporter, "zipkin")])).unwrap_err();
        assert!(zipkin.to_string().contains("OTEL_TRACES_EXPORTER=zipkin"));
    }

    #[test]
    fn metrics_read_their_own_variables_and_the_general_ones() {
        let on = (ENDPOINT, "http://127.0.0.1:4318");
        assert!(exports(METRICS, env(&[on])).unwrap());
        assert!(exports(
            METRICS,
            env(&[(METRICS.endpoint, "http://c:4318/v1/metrics")])
        )
        .unwrap());
        // Spans off leave metrics on, and the other way round.
        assert!(exports(METRICS, env(&[on, (TRACES.exporter, "none")])).unwrap());
        assert!(!exports(METRICS, env(&[on, (METRICS.exporter, "none")])).unwrap());
        assert!(exports(TRACES, env(&[on, (METRICS.exporter, "none")])).unwrap());
        assert!(!exports(METRICS, env(&[on, (SDK_DISABLED, "true")])).unwrap());
        let json = exports(METRICS, env(&[on, (METRICS.protocol, "http/json")])).unwrap_err();
        assert!(json
            .to_string()
            .contains("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/json"));
        let prometheus =
            exports(METRICS, env(&[on, (METRICS.exporter, "prometheus")])).unwrap_err();
        assert!(prometheus
            .to_string()
            .contains("OTEL_METRICS_EXPORTER=prometheus"));
    }
}
