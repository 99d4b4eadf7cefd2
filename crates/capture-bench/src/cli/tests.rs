//! `capture bench`'s option parsing: defaults, lists and groups, counts, and every bad
//! value named.

use super::*;

fn bench(args: &[&str]) -> Result<Bench, UsageError> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    parse_bench(&args)
}

#[test]
fn bench_defaults_to_every_row_and_backend_with_five_rounds() {
    let Ok(Bench::Run(args)) = bench(&[]) else {
        panic!("parsed")
    };
    assert!(args.backends.is_empty());
    assert_eq!(args.options.rows.len(), 5);
    assert_eq!(args.options.rounds, 5);
    assert_eq!(args.options.passes, None);
    assert_eq!((args.competitors, args.json), (0, false));
}

#[test]
fn bench_takes_lists_groups_and_counts() {
    let Ok(Bench::Run(args)) = bench(&[
        "--backend=mock,affine-mock",
        "--rows",
        "controls,64x150",
        "--rounds=7",
        "--passes",
        "3",
        "--competitors=2",
        "--json",
    ]) else {
        panic!("parsed")
    };
    assert_eq!(
        args.backends,
        vec![BenchBackend::Mock, BenchBackend::AffineMock]
    );
    let rows: Vec<_> = args.options.rows.iter().map(|r| r.name).collect();
    assert_eq!(rows, ["64kx1000", "1Mx500", "64x150"]);
    assert_eq!((args.options.rounds, args.options.passes), (7, Some(3)));
    assert_eq!((args.competitors, args.json), (2, true));
    assert!(
        !args.options.decode,
        "rows named without decode leave it out"
    );
    assert_eq!(bench(&["--json", "-h"]), Ok(Bench::Help));
    let decode_only = |args: &[&str]| match bench(args) {
        Ok(Bench::Run(a)) => (a.options.rows.len(), a.options.decode),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        decode_only(&[]),
        (5, true),
        "by default every row and decode"
    );
    assert_eq!(decode_only(&["--rows", "decode"]), (0, true));
    assert_eq!(decode_only(&["--rows=all"]), (5, true));
}

#[test]
fn bench_bad_values_are_named() {
    for (args, named) in [
        (&["--rounds", "4"][..], "\"4\""),
        (&["--passes", "0"], "\"0\""),
        (&["--competitors", "65"], "\"65\""),
        (&["--backend", "metal"], "\"metal\""),
        (&["--rows", "64x7"], "\"64x7\""),
        (&["--backend", "mock", "--device", "0"], "--device"),
        (&["--frobnicate"], "\"--frobnicate\""),
    ] {
        let error = bench(args).expect_err("refused");
        assert!(error.0.contains(named), "{args:?}: {error}");
    }
}

#[test]
fn bench_takes_a_log_directive_and_draws_no_timeline() {
    let Ok(Bench::Run(args)) = bench(&["--log=info"]) else {
        panic!("parsed")
    };
    assert_eq!(args.log.as_deref(), Some("info"));
    assert!(
        bench(&["--timeline", "x.json"]).is_err(),
        "bench draws no timeline"
    );
}
