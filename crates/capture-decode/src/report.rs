//! [`render`]: a run's figures, the graph's ledger split by owner, the generated ids and
//! the checks, as `capture decode` prints them.

use std::fmt::Write as _;

use super::run::DecodeReport;

fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// The report as text, one block per topic.
pub fn render(r: &DecodeReport) -> String {
    let c = r.options.config;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "capture decode: backend {}, dim {} x {} layers, {} heads, hidden {}, vocab {}, \
         context {}, seed {}",
        r.backend,
        c.dim,
        c.layers,
        c.heads,
        c.hidden(),
        c.vocab,
        c.context,
        r.options.seed
    );
    let _ = writeln!(
        out,
        "prompt {:?} (prefilled eagerly, {:.1} ms), then {} tokens per mode, {} kernels \
         per step",
        r.prompt,
        r.prefill_seconds * 1e3,
        r.options.tokens,
        r.kernels_per_step
    );
    let _ = writeln!(out, "GEMM path: {}", r.gemm);
    let _ = writeln!(
        out,
        "\nper token                 eager     replayed   one call (x{})",
        r.options.tokens
    );
    let (e, p, o) = (&r.eager, &r.replayed, &r.one_call);
    let _ = writeln!(
        out,
        "  µs per token     {:>12.1} {:>12.1} {:>12.1}",
        e.us_per_token(),
        p.us_per_token(),
        o.us_per_token()
    );
    let _ = writeln!(
        out,
        "  tokens/s         {:>12.1} {:>12.1} {:>12.1}",
        e.tokens_per_second(),
        p.tokens_per_second(),
        o.tokens_per_second()
    );
    let k = r.kernels_per_step as f64;
    let _ = writeln!(
        out,
        "  µs per kernel    {:>12.2} {:>12.2} {:>12.2}",
        e.us_per_token() / k,
        p.us_per_token() / k,
        o.us_per_token() / k
    );
    let _ = writeln!(
        out,
        "{:<29}{:>13}{:>13}",
        "  ratio (eager / mode)",
        format!("{:.2}x", e.seconds / p.seconds),
        format!("{:.2}x", e.seconds / o.seconds)
    );
    if r.host_only {
        let _ = writeln!(
            out,
            "  (the mock runs kernels on the host: host overhead only, not GPU figures)"
        );
    }
    let (u, c) = (&r.updated, &r.recaptured);
    let _ = writeln!(
        out,
        "\nper token, the host choosing the position (slots \"{}\" and \"{}\", rule 26)\n  \
         update + replay   {:>10.1} µs\n  re-capture + replay {:>8.1} µs\n  \
         ratio (re-capture / update) {:.2}x",
        super::POSITION_SLOT,
        super::ATTENTION_SLOT,
        u.us_per_token(),
        c.us_per_token(),
        c.seconds / u.seconds
    );
    let _ = writeln!(
        out,
        "\ncapture\n  time (ms)        {:>12.2}",
        r.capture_seconds * 1e3
    );
    let l = &r.ledger;
    let f = &r.footprint;
    let _ = writeln!(out, "\ngraph ledger (held while the graph lives)");
    let _ = writeln!(out, "  launches         {:>12}", l.launches);
    let _ = writeln!(out, "  info entries     {:>12}", l.info_entries);
    let _ = writeln!(out, "  host staging     {:>12}", kib(l.host_bytes));
    let _ = writeln!(out, "  device           {:>12}", kib(l.device_bytes));
    let _ = writeln!(
        out,
        "    user's, held and updated in place: {}",
        kib(l.user_bytes)
    );
    let _ = writeln!(out, "      weights      {:>12}", kib(f.weights));
    let _ = writeln!(out, "      KV cache     {:>12}", kib(f.cache));
    let _ = writeln!(out, "      state, logit and id histories {}", kib(f.io));
    if f.workspace > 0 {
        let _ = writeln!(out, "      GEMM workspace {:>10}", kib(f.workspace));
    }
    let _ = writeln!(
        out,
        "    graph only (intermediates, handles dropped after capture): {}",
        kib(l.graph_only_bytes)
    );
    let _ = writeln!(
        out,
        "    info words ({} info entries): {} B (the kernels take scalars by value, \
         recorded with each launch)",
        l.info_entries, l.info_bytes
    );
    let _ = writeln!(
        out,
        "  nothing is copied per replay: the host writes 16 B of state before a \
         generation, the device advances it"
    );
    let shown = r.replayed.ids.len().min(32);
    let _ = writeln!(
        out,
        "\ngenerated ids ({}{}): {:?}",
        r.replayed.ids.len(),
        if shown < r.replayed.ids.len() {
            ", the first 32"
        } else {
            ""
        },
        &r.replayed.ids[..shown]
    );
    let _ = writeln!(out, "\nchecks");
    for check in r.checks() {
        let _ = writeln!(
            out,
            "  {} {}: {}",
            if check.passed { "ok  " } else { "FAIL" },
            check.name,
            check.detail
        );
    }
    out
}
