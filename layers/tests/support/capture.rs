//! A `tracing` subscriber layer for the trace tests: it records every span
//! (with its fields, as later recorded) and every event (with its parent
//! span).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

pub type Fields = BTreeMap<String, String>;

#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub name: &'static str,
    pub fields: Fields,
}

#[derive(Debug, Clone)]
pub struct EventRecord {
    pub level: tracing::Level,
    /// Index into the captured spans of the event's parent.
    pub parent: Option<usize>,
    pub fields: Fields,
}

impl EventRecord {
    pub fn message(&self) -> &str {
        self.fields.get("message").map_or("", String::as_str)
    }

    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// Records every span (with its fields, as later recorded) and every event
/// (with its parent span).
#[derive(Debug, Clone, Default)]
pub struct Capture {
    spans: Arc<Mutex<Vec<SpanRecord>>>,
    events: Arc<Mutex<Vec<EventRecord>>>,
}

struct SpanIndex(usize);

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Visitor(&mut fields));
        let mut spans = self.spans.lock().unwrap();
        spans.push(SpanRecord {
            name: attrs.metadata().name(),
            fields,
        });
        let span = ctx.span(id).expect("a new span");
        span.extensions_mut().insert(SpanIndex(spans.len() - 1));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a known span");
        let index = span.extensions().get::<SpanIndex>().expect("indexed").0;
        values.record(&mut Visitor(&mut self.spans.lock().unwrap()[index].fields));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut Visitor(&mut fields));
        let parent = ctx
            .event_span(event)
            .and_then(|span| span.extensions().get::<SpanIndex>().map(|i| i.0));
        self.events.lock().unwrap().push(EventRecord {
            level: *event.metadata().level(),
            parent,
            fields,
        });
    }
}

impl Capture {
    /// Installs the capture on this thread, through [`super::logs`] (whose
    /// docs say why no test installs a subscriber any other way).
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        super::logs::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    pub fn spans(&self) -> Vec<SpanRecord> {
        self.spans.lock().unwrap().clone()
    }

    pub fn events(&self) -> Vec<EventRecord> {
        self.events.lock().unwrap().clone()
    }

    /// The only `execute_tool` span.
    pub fn tool_span(&self) -> SpanRecord {
        let spans: Vec<_> = self
            .spans()
            .into_iter()
            .filter(|s| s.name == "execute_tool")
            .collect();
        assert_eq!(spans.len(), 1, "{spans:?}");
        spans[0].clone()
    }

    pub fn events_with(&self, message: &str) -> Vec<EventRecord> {
        self.events()
            .into_iter()
            .filter(|e| e.message() == message)
            .collect()
    }

    /// The events whose message is `message`, with their parent span's
    /// name.
    pub fn events_with_parent(&self, message: &str) -> Vec<(Option<&'static str>, Fields)> {
        let spans = self.spans();
        self.events_with(message)
            .into_iter()
            .map(|e| (e.parent.map(|i| spans[i].name), e.fields))
            .collect()
    }
}
