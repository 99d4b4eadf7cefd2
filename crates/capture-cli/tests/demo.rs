//! The `capture` program as a user runs it: `capture demo` on the mock, the help of
//! each level, a backend this build was made without, and bad options.

mod program;

use program::{capture, text};

#[cfg(feature = "mock")]
#[test]
fn demo_on_the_mock_matches_and_prints_its_table() {
    let out = capture(&["demo", "--kernels", "64", "--replays", "3"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for expected in [
        "capture demo: backend mock, 64 kernels per step over 1024-element f32 buffers, 3 \
         timed steps per mode\n",
        "per kernel (µs)                     eager     replayed       ratio\n",
        "  step (submit + sync)  ",
        "  submit only  ",
        "\ncapture\n  time (ms)  ",
        "graph ledger (held while the graph lives)\n",
        "  launches                             64\n",
        "  info entries pinned  ",
        "host overhead only",
        "results match",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    assert!(stderr.is_empty(), "{stderr}");
}

#[cfg(feature = "mock")]
#[test]
fn demo_accepts_the_smallest_chain_and_inline_values() {
    let out = capture(&["demo", "--kernels=2", "--replays=1", "--backend=mock"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("  launches                              2\n"),
        "{stdout}"
    );
    assert!(stdout.contains("results match"), "{stdout}");
}

#[test]
fn help_works_at_both_levels() {
    for args in [&["--help"][..], &["-h"], &["help"]] {
        let out = capture(args);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(stdout.starts_with("usage: capture <command>"), "{stdout}");
        assert!(stdout.contains("demo"), "{stdout}");
    }
    for args in [
        &["demo", "--help"][..],
        &["demo", "-h"],
        &["demo", "--kernels", "9", "-h"],
    ] {
        let out = capture(args);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(stdout.starts_with("usage: capture demo"), "{stdout}");
        for option in [
            "--backend",
            "--kernels",
            "--replays",
            "default 512",
            "default 20",
        ] {
            assert!(stdout.contains(option), "{option} missing:\n{stdout}");
        }
    }
}

#[test]
fn backends_not_in_this_build_say_so_and_exit_2() {
    for (backend, built) in [
        ("vulkan", cfg!(feature = "vulkan")),
        ("cuda", cfg!(feature = "cuda")),
    ] {
        if built {
            continue;
        }
        let out = capture(&["demo", "--backend", backend]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{backend}: {stderr}");
        assert!(
            stderr.contains(&format!("build with `--features {backend}`")),
            "{stderr}"
        );
        assert!(stderr.contains("Nothing was run"), "{stderr}");
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    }
}

#[test]
fn bad_values_exit_2_naming_the_value() {
    for (args, named) in [
        (
            &["demo", "--kernels", "0"][..],
            "invalid value \"0\" for --kernels",
        ),
        (
            &["demo", "--kernels", "abc"],
            "invalid value \"abc\" for --kernels",
        ),
        (
            &["demo", "--replays", "0"],
            "invalid value \"0\" for --replays",
        ),
        (&["demo", "--backend", "metal"], "unknown backend \"metal\""),
        (&["demo", "--kernels"], "--kernels needs a value"),
        (&["demo", "--fast"], "unknown option \"--fast\""),
        (&["deploy"], "unknown command \"deploy\""),
        (&[], "usage: capture <command>"),
    ] {
        let out = capture(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(named),
            "{args:?}: {named:?} missing:\n{stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
}
