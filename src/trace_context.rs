//! The trace context a call carries across a process boundary: the W3C
//! [`TraceContext`] (`traceparent`, `tracestate`) and, for a call that
//! came over MCP, its [`McpAttributes`].
//!
//! A transport puts them in the request's extensions; the trace layer of
//! `toolstack-layers` records them on the call's `execute_tool` span (and,
//! with its `opentelemetry` feature, makes the remote span its parent), and
//! the MCP client sends the trace context on in the request's `_meta`.

use std::borrow::Cow;

/// The longest `tracestate` kept (the W3C limit is 512 characters).
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// A W3C trace context (`traceparent`, and `tracestate` when there is
/// one): the remote span a call continues.
///
/// ```
/// use toolstack::TraceContext;
///
/// let tc = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).unwrap();
/// assert_eq!(tc.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// assert!(tc.is_sampled());
/// assert!(TraceContext::parse("not a traceparent", None).is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl TraceContext {
    /// A trace context from its headers, or `None` when `traceparent` is
    /// not a valid version-00 `traceparent` (a malformed one is dropped,
    /// never passed on). A `tracestate` longer than
    /// [`MAX_TRACESTATE_BYTES`] or with characters outside printable
    /// ASCII is dropped, keeping the `traceparent`.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let traceparent = traceparent.trim();
        let parts: Vec<&str> = traceparent.split('-').collect();
        let [version, trace_id, parent_id, flags] = parts[..] else {
            return None;
        };
        let valid = version == "00"
            && trace_id.len() == 32
            && parent_id.len() == 16
            && flags.len() == 2
            && [trace_id, parent_id, flags].iter().all(|p| is_lower_hex(p))
            && trace_id.bytes().any(|b| b != b'0')
            && parent_id.bytes().any(|b| b != b'0');
        if !valid {
            return None;
        }
        let tracestate = tracestate
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE_BYTES)
            .filter(|s| s.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .map(str::to_owned);
        Some(TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate,
        })
    }

    /// The `traceparent` header's value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header's value, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace's id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The remote parent span's id: 16 lowercase hex digits.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// Whether the caller sampled the trace.
    pub fn is_sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }

    /// The OpenTelemetry context of the current `tracing` span (with
    /// `tracing-opentelemetry` installed), when it has a valid span.
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn current() -> Option<Self> {
        Self::from_span(&tracing::Span::current())
    }

    /// The OpenTelemetry context of `span` (with `tracing-opentelemetry`
    /// installed), when it has a valid span: what a call made on its
    /// behalf in another process continues.
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn from_span(span: &tracing::Span) -> Option<Self> {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let context = span.context();
        let span = context.span();
        let span = span.span_context();
        if !span.is_valid() {
            return None;
        }
        let traceparent = format!(
            "00-{}-{}-{:02x}",
            span.trace_id(),
            span.span_id(),
            span.trace_flags().to_u8()
        );
        let tracestate = span.trace_state().header();
        Self::parse(&traceparent, Some(&tracestate))
    }

    /// This context as an OpenTelemetry context with a remote parent span,
    /// for `tracing_opentelemetry::OpenTelemetrySpanExt::set_parent`.
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn to_otel_context(&self) -> opentelemetry::Context {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        let trace_id = TraceId::from_hex(self.trace_id()).unwrap_or(TraceId::INVALID);
        let span_id = SpanId::from_hex(self.parent_id()).unwrap_or(SpanId::INVALID);
        let flags = if self.is_sampled() {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let state = self
            .tracestate()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        let span = SpanContext::new(trace_id, span_id, flags, true, state);
        opentelemetry::Context::new().with_remote_span_context(span)
    }
}

/// The MCP attributes of the OpenTelemetry semantic conventions for a
/// call that came over MCP: the MCP server puts them in the request's
/// extensions, and the trace layer records them on the call's
/// `execute_tool` span (`mcp.method.name`, `mcp.protocol.version`; and
/// `error.type = "tool_error"` when the call ends in an error, which MCP
/// sends as a result with `isError`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpAttributes {
    /// The JSON-RPC method: `tools/call`.
    pub method: Cow<'static, str>,
    /// The protocol revision of the request (`2026-07-28`, …), when known.
    pub protocol_version: Option<Cow<'static, str>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_traceparents_are_dropped() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(TraceContext::parse(bad, None).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_bad_tracestate_is_dropped_and_the_traceparent_kept() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let long = "k=".to_owned() + &"v".repeat(600);
        let tc = TraceContext::parse(tp, Some(&long)).unwrap();
        assert_eq!(tc.tracestate(), None);
        assert!(!tc.is_sampled());
        let tc = TraceContext::parse(tp, Some("a=1\n")).unwrap();
        assert_eq!(tc.tracestate(), Some("a=1"));
        let tc = TraceContext::parse(tp, Some("a=\u{7}")).unwrap();
        assert_eq!(tc.tracestate(), None);
        assert_eq!(tc.parent_id(), "00f067aa0ba902b7");
    }
}
