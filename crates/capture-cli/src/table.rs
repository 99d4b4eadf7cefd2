//! The demo's table: cost per kernel of each mode and their ratio, the capture time and
//! the graph's ledger, in fixed columns so that only the numbers vary between runs.

use std::time::Duration;

use crate::chain::ELEMENTS;
use crate::demo::{Report, Timing};

/// The header of the per-kernel cost rows.
pub(crate) const COST_HEADER: &str =
    "per kernel (µs)                     eager     replayed       ratio";

/// The header of the capture rows.
pub(crate) const CAPTURE_HEADER: &str = "capture";

/// The header of the ledger rows.
pub(crate) const LEDGER_HEADER: &str = "graph ledger (held while the graph lives)";

/// What the figures of the mock backend are, in its table.
pub(crate) const MOCK_NOTE: &str = "\
note: mock backend, so these figures are host overhead only. The mock runs kernels on
      the CPU at sync time: what is measured is the runtime's host cost per launch
      (eager) vs per replay, plus the same CPU kernel work in both modes' steps.";

/// Renders `report` of a run on `backend`; `host_overhead_only` adds the mock's note.
pub(crate) fn render(report: &Report, backend: &str, host_overhead_only: bool) -> String {
    let o = report.options;
    let launches = o.kernels as u64 * u64::from(o.replays);
    let mut t = String::new();
    let mut line = |s: String| {
        t.push_str(&s);
        t.push('\n');
    };
    line(format!(
        "capture demo: backend {backend}, {} kernels per step over {ELEMENTS}-element f32 \
         buffers, {} timed steps per mode",
        o.kernels, o.replays
    ));
    if host_overhead_only {
        line(MOCK_NOTE.to_owned());
    }
    line(String::new());
    line(COST_HEADER.to_owned());
    let cost = |label: &str, pick: fn(&Timing) -> Duration| {
        let eager = per_kernel_us(pick(&report.eager), launches);
        let replayed = per_kernel_us(pick(&report.replayed), launches);
        format!(
            "  {label:<26}{eager:>13.3}{replayed:>13.3}{:>12}",
            ratio(eager, replayed)
        )
    };
    line(cost("step (submit + sync)", |t| t.step));
    line(cost("submit only", |t| t.submit));
    line(String::new());
    line(CAPTURE_HEADER.to_owned());
    line(format!(
        "  {:<26}{:>13.3}  (warmup run, record and seal, once)",
        "time (ms)",
        report.capture.as_secs_f64() * 1e3
    ));
    line(String::new());
    line(LEDGER_HEADER.to_owned());
    let l = &report.ledger;
    for (label, value) in [
        ("graph id", l.graph.to_string()),
        ("device bytes", l.device_bytes.to_string()),
        ("  user's buffers", l.user_bytes.to_string()),
        ("  graph only", l.graph_only_bytes.to_string()),
        ("  info words", l.info_bytes.to_string()),
        ("host staging bytes", l.host_bytes.to_string()),
        ("info entries pinned", l.info_entries.to_string()),
        ("launches", l.launches.to_string()),
        ("distinct info in chain", report.distinct_info.to_string()),
    ] {
        line(format!("  {label:<26}{value:>13}"));
    }
    line(String::new());
    t
}

/// Microseconds per kernel of `total` spread over `launches` kernel runs.
fn per_kernel_us(total: Duration, launches: u64) -> f64 {
    total.as_secs_f64() * 1e6 / launches.max(1) as f64
}

/// `eager / replayed`, or `n/a` when nothing measurable was replayed.
fn ratio(eager: f64, replayed: f64) -> String {
    if replayed > 0.0 {
        format!("{:.1}x", eager / replayed)
    } else {
        "n/a".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use capture_graphs::{GraphId, GraphLedger};

    use super::*;
    use crate::demo::DemoOptions;

    fn report(eager_ms: u64, replayed_ms: u64) -> Report {
        Report {
            options: DemoOptions {
                kernels: 512,
                replays: 20,
            },
            distinct_info: 11,
            eager: Timing {
                step: Duration::from_millis(eager_ms),
                submit: Duration::from_millis(eager_ms / 2),
            },
            replayed: Timing {
                step: Duration::from_millis(replayed_ms),
                submit: Duration::from_millis(replayed_ms / 2),
            },
            capture: Duration::from_micros(1500),
            ledger: GraphLedger {
                graph: GraphId::new(0),
                label: None,
                device_bytes: 12_288,
                user_bytes: 12_112,
                graph_only_bytes: 0,
                info_bytes: 176,
                marginal_bytes: 176,
                host_bytes: 0,
                info_entries: 11,
                launches: 512,
                copies: 0,
            },
            eager_output: Vec::new(),
            replayed_output: Vec::new(),
            model_output: Vec::new(),
        }
    }

    #[test]
    fn the_layout_is_fixed_and_only_numbers_vary() {
        let shape = |s: String| -> String {
            s.chars()
                .map(|c| if c.is_ascii_digit() { '9' } else { c })
                .collect()
        };
        let a = render(&report(2048, 256), "mock", true);
        let b = render(&report(4096, 512), "mock", true);
        assert_eq!(shape(a.clone()), shape(b));
        for header in [COST_HEADER, CAPTURE_HEADER, LEDGER_HEADER, MOCK_NOTE] {
            assert!(
                a.contains(&format!("{header}\n")),
                "{header:?} missing:\n{a}"
            );
        }
        assert!(a.contains("8.0x"), "{a}");
        let width = |l: &str| l.chars().count();
        for row in ["  step (submit + sync)", "  submit only"] {
            let l = a.lines().find(|l| l.starts_with(row)).expect("a cost row");
            assert_eq!(
                width(l),
                width(COST_HEADER),
                "{l:?} is not under its header"
            );
        }
        let eager_column = width(COST_HEADER) - "     replayed       ratio".len();
        let bytes = a.lines().find(|l| l.starts_with("  device bytes"));
        assert_eq!(bytes.map(width), Some(eager_column), "{a}");
        assert!(bytes.is_some_and(|l| l.ends_with(" 12288")), "{a}");
        let user = a.lines().find(|l| l.starts_with("    user's buffers"));
        assert!(user.is_some_and(|l| l.ends_with(" 12112")), "{a}");
        let info = a.lines().find(|l| l.starts_with("    info words"));
        assert!(info.is_some_and(|l| l.ends_with(" 176")), "{a}");
    }

    #[test]
    fn other_backends_carry_no_mock_note_and_a_zero_replay_time_has_no_ratio() {
        let t = render(&report(10, 0), "cuda", false);
        assert!(!t.contains("host overhead only"), "{t}");
        assert!(t.contains("n/a"), "{t}");
    }
}
