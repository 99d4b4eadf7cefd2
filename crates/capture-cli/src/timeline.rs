//! `Recorder`: a `tracing_subscriber` layer that records what the core's spans and
//! notable events did in time, for [`trace_event`](crate::trace_event) to draw as a
//! timeline.
//!
//! The core's trace has logical ids only, no times or threads, so that scenarios
//! snapshot the same everywhere; the times come from here. A span (target `capture`:
//! `prepare`, `warmup`, `window`, `begin`, `seal`, `abort`, `replay`, `sync`, `read`,
//! `capture`) is recorded once per enter..exit, with the thread that entered it and its
//! fields (`stream`, `pooled`, `graph`, ...); an event with a `kind` field (a refusal, a
//! doom, a taint, a pin, a graph drop ...) as an instant, with the pooled stream of the
//! innermost span around it when it has one. Threads are numbered from 1 in the order
//! they first show up, with their names.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::Instant;

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The fields of a span or event, by name: strings, or whole numbers.
pub(crate) type Fields = BTreeMap<&'static str, Value>;

/// One enter..exit of a span, in nanoseconds since the recorder started.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SpanRecord {
    /// The span's name (`replay`, `seal` ...).
    pub(crate) name: &'static str,
    /// Its fields as they were at exit.
    pub(crate) fields: Fields,
    /// The thread that entered it, numbered from 1.
    pub(crate) thread: usize,
    /// When it was entered.
    pub(crate) start: u64,
    /// When it was left.
    pub(crate) end: u64,
}

/// A notable event: one with a `kind` field.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct InstantRecord {
    /// What happened: `refuse`, `doom`, `not sealed`, `taint`, `skip`, `fault`, `pin`,
    /// `drop`.
    pub(crate) kind: String,
    /// The event's other fields (the logical ids, the rendered trace line as `event`).
    pub(crate) fields: Fields,
    /// The thread it happened on, numbered from 1.
    pub(crate) thread: usize,
    /// When, in nanoseconds since the recorder started.
    pub(crate) at: u64,
    /// The pooled stream of the innermost span around it that names one.
    pub(crate) pooled: Option<u64>,
}

/// Everything a recorder saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Recording {
    /// Spans, in the order they were left.
    pub(crate) spans: Vec<SpanRecord>,
    /// Instants, in the order they happened.
    pub(crate) instants: Vec<InstantRecord>,
    /// The name of thread `n` at index `n - 1` (`"main"`, or `"unnamed"`).
    pub(crate) threads: Vec<String>,
}

/// What the recorder shares with whoever reads the recording.
#[derive(Debug, Default)]
struct Shared {
    recording: Recording,
    ids: Vec<ThreadId>,
}

impl Shared {
    /// The calling thread's number, given one the first time it shows up.
    fn thread(&mut self) -> usize {
        let current = std::thread::current();
        if let Some(i) = self.ids.iter().position(|id| *id == current.id()) {
            return i + 1;
        }
        self.ids.push(current.id());
        self.recording
            .threads
            .push(current.name().unwrap_or("unnamed").to_owned());
        self.ids.len()
    }
}

/// The layer. Clones share one recording.
#[derive(Clone, Debug)]
pub(crate) struct Recorder {
    shared: Arc<Mutex<Shared>>,
    origin: Instant,
}

/// A span's state while it lives, kept in the registry's extensions.
struct Open {
    fields: Fields,
    /// Entries not yet left: the thread and when.
    entered: Vec<(usize, u64)>,
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub(crate) fn new() -> Self {
        Self {
            shared: Arc::default(),
            origin: Instant::now(),
        }
    }

    /// What was recorded so far.
    pub(crate) fn recording(&self) -> Recording {
        self.lock().recording.clone()
    }

    /// Whether a recorder wants `metadata`: the core's spans and its events that carry a
    /// `kind`. The per-layer filter the program puts in front of it.
    pub(crate) fn wants(metadata: &Metadata<'_>) -> bool {
        metadata.target() == "capture"
            && (metadata.is_span() || metadata.fields().field("kind").is_some())
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl<S> tracing_subscriber::Layer<S> for Recorder
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::new();
        attrs.record(&mut Collect(&mut fields));
        span.extensions_mut().insert(Open {
            fields,
            entered: Vec::new(),
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(open) = span.extensions_mut().get_mut::<Open>() {
            values.record(&mut Collect(&mut open.fields));
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let thread = self.lock().thread();
        let at = self.now();
        if let Some(open) = span.extensions_mut().get_mut::<Open>() {
            open.entered.push((thread, at));
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let end = self.now();
        let Some(span) = ctx.span(id) else { return };
        let mut shared = self.lock();
        let thread = shared.thread();
        let mut extensions = span.extensions_mut();
        let Some(open) = extensions.get_mut::<Open>() else {
            return;
        };
        let Some(i) = open.entered.iter().rposition(|(t, _)| *t == thread) else {
            return;
        };
        let (_, start) = open.entered.remove(i);
        shared.recording.spans.push(SpanRecord {
            name: span.name(),
            fields: open.fields.clone(),
            thread,
            start,
            end,
        });
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let at = self.now();
        let mut fields = Fields::new();
        event.record(&mut Collect(&mut fields));
        let Some(Value::String(kind)) = fields.remove("kind") else {
            return;
        };
        let pooled = ctx.event_scope(event).and_then(|scope| {
            scope.into_iter().find_map(|span| {
                let extensions = span.extensions();
                let open = extensions.get::<Open>()?;
                open.fields.get("pooled").and_then(Value::as_u64)
            })
        });
        let mut shared = self.lock();
        let thread = shared.thread();
        shared.recording.instants.push(InstantRecord {
            kind,
            fields,
            thread,
            at,
            pooled,
        });
    }
}

/// Records fields into a [`Fields`] map: numbers as numbers, everything else as text.
struct Collect<'a>(&'a mut Fields);

impl Visit for Collect<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name(), Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name(), Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), Value::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name(), Value::from(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests;
