//! `capture bench`'s output: a table per backend (and, where it has a floor, the library
//! against it), or the same as JSON for machines.

use std::fmt::Write as _;

use crate::bench::{DecodeRow, Figures, Paired, RowReport, decode_options, paired};
use crate::decoder_update_row::{self, DecoderUpdateRow};
use crate::fork_row::{self, ForkRow};
use crate::until_row::{self, UntilRow};
use crate::update_row::{self, UpdateRow};

/// A backend's part of a run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BackendRun {
    /// Its `--backend` name.
    pub(crate) name: &'static str,
    /// The device and driver it ran on.
    pub(crate) device: String,
    /// Settings that shape its figures, printed with them.
    pub(crate) settings: Vec<(&'static str, String)>,
    /// The figures are host cost plus CPU kernels (the mock's).
    pub(crate) host_overhead_only: bool,
    /// The rows measured, in order.
    pub(crate) rows: Vec<RowReport>,
    /// The decode row, when it ran: its figures, or why it could not.
    pub(crate) decode: Option<Result<DecodeRow, String>>,
    /// The update row, when it ran: its figures, or why it could not.
    pub(crate) update: Option<Result<UpdateRow, String>>,
    /// The fork row, when it ran: its figures, or why it could not.
    pub(crate) fork: Option<Result<ForkRow, String>>,
    /// The update row's decoder part, when it ran: its figures, or why it could not.
    pub(crate) decoder_update: Option<Result<DecoderUpdateRow, String>>,
    /// The until row, when it ran: its figures, or why it could not.
    pub(crate) until: Option<Result<UntilRow, String>>,
    /// Why it stopped short (a row failed), or why it did not run.
    pub(crate) problem: Option<Problem>,
}

impl BackendRun {
    /// A backend opened on `device`, nothing measured yet; `host_overhead_only` for the
    /// mock's figures.
    pub(crate) fn new(name: &'static str, device: String, host_overhead_only: bool) -> Self {
        Self {
            name,
            device,
            settings: Vec::new(),
            host_overhead_only,
            rows: Vec::new(),
            decode: None,
            update: None,
            fork: None,
            decoder_update: None,
            until: None,
            problem: None,
        }
    }
}

/// Why a backend's rows are incomplete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// Not present on this machine, and not named: skipped.
    Skipped(String),
    /// Named but absent, or a row failed.
    Failed(String),
}

/// A whole run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Run {
    /// `release` or `debug`.
    pub(crate) build: &'static str,
    /// CPUs the machine offers.
    pub(crate) cpus: usize,
    /// Busy threads beside the benchmark.
    pub(crate) competitors: usize,
    /// Rounds per mode.
    pub(crate) rounds: usize,
    pub(crate) backends: Vec<BackendRun>,
}

impl Run {
    /// Whether every backend that ran (or was named) finished every row, its decode row
    /// included (its checks holding).
    pub(crate) fn failed(&self) -> bool {
        self.backends.iter().any(|b| {
            matches!(b.problem, Some(Problem::Failed(_)))
                || matches!(&b.decode, Some(Err(_)))
                || matches!(&b.decode, Some(Ok(d)) if !d.failed.is_empty())
                || matches!(&b.update, Some(Err(_)))
                || matches!(&b.update, Some(Ok(u)) if u.failed.is_some())
                || matches!(&b.fork, Some(Err(_)))
                || matches!(&b.fork, Some(Ok(f)) if f.failed.is_some())
                || matches!(&b.decoder_update, Some(Err(_)))
                || matches!(&b.decoder_update, Some(Ok(u)) if u.failed.is_some())
                || matches!(&b.until, Some(Err(_)))
                || matches!(&b.until, Some(Ok(u)) if u.failed.is_some())
        })
    }
}

/// What the mock's figures are.
const MOCK_NOTE: &str = "host cost only: the mock runs its kernels on the CPU at the readback";

/// The run as tables.
pub(crate) fn render(run: &Run) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "capture bench: {} build, {} CPUs, {} competing busy thread(s); {} rounds per mode, \
         interleaved; each figure the median over rounds of a round's mean per pass",
        run.build, run.cpus, run.competitors, run.rounds
    );
    for b in &run.backends {
        t.push('\n');
        let _ = writeln!(t, "{}: {}", b.name, b.device);
        if !b.settings.is_empty() {
            let settings: Vec<String> =
                b.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(t, "  settings: {}", settings.join(", "));
        }
        if b.host_overhead_only {
            let _ = writeln!(t, "  note: {MOCK_NOTE}");
        }
        if !b.rows.is_empty() {
            t.push_str(&rows_table(&b.rows));
            t.push_str(&programmatic_table(&b.rows));
            if b.rows.iter().any(|r| r.floor.is_some()) {
                t.push_str(&floor_table(b.name, &b.rows));
            }
        }
        step_row(&mut t, "fork", &b.fork, fork_table);
        step_row(&mut t, "update", &b.update, update_table);
        step_row(&mut t, "until", &b.until, until_table);
        step_row(
            &mut t,
            "update, the decoder",
            &b.decoder_update,
            decoder_update_table,
        );
        step_row(&mut t, "decode", &b.decode, decode_table);
        match &b.problem {
            Some(Problem::Skipped(why)) => {
                let _ = writeln!(t, "  skipped: {why}");
            }
            Some(Problem::Failed(why)) => {
                let _ = writeln!(t, "  FAILED: {why}");
            }
            None => {}
        }
    }
    t
}

fn rows_table(rows: &[RowReport]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "  {:<9}{:>7}  {:>19}  {:>19}  {:>7}  {:>9}  {:>21}  {:>15}",
        "",
        "",
        "enqueue µs/pass",
        "e2e µs/kernel",
        "",
        "capture",
        "graph B / live B",
        "replay call µs"
    );
    let _ = writeln!(
        t,
        "  {:<9}{:>7}  {:>9} {:>9}  {:>9} {:>9}  {:>7}  {:>9}  {:>21}  {:>7} {:>7}",
        "row", "passes", "eager", "replay", "eager", "replay", "ratio", "ms", "", "p50", "p99"
    );
    for r in rows {
        let _ = writeln!(
            t,
            "  {:<9}{:>7}  {:>9} {:>9}  {:>9} {:>9}  {:>6.2}×  {:>9.2}  {:>21}  {:>7} {:>7}",
            r.row.name,
            r.passes,
            fixed(r.eager.enqueue_us_per_pass),
            fixed(r.replay.enqueue_us_per_pass),
            fixed(r.eager.e2e_us_per_kernel),
            fixed(r.replay.e2e_us_per_kernel),
            r.ratio(),
            r.capture_ms,
            format!("{} / {}", r.graph_device_bytes, r.live_device_bytes),
            fixed(r.replay_call_p50_us),
            fixed(r.replay_call_p99_us),
        );
    }
    t
}

/// The replay recorded as programmatic dependent launches against the plain replay, per
/// row; one line saying why where the device or the kernel runs none.
fn programmatic_table(rows: &[RowReport]) -> String {
    let mut t = String::new();
    let measured: Vec<(&RowReport, &Figures)> = rows
        .iter()
        .filter_map(|r| r.programmatic.as_ref().ok().map(|f| (r, f)))
        .collect();
    if measured.is_empty() {
        if let Some(Err(why)) = rows.first().map(|r| &r.programmatic) {
            let _ = writeln!(t, "  programmatic dependent launch: not measured: {why}");
        }
        return t;
    }
    let _ = writeln!(
        t,
        "  replay with programmatic dependent launch (each launch after the first may start \
         while the one before finishes), e2e µs/kernel (replay / programmatic: the median of \
         each round's ratio, min–max; above 1: the overlap is faster)"
    );
    let _ = writeln!(
        t,
        "  {:<9}  {:>9} {:>12}  {:>18}",
        "row", "replay", "programmatic", "×"
    );
    for r in rows {
        match &r.programmatic {
            Ok(f) => {
                let p = paired(&r.replay, f);
                let _ = writeln!(
                    t,
                    "  {:<9}  {:>9} {:>12}  {:>18}",
                    r.row.name,
                    fixed(r.replay.e2e_us_per_kernel),
                    fixed(f.e2e_us_per_kernel),
                    format!("{:.2}× ({:.2}–{:.2})", p.median, p.min, p.max)
                );
            }
            Err(why) => {
                let _ = writeln!(t, "  {:<9}  not measured: {why}", r.row.name);
            }
        }
    }
    t
}

/// A step row's table, or `name: FAILED: why` when it failed; nothing when it did not run.
fn step_row<R>(
    t: &mut String,
    name: &str,
    row: &Option<Result<R, String>>,
    table: fn(&R) -> String,
) {
    match row {
        Some(Ok(r)) => t.push_str(&table(r)),
        Some(Err(why)) => {
            let _ = writeln!(t, "  {name}: FAILED: {why}");
        }
        None => {}
    }
}

fn fork_table(f: &ForkRow) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "  fork (two experts of {} launches each and a combine, {} launches a step over {} \
         elements, the second expert on a branch stream; {} steps per graph, each read \
         back), {} rounds, us/step (one stream against forked: the median of each round's \
         ratio, min-max):",
        fork_row::EXPERT_LAUNCHES,
        fork_row::launches(),
        fork_row::ELEMENTS,
        fork_row::STEPS,
        f.rounds
    );
    let p = &f.single_over_forked;
    let _ = writeln!(
        t,
        "  forked replay {}, one-stream replay {}, {:.2}x ({:.2}-{:.2})",
        fixed(f.forked_us),
        fixed(f.single_us),
        p.median,
        p.min,
        p.max
    );
    match &f.failed {
        None => {
            let _ = writeln!(
                t,
                "  fork checks hold (every step's output, both graphs, bit for bit against eager)"
            );
        }
        Some(why) => {
            let _ = writeln!(t, "  fork check FAILED: {why}");
        }
    }
    t
}

fn until_table(u: &UntilRow) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "  until (capture decode --until-eos's decoder, dim 64, 2 layers, at most {} tokens, \
         ending at its end token after {}; {} rounds; tokens/s, medians):",
        crate::bench::DECODE_TOKENS,
        u.tokens,
        u.rounds
    );
    let _ = writeln!(
        t,
        "    loop on the device (replay_until)         {:>10.0}",
        u.loop_tps
    );
    let _ = writeln!(
        t,
        "    replay x {} with a host check each        {:>10.0}  ({} steps run)  loop/this {:.2} [{:.2}-{:.2}]",
        until_row::EVERY,
        u.chunks_tps,
        u.chunk_steps,
        u.loop_over_chunks.median,
        u.loop_over_chunks.min,
        u.loop_over_chunks.max
    );
    let _ = writeln!(
        t,
        "    one replay per token, a host check each   {:>10.0}  loop/this {:.2} [{:.2}-{:.2}]",
        u.per_token_tps,
        u.loop_over_per_token.median,
        u.loop_over_per_token.min,
        u.loop_over_per_token.max
    );
    let _ = writeln!(
        t,
        "    eager, a host check each                  {:>10.0}",
        u.eager_tps
    );
    let _ = writeln!(
        t,
        "    checks: {}",
        u.failed.as_deref().unwrap_or(
            "every mode's ids the eager run's, the loop's iterations, the host reference"
        )
    );
    t
}

fn decoder_update_table(u: &DecoderUpdateRow) -> String {
    let c = decoder_update_row::CONFIG;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "  update, the decoder (dim {} x {} layers, context {}: {} launches a step, its \
         position and attention grid slots set every token, {} tokens per mode), {} rounds, \
         us/token (re-capture against the update: the median of each round's ratio, \
         min-max):",
        c.dim,
        c.layers,
        c.context,
        u.launches,
        decoder_update_row::TOKENS,
        u.rounds
    );
    let p = &u.recapture_over_update;
    let _ = writeln!(
        t,
        "  update + replay {}, re-capture + replay {}, {:.2}x ({:.2}-{:.2})",
        fixed(u.update_us),
        fixed(u.recapture_us),
        p.median,
        p.min,
        p.max
    );
    match &u.failed {
        None => {
            let _ = writeln!(
                t,
                "  decoder update checks hold (every token's logits bit for bit against \
                 eager, both modes)"
            );
        }
        Some(f) => {
            let _ = writeln!(t, "  decoder update check FAILED: {f}");
        }
    }
    t
}

fn update_table(u: &UpdateRow) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "  update ({} launches a step, its input rebound every token, {} tokens per mode, \
         each read back), {} rounds, us/token (re-capture against the update: the median of \
         each round's ratio, min-max):",
        update_row::LAUNCHES,
        update_row::TOKENS,
        u.rounds
    );
    let p = &u.recapture_over_update;
    let _ = writeln!(
        t,
        "  rebind + replay {}, re-capture + replay {}, {:.2}x ({:.2}-{:.2})",
        fixed(u.update_us),
        fixed(u.recapture_us),
        p.median,
        p.min,
        p.max
    );
    match &u.failed {
        None => {
            let _ = writeln!(t, "  update checks hold (every token's output, both modes)");
        }
        Some(f) => {
            let _ = writeln!(t, "  update check FAILED: {f}");
        }
    }
    t
}

fn decode_table(d: &DecodeRow) -> String {
    let c = decode_options().config;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "  decode (capture decode --dim {} --layers {} --heads {} --vocab {} --context {} \
         --tokens {}; {} kernels per step), {} rounds, tokens/s (× against eager: the median \
         of each round's ratio, min–max):",
        c.dim, c.layers, c.heads, c.vocab, c.context, d.tokens, d.kernels, d.rounds
    );
    let _ = writeln!(
        t,
        "  {:>9} {:>17} {:>18} {:>16} {:>18}",
        "eager", "replayed/token", "×", "one call", "×"
    );
    let versus = |p: &Paired| format!("{:.2}× ({:.2}–{:.2})", p.median, p.min, p.max);
    let _ = writeln!(
        t,
        "  {:>9.0} {:>17.0} {:>18} {:>16.0} {:>18}",
        d.eager,
        d.replayed,
        versus(&d.replayed_over_eager),
        d.one_call,
        versus(&d.one_call_over_eager)
    );
    if d.cpu_us_per_token.iter().all(|v| v.is_finite()) {
        let [eager, replayed, one_call] = d.cpu_us_per_token;
        let _ = writeln!(
            t,
            "  host CPU of the calling thread, µs/token: eager {}, replayed/token {}, one call {}",
            fixed(eager),
            fixed(replayed),
            fixed(one_call)
        );
    }
    if d.failed.is_empty() {
        let _ = writeln!(
            t,
            "  decode checks hold (eager against replayed bit for bit, host reference)"
        );
    } else {
        for f in &d.failed {
            let _ = writeln!(t, "  decode check FAILED: {f}");
        }
    }
    t
}

/// One library-against-floor table: per row, the library's `value` eager and replayed
/// beside the floor's, and `times`, how far above the floor it sits.
fn versus_table(
    t: &mut String,
    rows: &[RowReport],
    value: fn(&Figures) -> f64,
    times: fn(&Figures, &Figures) -> String,
    width: usize,
) {
    let _ = writeln!(
        t,
        "  {:<9}  {:>9} {:>9} {:>width$}  {:>9} {:>9} {:>width$}",
        "row", "eager", "floor", "×", "replay", "floor", "×"
    );
    for r in rows {
        let Some(floor) = &r.floor else { continue };
        let versus = |lib: &Figures, floor: Option<&Figures>| match floor {
            Some(f) => (fixed(value(f)), times(lib, f)),
            None => ("-".into(), "-".into()),
        };
        let (eager_floor, eager_x) = versus(&r.eager, Some(&floor.eager));
        let (replay_floor, replay_x) = versus(&r.replay, floor.replay.as_ref());
        let _ = writeln!(
            t,
            "  {:<9}  {:>9} {:>9} {:>width$}  {:>9} {:>9} {:>width$}",
            r.row.name,
            fixed(value(&r.eager)),
            eager_floor,
            eager_x,
            fixed(value(&r.replay)),
            replay_floor,
            replay_x
        );
    }
}

/// What the host-CPU column measures on backend `name`: the calling thread's CPU over
/// whole passes, read-back included, so a wait counts where it spins. CUDA's primary
/// context spins in `cuStreamSynchronize` by default, and both the floor's pass and the
/// library's read end in one: there the column holds each side's wait for the device,
/// not the enqueue cost alone.
fn cpu_label(name: &str) -> &'static str {
    if name == "cuda" {
        "host CPU of the calling thread, µs/kernel, whole passes: the read-back's \
         cuStreamSynchronize spins (the primary context's default) and is counted, on both \
         sides, so this is not the enqueue cost alone"
    } else {
        "host CPU of the calling thread, µs/kernel (what a pass costs the host, waits left \
         out: they block)"
    }
}

fn floor_table(backend: &str, rows: &[RowReport]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "  against the hand-written floor, e2e µs/kernel (library / floor = how far above it: \
         the median of each round's ratio, min–max over rounds)"
    );
    versus_table(
        &mut t,
        rows,
        |f| f.e2e_us_per_kernel,
        |lib, floor| {
            let p = paired(lib, floor);
            format!("{:.2}× ({:.2}–{:.2})", p.median, p.min, p.max)
        },
        18,
    );
    // The host's share, steadier than the wall clock where the driver's threads and the
    // caller share few CPUs.
    if rows
        .iter()
        .any(|r| r.floor.is_some() && r.eager.cpu_us_per_kernel.is_finite())
    {
        let _ = writeln!(t, "  {}", cpu_label(backend));
        versus_table(
            &mut t,
            rows,
            |f| f.cpu_us_per_kernel,
            |lib, floor| format!("{:.2}×", lib.cpu_us_per_kernel / floor.cpu_us_per_kernel),
            7,
        );
    }
    // Where the floor tried several eager ways, which each row's floor is, and the rest.
    for r in rows {
        let Some(floor) = &r.floor else { continue };
        if floor.eager_variants.len() < 2 {
            continue;
        }
        let tried: Vec<String> = floor
            .eager_variants
            .iter()
            .map(|(name, f)| format!("{name} {}", fixed(f.e2e_us_per_kernel)))
            .collect();
        let _ = writeln!(
            t,
            "  {:<9}  floor eager submits {}: fastest of {} µs/kernel",
            r.row.name,
            floor.eager_best,
            tried.join(", ")
        );
    }
    t
}

/// A figure in µs with three significant digits or more.
fn fixed(us: f64) -> String {
    if !us.is_finite() {
        "-".into()
    } else if us >= 100.0 {
        format!("{us:.0}")
    } else if us >= 10.0 {
        format!("{us:.1}")
    } else if us >= 1.0 {
        format!("{us:.2}")
    } else {
        format!("{us:.3}")
    }
}

/// The run as JSON (one object; numbers in µs, ms and bytes as the keys say).
pub(crate) fn json(run: &Run) -> String {
    let mut j = String::new();
    let _ = write!(
        j,
        "{{\"build\":{},\"cpus\":{},\"competitors\":{},\"rounds\":{},\"backends\":[",
        string(run.build),
        run.cpus,
        run.competitors,
        run.rounds
    );
    for (i, b) in run.backends.iter().enumerate() {
        if i > 0 {
            j.push(',');
        }
        let _ = write!(
            j,
            "{{\"backend\":{},\"device\":{},\"host_overhead_only\":{},\"settings\":{{",
            string(b.name),
            string(&b.device),
            b.host_overhead_only
        );
        for (k, (name, value)) in b.settings.iter().enumerate() {
            if k > 0 {
                j.push(',');
            }
            let _ = write!(j, "{}:{}", string(name), string(value));
        }
        j.push_str("},\"rows\":[");
        for (k, r) in b.rows.iter().enumerate() {
            if k > 0 {
                j.push(',');
            }
            row_json(&mut j, r);
        }
        j.push(']');
        match &b.decode {
            Some(Ok(d)) => {
                let _ = write!(
                    j,
                    ",\"decode\":{{\"tokens\":{},\"kernels_per_step\":{},\"rounds\":{},\
                     \"eager_tokens_per_s\":{},\"replayed_tokens_per_s\":{},\
                     \"one_call_tokens_per_s\":{},\"replayed_over_eager\":{},\
                     \"one_call_over_eager\":{},\"cpu_us_per_token\":{{\"eager\":{},\
                     \"replayed\":{},\"one_call\":{}}},\"checks_hold\":{}}}",
                    d.tokens,
                    d.kernels,
                    d.rounds,
                    number(d.eager),
                    number(d.replayed),
                    number(d.one_call),
                    paired_json(d.replayed_over_eager),
                    paired_json(d.one_call_over_eager),
                    number(d.cpu_us_per_token[0]),
                    number(d.cpu_us_per_token[1]),
                    number(d.cpu_us_per_token[2]),
                    d.failed.is_empty()
                );
            }
            Some(Err(why)) => {
                let _ = write!(j, ",\"decode\":{{\"failed\":{}}}", string(why));
            }
            None => {}
        }
        match &b.fork {
            Some(Ok(f)) => {
                let _ = write!(
                    j,
                    ",\"fork\":{{\"launches_per_step\":{},\"elements\":{},\"steps\":{},\
                     \"rounds\":{},\"forked_replay_us_per_step\":{},\
                     \"single_stream_replay_us_per_step\":{},\"single_over_forked\":{},\
                     \"checks_hold\":{}}}",
                    fork_row::launches(),
                    fork_row::ELEMENTS,
                    fork_row::STEPS,
                    f.rounds,
                    number(f.forked_us),
                    number(f.single_us),
                    paired_json(f.single_over_forked),
                    f.failed.is_none()
                );
            }
            Some(Err(why)) => {
                let _ = write!(j, ",\"fork\":{{\"failed\":{}}}", string(why));
            }
            None => {}
        }
        match &b.update {
            Some(Ok(u)) => {
                let _ = write!(
                    j,
                    ",\"update\":{{\"launches_per_step\":{},\"tokens\":{},\"rounds\":{},\
                     \"rebind_replay_us_per_token\":{},\"recapture_replay_us_per_token\":{},\
                     \"recapture_over_update\":{},\"checks_hold\":{}}}",
                    update_row::LAUNCHES,
                    update_row::TOKENS,
                    u.rounds,
                    number(u.update_us),
                    number(u.recapture_us),
                    paired_json(u.recapture_over_update),
                    u.failed.is_none()
                );
            }
            Some(Err(why)) => {
                let _ = write!(j, ",\"update\":{{\"failed\":{}}}", string(why));
            }
            None => {}
        }
        match &b.until {
            Some(Ok(u)) => {
                let _ = write!(
                    j,
                    ",\"until\":{{\"tokens\":{},\"rounds\":{},\"every\":{},\"chunk_steps\":{},\
                     \"loop_tokens_per_s\":{},\"chunks_tokens_per_s\":{},\
                     \"per_token_tokens_per_s\":{},\"eager_tokens_per_s\":{},\
                     \"loop_over_chunks\":{},\"loop_over_per_token\":{},\"checks_hold\":{}}}",
                    u.tokens,
                    u.rounds,
                    until_row::EVERY,
                    u.chunk_steps,
                    number(u.loop_tps),
                    number(u.chunks_tps),
                    number(u.per_token_tps),
                    number(u.eager_tps),
                    paired_json(u.loop_over_chunks),
                    paired_json(u.loop_over_per_token),
                    u.failed.is_none()
                );
            }
            Some(Err(why)) => {
                let _ = write!(j, ",\"until\":{{\"failed\":{}}}", string(why));
            }
            None => {}
        }
        match &b.decoder_update {
            Some(Ok(u)) => {
                let _ = write!(
                    j,
                    ",\"decoder_update\":{{\"launches_per_step\":{},\"tokens\":{},\"rounds\":{},\
                     \"update_replay_us_per_token\":{},\"recapture_replay_us_per_token\":{},\
                     \"recapture_over_update\":{},\"checks_hold\":{}}}",
                    u.launches,
                    decoder_update_row::TOKENS,
                    u.rounds,
                    number(u.update_us),
                    number(u.recapture_us),
                    paired_json(u.recapture_over_update),
                    u.failed.is_none()
                );
            }
            Some(Err(why)) => {
                let _ = write!(j, ",\"decoder_update\":{{\"failed\":{}}}", string(why));
            }
            None => {}
        }
        match &b.problem {
            Some(Problem::Skipped(why)) => {
                let _ = write!(j, ",\"skipped\":{}", string(why));
            }
            Some(Problem::Failed(why)) => {
                let _ = write!(j, ",\"failed\":{}", string(why));
            }
            None => {}
        }
        j.push('}');
    }
    j.push_str("]}");
    j
}

fn row_json(j: &mut String, r: &RowReport) {
    let _ = write!(
        j,
        "{{\"row\":{},\"elements\":{},\"kernels\":{},\"control\":{},\"passes\":{},\"rounds\":{},\
         \"eager\":{},\"replay\":{},\"ratio\":{},\"capture_ms\":{},\"graph_device_bytes\":{},\
         \"live_device_bytes\":{},\"replay_call_us\":{{\"p50\":{},\"p99\":{}}},\"floor\":",
        string(r.row.name),
        r.row.elements,
        r.row.kernels,
        r.row.control,
        r.passes,
        r.rounds,
        figures_json(&r.eager),
        figures_json(&r.replay),
        number(r.ratio()),
        number(r.capture_ms),
        r.graph_device_bytes,
        r.live_device_bytes,
        number(r.replay_call_p50_us),
        number(r.replay_call_p99_us),
    );
    match &r.floor {
        None => j.push_str("null"),
        Some(f) => {
            let variants: Vec<String> = f
                .eager_variants
                .iter()
                .map(|(name, v)| {
                    format!(
                        "{{\"way\":{},\"figures\":{}}}",
                        string(name),
                        figures_json(v)
                    )
                })
                .collect();
            let versus = |lib: &Figures, floor: Option<&Figures>| {
                floor.map_or("null".into(), |f| paired_json(paired(lib, f)))
            };
            let _ = write!(
                j,
                "{{\"eager\":{},\"eager_way\":{},\"eager_ways\":[{}],\"replay\":{},\
                 \"eager_over_floor\":{},\"replay_over_floor\":{}}}",
                figures_json(&f.eager),
                string(&f.eager_best),
                variants.join(","),
                f.replay.as_ref().map_or("null".into(), figures_json),
                versus(&r.eager, Some(&f.eager)),
                versus(&r.replay, f.replay.as_ref()),
            );
        }
    }
    j.push_str(",\"programmatic\":");
    match &r.programmatic {
        Ok(f) => {
            let _ = write!(
                j,
                "{{\"replay\":{},\"replay_over_programmatic\":{}}}",
                figures_json(f),
                paired_json(paired(&r.replay, f))
            );
        }
        Err(why) => {
            let _ = write!(j, "{{\"skipped\":{}}}", string(why));
        }
    }
    j.push('}');
}

fn paired_json(p: Paired) -> String {
    format!(
        "{{\"median\":{},\"min\":{},\"max\":{}}}",
        number(p.median),
        number(p.min),
        number(p.max)
    )
}

fn figures_json(f: &Figures) -> String {
    let rounds: Vec<String> = f.rounds_us_per_kernel.iter().map(|v| number(*v)).collect();
    format!(
        "{{\"enqueue_us_per_pass\":{},\"e2e_us_per_kernel\":{},\"rounds_us_per_kernel\":[{}],\
         \"cpu_us_per_kernel\":{}}}",
        number(f.enqueue_us_per_pass),
        number(f.e2e_us_per_kernel),
        rounds.join(","),
        number(f.cpu_us_per_kernel)
    )
}

/// A JSON number, or `null` for one that is not finite.
fn number(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

/// A JSON string.
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_tables_pair_rounds_and_name_the_fastest_way() {
        use crate::bench::{FloorFigures, Row};
        let figures = |rounds: &[f64], cpu: f64| Figures {
            enqueue_us_per_pass: 1.0,
            e2e_us_per_kernel: rounds[1],
            rounds_us_per_kernel: rounds.to_vec(),
            cpu_us_per_kernel: cpu,
        };
        let fast = figures(&[1.0, 2.0, 4.0], 0.5);
        let row = RowReport {
            row: Row::new("64x150", 64, 150, false),
            passes: 1,
            rounds: 3,
            eager: figures(&[3.0, 3.0, 4.0], 1.5),
            replay: figures(&[1.0, 2.0, 4.0], 0.25),
            capture_ms: 1.0,
            graph_device_bytes: 528,
            live_device_bytes: 768,
            replay_call_p50_us: 1.0,
            replay_call_p99_us: 2.0,
            floor: Some(FloorFigures {
                eager: fast.clone(),
                eager_variants: vec![
                    ("whole pass".into(), figures(&[2.0, 3.0, 5.0], 0.6)),
                    ("every 64".into(), fast.clone()),
                ],
                eager_best: "every 64".into(),
                replay: Some(figures(&[1.0, 2.0, 4.0], 0.25)),
            }),
            programmatic: Err("the mock runs no programmatic dependent launch".into()),
        };
        assert_eq!(
            programmatic_table(std::slice::from_ref(&row)),
            "  programmatic dependent launch: not measured: the mock runs no programmatic \
             dependent launch\n"
        );
        let mut j = String::new();
        row_json(&mut j, &row);
        assert!(
            j.ends_with(
                "\"programmatic\":{\"skipped\":\"the mock runs no programmatic dependent launch\"}}"
            ),
            "{j}"
        );
        let overlapped = RowReport {
            programmatic: Ok(figures(&[0.5, 1.0, 4.0], 0.25)),
            ..row.clone()
        };
        // Rounds 1/0.5, 2/1, 4/4: median 2, min 1, max 2.
        let p = programmatic_table(std::slice::from_ref(&overlapped));
        assert!(p.contains("64x150          2.00         1.00"), "{p}");
        assert!(p.contains("2.00× (1.00–2.00)"), "{p}");
        let t = floor_table("vulkan", std::slice::from_ref(&row));
        assert!(t.contains("waits left out: they block"), "{t}");
        let cuda = floor_table("cuda", &[row]);
        assert!(cuda.contains("cuStreamSynchronize spins"), "{cuda}");
        // Rounds 3/1, 3/2, 4/4: median 1.5, min 1, max 3.
        assert!(t.contains("1.50× (1.00–3.00)"), "{t}");
        assert!(t.contains("1.00× (1.00–1.00)"), "{t}");
        // Host CPU: 1.5 / 0.5 eager, 0.25 / 0.25 replayed.
        assert!(t.contains("host CPU of the calling thread"), "{t}");
        assert!(t.contains("3.00×"), "{t}");
        assert!(
            t.contains("floor eager submits every 64: fastest of whole pass 3.00, every 64 2.00"),
            "{t}"
        );
    }

    #[test]
    fn strings_are_escaped_and_odd_numbers_are_null() {
        assert_eq!(string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(number(f64::NAN), "null");
        assert_eq!(number(1.5), "1.5");
    }

    #[test]
    fn figures_keep_three_digits() {
        assert_eq!(fixed(0.1234), "0.123");
        assert_eq!(fixed(1.234), "1.23");
        assert_eq!(fixed(12.34), "12.3");
        assert_eq!(fixed(1234.5), "1234");
        assert_eq!(fixed(f64::NAN), "-");
    }
}
