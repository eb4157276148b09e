//! Traces: OpenTelemetry spans exported over OTLP/HTTP (protobuf) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, and nothing at
//! all otherwise (no span is even built on the hot path then).
//!
//! Spans are batched and sent by the SDK's own thread: a request only appends its finished span
//! to a bounded queue (the SDK drops spans when the queue is full rather than wait), so a slow
//! or dead collector never slows an execution.
//!
//! An incoming W3C `traceparent` is parsed by the SDK's propagator (version, lengths, hex,
//! non-zero ids; anything else is ignored as if absent) and used for one thing only: to make
//! the caller's span the parent of sandlot's. `tracestate` and baggage are not read.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, Tracer as _, TracerProvider as _};
pub use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::sync::OnceLock;
use std::time::SystemTime;

/// The environment variables that turn exporting on (the OpenTelemetry SDK's own names).
pub const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The instrumentation scope of sandlot's spans (and the target of its `tracing` spans that
/// are exported; others are not).
pub const TARGET: &str = "sandlot::trace";

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
}

/// Whether an endpoint is configured in the environment.
pub fn configured() -> bool {
    ENDPOINT_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Builds the process's tracer provider from the environment (once; later calls return the
/// first's). `None` when no endpoint is configured.
pub(crate) fn provider() -> Result<Option<&'static SdkTracerProvider>, TraceError> {
    if let Some(p) = PROVIDER.get() {
        return Ok(Some(p));
    }
    if !configured() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| TraceError::Exporter(e.to_string()))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("sandlot")
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    Ok(Some(PROVIDER.get_or_init(|| provider)))
}

/// Whether spans are exported.
pub fn enabled() -> bool {
    PROVIDER.get().is_some()
}

/// sandlot's tracer (`None` when not exporting).
pub fn tracer() -> Option<SdkTracer> {
    PROVIDER.get().map(|p| p.tracer(TARGET))
}

/// Sends what is queued and stops the exporter (blocks: call it off the async threads).
pub fn shutdown() {
    if let Some(p) = PROVIDER.get() {
        if let Err(e) = p.force_flush() {
            tracing::warn!(error = %e, "traces not flushed");
        }
        let _ = p.shutdown();
    }
}

/// The one header the propagator is given.
struct TraceParent<'a>(&'a str);

impl Extractor for TraceParent<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        // Only `traceparent`: `tracestate` is the caller's business, never ours to echo.
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

/// The caller's span from the value of its `traceparent` header: a context with a valid
/// remote span, or `None` when the value is malformed.
pub fn remote_parent(traceparent: &str) -> Option<Context> {
    let (trace, span, flags) = well_formed(traceparent)?;
    // Flags other than `sampled` (Trace Context level 2's `random`, which the OpenTelemetry
    // Python SDK sets) are to be ignored, but the Rust SDK refuses the whole header for them:
    // keep only the sampled bit (and read a later version as version 00, as the spec says).
    let sampled = u8::from_str_radix(flags, 16).ok()? & 1;
    let normalized = format!("00-{trace}-{span}-{sampled:02x}");
    let cx = TraceContextPropagator::new().extract(&TraceParent(&normalized));
    cx.span().span_context().is_valid().then_some(cx)
}

/// W3C Trace Context's `traceparent` grammar, strictly (the SDK's parser accepts ids shorter
/// than their fixed width, which would make two spellings of one id): its trace id, parent id
/// and flags.
fn well_formed(v: &str) -> Option<(&str, &str, &str)> {
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let mut parts = v.split('-');
    let (Some(version), Some(trace), Some(span), Some(flags)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    // Version 00 has exactly four fields; a later version may append fields of its own.
    let rest_ok = match version {
        "00" => parts.next().is_none(),
        _ => true,
    };
    let ok = hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && hex(span, 16)
        && hex(flags, 2)
        && rest_ok;
    ok.then_some((trace, span, flags))
}

/// The trace id of `cx`'s span as 32 hex digits (`None` for an invalid one).
pub fn trace_id_of(cx: &Context) -> Option<String> {
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// Makes `cx`'s span the parent of `span` (before `span` is first entered).
pub fn set_parent(span: &tracing::Span, cx: &Context) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    // Fails only when the span is disabled or already started: then it has no parent to set.
    let _ = span.set_parent(cx.clone());
}

/// The trace id of a `tracing` span as exported (`None` when it is not exported).
pub fn span_trace_id(span: &tracing::Span) -> Option<String> {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    trace_id_of(&span.context())
}

/// What an ended piece of work was, for a span made after the fact (an execution that no
/// traced request is waiting for: a job's, or an MCP session's own sandbox's).
pub struct PastSpan<'a> {
    pub name: &'static str,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    pub parent: Option<&'a Context>,
}

/// Records `span` (nothing when not exporting).
pub fn record_past(span: PastSpan<'_>) {
    let Some(tracer) = tracer() else {
        return;
    };
    let builder = tracer
        .span_builder(span.name)
        .with_start_time(span.start)
        .with_attributes(span.attributes);
    let mut s = match span.parent {
        Some(cx) => tracer.build_with_context(builder, cx),
        None => tracer.build_with_context(builder, &Context::new()),
    };
    opentelemetry::trace::Span::end_with_timestamp(&mut s, span.end);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent_of(v: &str) -> Option<String> {
        remote_parent(v).and_then(|cx| trace_id_of(&cx))
    }

    #[test]
    fn a_valid_traceparent_is_the_parent() {
        for flags in ["00", "01", "03", "ff"] {
            let v = format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}");
            assert_eq!(
                parent_of(&v).as_deref(),
                Some("4bf92f3577b34da6a3ce929d0e0e4736"),
                "{v}"
            );
        }
    }

    #[test]
    fn hostile_traceparents_are_ignored() {
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-zzf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nx: y",
        ] {
            assert_eq!(parent_of(bad), None, "{bad:?}");
        }
        let long = format!("00-{}-00f067aa0ba902b7-01", "a".repeat(100_000));
        assert_eq!(parent_of(&long), None);
    }
}

#[cfg(test)]
mod parent_tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;

    #[test]
    fn a_request_span_takes_the_remote_parent() {
        let provider = SdkTracerProvider::builder().build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(TARGET))
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target(TARGET, tracing::Level::TRACE),
            )
            .boxed();
        let subscriber = tracing_subscriber::registry().with(vec![layer]);
        tracing::subscriber::with_default(subscriber, || {
            let cx =
                remote_parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
            let span = tracing::info_span!(target: "sandlot::trace", "request");
            set_parent(&span, &cx);
            assert_eq!(
                span_trace_id(&span).as_deref(),
                Some("4bf92f3577b34da6a3ce929d0e0e4736")
            );
        });
    }
}
