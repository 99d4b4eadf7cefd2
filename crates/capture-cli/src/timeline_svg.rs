//! `capture timeline-svg`: a trace-event JSON timeline (as `--timeline` writes it) drawn
//! as a static SVG picture, for documents that cannot embed Perfetto.
//!
//! Each track (`"ph": "M"` `thread_name`, grouped under its `process_name`, in
//! `thread_sort_index` order) is a lane; its complete events (`"ph": "X"`) are boxes on
//! one time axis, a nested span one row below its parent, labelled with its name (and
//! graph) where the box is wide enough; its instants (`"ph": "i"`) are ticks, labelled
//! where the labels do not run into each other. Every box and tick has a tooltip with
//! its name, times and arguments; a legend under the lanes names the colours.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

/// The picture's width in pixels.
const WIDTH: f64 = 1400.0;
/// Where the plot starts, after the track names.
const PLOT_LEFT: f64 = 290.0;
/// The right margin.
const PLOT_RIGHT: f64 = 24.0;
/// One row of boxes.
const ROW: f64 = 18.0;
/// The row of instant labels under a track's boxes.
const LABEL_ROW: f64 = 14.0;
/// Space between tracks.
const GAP: f64 = 8.0;
/// Width of one character of the 11 px labels, rounded up, for fitting.
const CHAR: f64 = 7.0;

/// Why a timeline could not be drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unreadable(pub(crate) String);

#[derive(Debug, Default)]
struct Lane {
    name: String,
    sort: i64,
    spans: Vec<Span>,
    instants: Vec<Tick>,
}

#[derive(Debug)]
struct Span {
    name: String,
    label: String,
    ts: f64,
    dur: f64,
    tip: String,
    depth: usize,
}

#[derive(Debug)]
struct Tick {
    name: String,
    ts: f64,
    tip: String,
}

/// The SVG picture of the trace-event JSON `json`.
///
/// # Errors
///
/// [`Unreadable`] when `json` is not a trace-event object (no `traceEvents` array) or an
/// event lacks a field its phase needs.
pub(crate) fn render(json: &Value) -> Result<String, Unreadable> {
    let events = json
        .get("traceEvents")
        .and_then(Value::as_array)
        .ok_or_else(|| Unreadable("no \"traceEvents\" array".into()))?;
    let mut processes: BTreeMap<u64, (String, i64)> = BTreeMap::new();
    let mut lanes: BTreeMap<(u64, u64), Lane> = BTreeMap::new();
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    for (i, e) in events.iter().enumerate() {
        let field = |name: &str| {
            e.get(name)
                .ok_or_else(|| Unreadable(format!("event {i} has no \"{name}\"")))
        };
        let number = |name: &str| {
            field(name)?
                .as_f64()
                .ok_or_else(|| Unreadable(format!("event {i}: \"{name}\" is not a number")))
        };
        let text = |name: &str| {
            field(name)?
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| Unreadable(format!("event {i}: \"{name}\" is not a string")))
        };
        let ph = text("ph")?;
        let pid = number("pid")? as u64;
        let tid = number("tid").unwrap_or(0.0) as u64;
        let arg = |key: &str| e.get("args").and_then(|a| a.get(key));
        match ph.as_str() {
            "M" => {
                let name = text("name")?;
                let value = arg("name").and_then(Value::as_str).map(str::to_owned);
                let sort = arg("sort_index").and_then(Value::as_i64);
                match (name.as_str(), value, sort) {
                    ("process_name", Some(v), _) => processes.entry(pid).or_default().0 = v,
                    ("process_sort_index", _, Some(s)) => processes.entry(pid).or_default().1 = s,
                    ("thread_name", Some(v), _) => lanes.entry((pid, tid)).or_default().name = v,
                    ("thread_sort_index", _, Some(s)) => {
                        lanes.entry((pid, tid)).or_default().sort = s;
                    }
                    _ => {}
                }
            }
            "X" => {
                let (name, ts, dur) = (text("name")?, number("ts")?, number("dur")?);
                first = first.min(ts);
                last = last.max(ts + dur);
                let label = match arg("graph").and_then(Value::as_str) {
                    Some(graph) => format!("{name} {graph}"),
                    None => name.clone(),
                };
                let tip = tip(&name, ts, Some(dur), e.get("args"));
                lanes.entry((pid, tid)).or_default().spans.push(Span {
                    name,
                    label,
                    ts,
                    dur,
                    tip,
                    depth: 0,
                });
            }
            "i" | "I" => {
                let (name, ts) = (text("name")?, number("ts")?);
                first = first.min(ts);
                last = last.max(ts);
                let tip = tip(&name, ts, None, e.get("args"));
                lanes
                    .entry((pid, tid))
                    .or_default()
                    .instants
                    .push(Tick { name, ts, tip });
            }
            _ => {}
        }
    }
    if !first.is_finite() {
        first = 0.0;
        last = 1.0;
    }
    let span = (last - first).max(1e-3);
    let plot = WIDTH - PLOT_LEFT - PLOT_RIGHT;
    let x = |ts: f64| PLOT_LEFT + (ts - first) / span * plot;

    for lane in lanes.values_mut() {
        depths(&mut lane.spans);
    }
    let mut order: Vec<(u64, u64)> = lanes.keys().copied().collect();
    order.sort_by_key(|&(pid, tid)| {
        let process = processes.get(&pid).map_or(pid as i64, |p| p.1);
        (process, pid, lanes[&(pid, tid)].sort, tid)
    });

    let mut body = String::new();
    let mut y = 56.0;
    let mut current_pid = None;
    for key in &order {
        let lane = &lanes[key];
        if current_pid != Some(key.0) {
            current_pid = Some(key.0);
            let name = processes
                .get(&key.0)
                .map_or_else(|| format!("process {}", key.0), |p| p.0.clone());
            y += 6.0;
            let _ = writeln!(
                body,
                r#"<text x="8" y="{:.1}" class="process">{}</text>"#,
                y + 12.0,
                escape(&name)
            );
            y += 20.0;
        }
        let rows = lane.spans.iter().map(|s| s.depth + 1).max().unwrap_or(1);
        let labels = if lane.instants.is_empty() {
            0.0
        } else {
            LABEL_ROW
        };
        let height = rows as f64 * ROW + labels;
        let _ = writeln!(
            body,
            r#"<rect x="0" y="{:.1}" width="{WIDTH}" height="{:.1}" class="lane"/>"#,
            y - GAP / 2.0,
            height + GAP
        );
        let _ = writeln!(
            body,
            r#"<text x="16" y="{:.1}" class="track">{}</text>"#,
            y + ROW / 2.0 + 4.0,
            escape(&lane.name)
        );
        for s in &lane.spans {
            let (x0, x1) = (x(s.ts), x(s.ts + s.dur));
            let w = (x1 - x0).max(1.0);
            let top = y + s.depth as f64 * ROW;
            let _ = write!(
                body,
                r#"<g><title>{}</title><rect x="{x0:.2}" y="{:.1}" width="{w:.2}" height="{:.1}" class="span" fill="{}"/>"#,
                escape(&s.tip),
                top + 1.0,
                ROW - 2.0,
                colour(&s.name)
            );
            let label = if fits(&s.label, w) {
                Some(s.label.as_str())
            } else if fits(&s.name, w) {
                Some(s.name.as_str())
            } else {
                None
            };
            if let Some(label) = label {
                let _ = write!(
                    body,
                    r#"<text x="{:.2}" y="{:.1}" class="label">{}</text>"#,
                    x0 + 3.0,
                    top + ROW / 2.0 + 4.0,
                    escape(label)
                );
            }
            body.push_str("</g>\n");
        }
        let mut free_from = f64::NEG_INFINITY;
        let mut ticks: Vec<&Tick> = lane.instants.iter().collect();
        ticks.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        let bottom = y + rows as f64 * ROW;
        for t in ticks {
            let tx = x(t.ts);
            let _ = write!(
                body,
                r#"<g><title>{}</title><line x1="{tx:.2}" y1="{y:.1}" x2="{tx:.2}" y2="{:.1}" class="tick" stroke="{}"/><path d="M{:.2},{:.1} l-4,-6 h8 z" fill="{}"/>"#,
                escape(&t.tip),
                bottom + 2.0,
                tick_colour(&t.name),
                tx,
                y + 6.0,
                tick_colour(&t.name)
            );
            let width = t.name.len() as f64 * CHAR;
            if tx >= free_from && tx + width <= WIDTH - 4.0 {
                let _ = write!(
                    body,
                    r#"<text x="{:.2}" y="{:.1}" class="instant">{}</text>"#,
                    tx + 2.0,
                    bottom + LABEL_ROW - 2.0,
                    escape(&t.name)
                );
                free_from = tx + width + 8.0;
            }
            body.push_str("</g>\n");
        }
        y += height + GAP;
    }
    let lanes_end = y;
    y = legend(&mut body, &lanes, y + 10.0);
    let height = y + 12.0;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="DejaVu Sans, Verdana, sans-serif">"#
    );
    out.push_str(
        "<style>\
         .process{font-size:13px;font-weight:bold;fill:#222}\
         .track{font-size:11px;fill:#333}\
         .label,.key-label{font-size:11px;fill:#111;pointer-events:none}\
         .instant{font-size:10px;fill:#444}\
         .axis{font-size:10px;fill:#555}\
         .lane{fill:#f6f6f6;stroke:#fff}\
         .span{stroke:#555;stroke-width:0.5}\
         .tick,.key-tick{stroke-width:1.5}\
         .key{stroke:#555;stroke-width:0.5}\
         .grid{stroke:#ddd;stroke-width:1}\
         </style>\n",
    );
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{height:.0}" fill="#fff"/>"##
    );
    axis(&mut out, span, plot, lanes_end);
    out.push_str(&body);
    out.push_str("</svg>\n");
    Ok(out)
}

/// The legend under the lanes, from `y`: a swatch per span name and a tick per instant
/// kind the picture shows, in the order they first appear. Returns where it ends.
fn legend(out: &mut String, lanes: &BTreeMap<(u64, u64), Lane>, y: f64) -> f64 {
    let mut spans: Vec<&str> = Vec::new();
    let mut kinds: Vec<&str> = Vec::new();
    for lane in lanes.values() {
        for s in &lane.spans {
            if !spans.contains(&s.name.as_str()) {
                spans.push(&s.name);
            }
        }
        for t in &lane.instants {
            let kind = kind(&t.name);
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    let mut y = y;
    for (title, names, ticks) in [("spans", &spans, false), ("instants", &kinds, true)] {
        if names.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            r#"<text x="8" y="{:.1}" class="track">{title}</text>"#,
            y + 12.0
        );
        let mut x = PLOT_LEFT;
        for name in names.iter() {
            let width = 22.0 + name.chars().count() as f64 * CHAR;
            if x + width > WIDTH - PLOT_RIGHT {
                x = PLOT_LEFT;
                y += ROW;
            }
            if ticks {
                let c = tick_colour(name);
                let _ = write!(
                    out,
                    r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" class="key-tick" stroke="{c}"/><path d="M{:.1},{:.1} l-4,-6 h8 z" fill="{c}"/>"#,
                    x + 6.0,
                    y + 2.0,
                    x + 6.0,
                    y + 16.0,
                    x + 6.0,
                    y + 8.0
                );
            } else {
                let _ = write!(
                    out,
                    r#"<rect x="{x:.1}" y="{:.1}" width="14" height="12" class="key" fill="{}"/>"#,
                    y + 3.0,
                    colour(name)
                );
            }
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" class="key-label">{}</text>"#,
                x + 18.0,
                y + 13.0,
                escape(name)
            );
            x += width + 12.0;
        }
        y += ROW + 4.0;
    }
    y
}

/// An instant's kind: its name up to the call or subject (`not sealed stream#0` is a
/// `not sealed`).
fn kind(name: &str) -> &str {
    let mut words = name.splitn(3, ' ');
    match (words.next(), words.next()) {
        (Some("not"), Some("sealed")) => "not sealed",
        (Some(first), _) => first,
        (None, _) => name,
    }
}

/// The time axis along the top, with a grid line at every tick down to `bottom`.
fn axis(out: &mut String, span: f64, plot: f64, bottom: f64) {
    let step = nice_step(span / 10.0);
    let (unit, scale) = if step >= 1000.0 {
        ("ms", 1000.0)
    } else {
        ("µs", 1.0)
    };
    let _ = writeln!(
        out,
        r#"<text x="8" y="30" class="axis">time ({unit}, from the first event)</text>"#
    );
    let mut t = 0.0;
    while t <= span + step * 1e-9 {
        let x = PLOT_LEFT + t / span * plot;
        let _ = writeln!(
            out,
            r#"<line x1="{x:.2}" y1="38" x2="{x:.2}" y2="{:.0}" class="grid"/><text x="{x:.2}" y="32" class="axis" text-anchor="middle">{}</text>"#,
            bottom,
            trim(t / scale)
        );
        t += step;
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let raw = raw.max(1e-3);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * power)
}

/// A tick label: a number without trailing zeros.
fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Each span's nesting depth within its lane (0 for the outermost).
fn depths(spans: &mut [Span]) {
    spans.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(b.dur.total_cmp(&a.dur)));
    let mut open: Vec<f64> = Vec::new();
    for s in spans {
        while open.last().is_some_and(|&end| end <= s.ts) {
            open.pop();
        }
        s.depth = open.len();
        open.push(s.ts + s.dur);
    }
}

fn fits(label: &str, width: f64) -> bool {
    label.chars().count() as f64 * CHAR + 6.0 <= width
}

fn tip(name: &str, ts: f64, dur: Option<f64>, args: Option<&Value>) -> String {
    let mut tip = match dur {
        Some(d) => format!("{name}: {ts:.1} µs + {d:.1} µs"),
        None => format!("{name}: at {ts:.1} µs"),
    };
    if let Some(Value::Object(args)) = args {
        for (k, v) in args {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            let _ = write!(tip, "\n{k}: {v}");
        }
    }
    tip
}

/// A fixed fill per span name.
fn colour(name: &str) -> &'static str {
    match name {
        "capture" => "#d9d2e9",
        "prepare" => "#9fc5e8",
        "warmup" => "#ffe599",
        "window" => "#f9cb9c",
        "begin" => "#b6d7a8",
        "seal" => "#93c47d",
        "abort" => "#ea9999",
        "replay" => "#6fa8dc",
        "sync" => "#cccccc",
        "read" => "#a2c4c9",
        _ => "#e6e6e6",
    }
}

/// A fixed stroke per instant kind (see [`kind`]).
fn tick_colour(name: &str) -> &'static str {
    match kind(name) {
        "refuse" => "#e69138",
        "taint" => "#cc0000",
        "doom" => "#85200c",
        "not sealed" => "#e06666",
        "fault" | "skip" => "#a61c00",
        "pin" => "#3d85c6",
        "drop" => "#674ea7",
        _ => "#666666",
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
