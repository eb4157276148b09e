//! The log subscriber: text lines (the default), or one JSON object per line with
//! `SANDLOT_LOG_FORMAT=json`, and the OpenTelemetry layer when traces are exported.
//!
//! A JSON line is `{"timestamp", "level", "target", "message", "fields": {...}, "span":
//! {"name", ...its fields}, "spans": [names, root first], "trace_id"}`: `trace_id` is the W3C
//! trace id of the request the line was logged in (the `trace_id` field of an enclosing span,
//! which the HTTP layer sets), so a log line can be found from a trace and the other way round.

use crate::trace;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// The variable that selects the format (`json`, or anything else for text).
pub const FORMAT_VAR: &str = "SANDLOT_LOG_FORMAT";

static JSON: AtomicBool = AtomicBool::new(false);

/// Whether logs are JSON lines (then requests get a span so their lines carry the trace id).
pub fn json_logs() -> bool {
    JSON.load(Ordering::Relaxed)
}

type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// Installs the process's subscriber: the filter from `filter_var` (or `default_filter`), text
/// or JSON lines on stderr (stdout carries commands' output), and the OpenTelemetry layer when
/// an OTLP endpoint is configured (see [`trace`]). A second call does nothing.
pub fn init_logging(filter_var: &str, default_filter: &str) {
    use std::io::IsTerminal;
    let filter =
        || EnvFilter::try_from_env(filter_var).unwrap_or_else(|_| EnvFilter::new(default_filter));
    let json = std::env::var(FORMAT_VAR).is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let mut layers: Vec<BoxedLayer> = Vec::new();
    if json {
        JSON.store(true, Ordering::Relaxed);
        layers.push(
            tracing_subscriber::fmt::layer()
                .fmt_fields(JsonFields::new())
                .event_format(JsonLines)
                .with_writer(std::io::stderr)
                .with_filter(filter())
                .boxed(),
        );
    } else {
        layers.push(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .with_filter(filter())
                .boxed(),
        );
    }
    let mut otel_error = None;
    match trace::provider() {
        Ok(Some(provider)) => {
            use opentelemetry::trace::TracerProvider as _;
            // Only sandlot's own request and operation spans are exported, whatever the log
            // filter says (a quiet log must not lose traces, a verbose one must not flood them).
            let targets = tracing_subscriber::filter::Targets::new()
                .with_target(trace::TARGET, tracing::Level::TRACE);
            layers.push(
                tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer(trace::TARGET))
                    // Attributes no reader of sandlot's spans needs, each work per span.
                    .with_location(false)
                    .with_threads(false)
                    .with_target(false)
                    .with_tracked_inactivity(false)
                    .with_filter(targets)
                    .boxed(),
            );
        }
        Ok(None) => {}
        Err(e) => otel_error = Some(e),
    }
    if tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .is_err()
    {
        return;
    }
    if let Some(e) = otel_error {
        tracing::error!(error = %e, "traces are not exported");
    }
}

/// One JSON object per event.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        use serde_json::{Map, Value};
        let meta = event.metadata();
        let mut line = Map::new();
        let mut ts = String::new();
        SystemTime.format_time(&mut Writer::new(&mut ts))?;
        line.insert("timestamp".into(), Value::String(ts));
        line.insert("level".into(), Value::String(meta.level().to_string()));
        line.insert("target".into(), Value::String(meta.target().to_owned()));
        let mut fields = Map::new();
        event.record(&mut JsonVisitor(&mut fields));
        if let Some(message) = fields.remove("message") {
            line.insert("message".into(), message);
        }
        if !fields.is_empty() {
            line.insert("fields".into(), Value::Object(fields));
        }
        if let Some(scope) = ctx.event_scope() {
            let mut names = Vec::new();
            let mut leaf = Map::new();
            for span in scope.from_root() {
                names.push(Value::String(span.name().to_owned()));
                let ext = span.extensions();
                let own: Map<String, Value> = ext
                    .get::<FormattedFields<N>>()
                    .and_then(|f| serde_json::from_str(f.as_str()).ok())
                    .unwrap_or_default();
                if let Some(id) = own.get("trace_id") {
                    line.insert("trace_id".into(), id.clone());
                }
                leaf = own;
                leaf.insert("name".into(), Value::String(span.name().to_owned()));
            }
            if !names.is_empty() {
                line.insert("span".into(), Value::Object(leaf));
                line.insert("spans".into(), Value::Array(names));
            }
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// Collects an event's fields as JSON values.
struct JsonVisitor<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl Visit for JsonVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().into(), value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_lines_carry_the_trace_id_of_their_request() {
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .fmt_fields(JsonFields::new())
                .event_format(JsonLines)
                .with_writer(move || out.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            let span =
                tracing::info_span!("request", trace_id = "4bf92f3577b34da6a3ce929d0e0e4736");
            let _g = span.enter();
            tracing::info!(status = 500u64, path = "/v1/x", "request \"quoted\"\nnext");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(v["message"], "request \"quoted\"\nnext");
        assert_eq!(v["fields"]["status"], 500);
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["spans"][0], "request");
    }
}
