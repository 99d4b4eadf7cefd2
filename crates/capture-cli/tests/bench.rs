//! `capture bench` runs the benchmark program (package capture-bench) with the
//! arguments after `bench`, as cargo runs `cargo-NAME`: here the program
//! `CAPTURE_BENCH` names; its output and exit status are the command's, and a program
//! that cannot start is named with how to get it. (capture-bench's own tests run the
//! matrix.)

use std::process::Command;

/// Runs `capture bench ARGS` with `CAPTURE_BENCH=program`.
fn bench(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capture"))
        .arg("bench")
        .args(args)
        .env("CAPTURE_BENCH", program)
        .env_remove("RUST_LOG")
        .output()
        .expect("the capture binary starts")
}

#[test]
fn the_arguments_after_bench_reach_the_program_and_its_status_is_the_commands() {
    let out = bench("echo", &["--backend", "mock", "--rows=until", "--json"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "--backend mock --rows=until --json\n"
    );
    let out = bench("false", &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

#[test]
fn a_program_that_cannot_start_is_named_with_how_to_get_it() {
    let out = bench("/nonexistent/capture-bench", &["--rounds", "5"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/capture-bench"), "{stderr}");
    assert!(
        stderr.contains("cargo run --release -p capture-bench"),
        "{stderr}"
    );
    assert!(stderr.contains("Nothing was run"), "{stderr}");
    assert!(out.stdout.is_empty());
}
