//! `capture bench` as a user runs it: the matrix on both mock modes as tables and as
//! JSON a machine can read, and its usage errors.

use std::process::{Command, Output};

/// Runs `capture bench ARGS` as the `capture` program does: the `capture-bench`
/// program with the arguments after `bench`, with no `RUST_LOG`.
fn capture(args: &[&str]) -> Output {
    assert_eq!(args.first(), Some(&"bench"), "{args:?}");
    Command::new(env!("CARGO_BIN_EXE_capture-bench"))
        .args(&args[1..])
        .env_remove("RUST_LOG")
        .output()
        .expect("the capture-bench binary starts")
}

/// Output bytes as text.
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(feature = "mock")]
#[test]
fn bench_prints_a_table_per_mock_mode() {
    let out = capture(&[
        "bench",
        "--backend",
        "mock,affine-mock",
        "--rows",
        "64x150,64x1000",
        "--passes",
        "1",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    for expected in [
        "capture bench: ",
        "5 rounds per mode, interleaved",
        "\nmock: mock, relaxed mode",
        "\naffine-mock: mock, thread-affine streams",
        "enqueue µs/pass",
        "e2e µs/kernel",
        "graph B / live B",
        "replay call µs",
        "\n  64x150 ",
        "\n  64x1000 ",
        "programmatic dependent launch: not measured: the mock runs no programmatic",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    assert!(!stdout.contains("FAILED"), "{stdout}");
}

#[cfg(feature = "mock")]
#[test]
fn bench_json_holds_every_row_with_its_figures() {
    let out = capture(&[
        "bench",
        "--backend=mock,affine-mock",
        "--rows=launch-bound",
        "--passes=1",
        "--competitors=1",
        "--json",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let run: serde_json::Value = serde_json::from_str(&stdout).expect("the output is JSON");
    assert_eq!(run["rounds"], 5);
    assert_eq!(run["competitors"], 1);
    let backends = run["backends"].as_array().expect("backends");
    let names: Vec<_> = backends.iter().map(|b| b["backend"].clone()).collect();
    assert_eq!(names, ["mock", "affine-mock"]);
    for b in backends {
        assert_eq!(b["host_overhead_only"], true);
        assert!(b.get("failed").is_none(), "{b}");
        let rows = b["rows"].as_array().expect("rows");
        let names: Vec<_> = rows.iter().map(|r| r["row"].as_str().unwrap()).collect();
        assert_eq!(names, ["64x150", "64x1000", "64x5000"]);
        for r in rows {
            assert_eq!(r["elements"], 64);
            assert_eq!(r["control"], false);
            assert_eq!(r["passes"], 1);
            for mode in ["eager", "replay"] {
                let f = &r[mode];
                assert!(f["e2e_us_per_kernel"].as_f64().unwrap() > 0.0, "{r}");
                assert!(f["enqueue_us_per_pass"].as_f64().unwrap() > 0.0, "{r}");
                assert_eq!(f["rounds_us_per_kernel"].as_array().unwrap().len(), 5);
            }
            assert!(r["ratio"].as_f64().unwrap() > 0.0);
            assert!(r["graph_device_bytes"].as_u64().unwrap() >= 2 * 64 * 4);
            assert!(
                r["live_device_bytes"].as_u64().unwrap()
                    >= r["graph_device_bytes"].as_u64().unwrap()
            );
            let (p50, p99) = (&r["replay_call_us"]["p50"], &r["replay_call_us"]["p99"]);
            assert!(p99.as_f64().unwrap() >= p50.as_f64().unwrap());
            assert!(r["floor"].is_null());
            let skipped = r["programmatic"]["skipped"]
                .as_str()
                .expect("skipped on the mock");
            assert!(skipped.contains("the mock runs no programmatic"), "{r}");
        }
    }
}

#[cfg(feature = "mock")]
#[test]
fn the_decode_row_gives_tokens_per_second_in_each_mode() {
    let out = capture(&["bench", "--backend=mock", "--rows=decode"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    for expected in [
        "decode (capture decode --dim 64 --layers 2 --heads 4 --vocab 512 --context 64 --tokens 32; 35 kernels per step), 5 rounds, tokens/s",
        "eager    replayed/token",
        "host CPU of the calling thread, µs/token: eager ",
        "decode checks hold",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in:\n{stdout}");
    }
    let out = capture(&["bench", "--backend=mock", "--rows=decode", "--json"]);
    let stdout = text(&out.stdout);
    let run: serde_json::Value = serde_json::from_str(&stdout).expect("the output is JSON");
    let d = &run["backends"][0]["decode"];
    assert_eq!(d["tokens"], 32, "{d}");
    assert_eq!(d["kernels_per_step"], 35, "{d}");
    assert_eq!(d["checks_hold"], true, "{d}");
    assert_eq!(d["rounds"], 5, "{d}");
    for ratio in ["replayed_over_eager", "one_call_over_eager"] {
        let (lo, mid, hi) = (
            d[ratio]["min"].as_f64().unwrap(),
            d[ratio]["median"].as_f64().unwrap(),
            d[ratio]["max"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= mid && mid <= hi, "{ratio}: {d}");
    }
    for mode in ["eager", "replayed", "one_call"] {
        assert!(d["cpu_us_per_token"][mode].as_f64().unwrap() > 0.0, "{d}");
    }
    for mode in ["eager", "replayed", "one_call"] {
        let rate = d[format!("{mode}_tokens_per_s")].as_f64().unwrap();
        assert!(rate > 0.0, "{mode}: {d}");
    }
    assert_eq!(run["backends"][0]["rows"].as_array().unwrap().len(), 0);
}

#[cfg(feature = "mock")]
#[test]
fn the_update_row_sets_a_slot_per_token_against_a_capture_per_token() {
    let out = capture(&["bench", "--backend=mock", "--rows=update"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    for expected in [
        "update (7 launches a step, its input rebound every token, 32 tokens per mode, each read back), 5 rounds",
        "rebind + replay ",
        "update checks hold (every token's output, both modes)",
        "update, the decoder (dim 64 x 2 layers, context 64: 36 launches a step, its position and attention grid slots set every token, 16 tokens per mode), 5 rounds",
        "update + replay ",
        "decoder update checks hold (every token's logits bit for bit against eager, both modes)",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in:\n{stdout}");
    }
    assert!(
        !stdout.contains("decode ("),
        "decode was not asked for:\n{stdout}"
    );
    let out = capture(&["bench", "--backend=mock", "--rows=update", "--json"]);
    let stdout = text(&out.stdout);
    let run: serde_json::Value = serde_json::from_str(&stdout).expect("the output is JSON");
    let u = &run["backends"][0]["update"];
    assert_eq!(u["launches_per_step"], 7, "{u}");
    assert_eq!(u["tokens"], 32, "{u}");
    assert_eq!(u["rounds"], 5, "{u}");
    assert_eq!(u["checks_hold"], true, "{u}");
    for mode in ["rebind_replay", "recapture_replay"] {
        assert!(
            u[format!("{mode}_us_per_token")].as_f64().unwrap() > 0.0,
            "{u}"
        );
    }
    let ratio = &u["recapture_over_update"];
    let (lo, mid, hi) = (
        ratio["min"].as_f64().unwrap(),
        ratio["median"].as_f64().unwrap(),
        ratio["max"].as_f64().unwrap(),
    );
    assert!(0.0 < lo && lo <= mid && mid <= hi, "{u}");
    assert!(run["backends"][0]["decode"].is_null(), "{u}");
    // The decoder part: the slotted step, its slots set per token against a capture
    // per token, every token's logits checked.
    let d = &run["backends"][0]["decoder_update"];
    assert_eq!(d["launches_per_step"], 36, "{d}");
    assert_eq!(
        (d["tokens"].as_u64(), d["rounds"].as_u64()),
        (Some(16), Some(5))
    );
    assert_eq!(d["checks_hold"], true, "{d}");
    for mode in ["update_replay", "recapture_replay"] {
        assert!(
            d[format!("{mode}_us_per_token")].as_f64().unwrap() > 0.0,
            "{d}"
        );
    }
}

#[cfg(feature = "mock")]
#[test]
fn the_fork_row_replays_a_forked_step_against_the_same_work_on_one_stream() {
    let out = capture(&["bench", "--backend=mock", "--rows=fork"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    for expected in [
        "fork (two experts of 4 launches each and a combine, 10 launches a step over 4096 elements, the second expert on a branch stream; 32 steps per graph, each read back), 5 rounds",
        "forked replay ",
        "fork checks hold (every step's output, both graphs, bit for bit against eager)",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in:\n{stdout}");
    }
    assert!(
        !stdout.contains("update ("),
        "update was not asked for:\n{stdout}"
    );
    let out = capture(&["bench", "--backend=mock", "--rows=fork", "--json"]);
    let run: serde_json::Value =
        serde_json::from_str(&text(&out.stdout)).expect("the output is JSON");
    let f = &run["backends"][0]["fork"];
    assert_eq!(f["launches_per_step"], 10, "{f}");
    assert_eq!(f["steps"], 32, "{f}");
    assert_eq!(f["checks_hold"], true, "{f}");
    for mode in ["forked_replay", "single_stream_replay"] {
        assert!(
            f[format!("{mode}_us_per_step")].as_f64().unwrap() > 0.0,
            "{f}"
        );
    }
    let ratio = &f["single_over_forked"];
    let (lo, mid, hi) = (
        ratio["min"].as_f64().unwrap(),
        ratio["median"].as_f64().unwrap(),
        ratio["max"].as_f64().unwrap(),
    );
    assert!(0.0 < lo && lo <= mid && mid <= hi, "{f}");
    assert!(run["backends"][0]["update"].is_null(), "{f}");
}

#[test]
fn bench_usage_errors_name_the_option() {
    let out = capture(&["bench", "--rounds", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--rounds"), "{stderr}");
    assert!(stderr.contains("capture bench --help"), "{stderr}");
    let out = capture(&["bench", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("usage: capture bench"));
}

#[cfg(not(feature = "vulkan"))]
#[test]
fn a_named_backend_this_build_lacks_fails_the_run() {
    let out = capture(&["bench", "--backend", "vulkan", "--rows", "64x150"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAILED: this build has no vulkan backend"),
        "{stdout}"
    );
}

#[test]
fn a_log_directive_that_is_not_one_is_a_usage_error() {
    let out = capture(&["bench", "--log", "capture=loud"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value \"capture=loud\" for --log"),
        "{stderr}"
    );
}
