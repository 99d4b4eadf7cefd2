//! `capture decode` as a user runs it: the decoder (package capture-decode, whose own
//! tests run its checks on every backend) through the program, its report and its
//! exit status.

#[cfg(feature = "mock")]
#[test]
fn the_program_prints_both_modes_the_ledger_and_the_checks() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capture"))
        .args(["decode", "--dim", "64", "--layers", "2", "--tokens", "16"])
        .args(["--context", "64"])
        .output()
        .expect("the capture binary starts");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for expected in [
        "capture decode: backend mock, dim 64 x 2 layers",
        "35 kernels per step",
        "  µs per token  ",
        "one call (x16)",
        "  ratio (eager / mode)  ",
        "  tokens/s  ",
        "\ncapture\n  time (ms)  ",
        "slots \"pos\" and \"attn\", rule 26",
        "  update + replay  ",
        "  re-capture + replay  ",
        "ratio (re-capture / update) ",
        "graph ledger (held while the graph lives)\n  launches                   35\n",
        "graph only (intermediates, handles dropped after capture)",
        "info words (",
        "generated ids (16): [",
        "ok   eager and replayed ids identical",
        "ok   logits of every step bit for bit",
        "ok   host reference within tolerance",
        "all checks hold",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    assert!(stderr.is_empty(), "{stderr}");
}

/// `capture decode --backend cuda` where CUDA is required: it decodes on a driver that is
/// there, and fails (never `SKIP:` and success) where none is.
#[cfg(feature = "cuda")]
#[test]
fn decode_on_cuda_fails_without_a_driver_when_cuda_is_required() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capture"))
        .args([
            "decode",
            "--backend",
            "cuda",
            "--tokens",
            "2",
            "--dim",
            "32",
        ])
        .args([
            "--layers",
            "1",
            "--heads",
            "2",
            "--vocab",
            "64",
            "--context",
            "8",
        ])
        .env("CAPTURE_REQUIRE_CUDA", "1")
        .output()
        .expect("the capture binary starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stdout.starts_with("device: ") {
        println!("a CUDA driver is present: the decoder ran on it");
        assert!(out.status.success(), "{stdout}{stderr}");
    } else {
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(!stdout.contains("SKIP"), "{stdout}");
        assert!(
            stderr.contains("CAPTURE_REQUIRE_CUDA=1 and CUDA unavailable"),
            "{stderr}"
        );
    }
}
