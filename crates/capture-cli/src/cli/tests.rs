//! The helpers every command's parsing shares, as the commands see them: `--log` and
//! `--timeline` taken by demo and refused by bench.

use std::path::PathBuf;

use super::bench::{Bench, parse_bench};
use super::demo::{Demo, DemoArgs, parse_demo};

fn parse(args: &[&str]) -> Result<Demo, super::args::UsageError> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    parse_demo(&args)
}

fn bench(args: &[&str]) -> Result<Bench, super::args::UsageError> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    parse_bench(&args)
}

#[test]
fn demo_and_bench_take_a_log_directive_and_demo_a_timeline_file() {
    assert_eq!(
        parse(&["--log", "capture=debug", "--timeline=out.json"]),
        Ok(Demo::Run(DemoArgs {
            log: Some("capture=debug".into()),
            timeline: Some(PathBuf::from("out.json")),
            ..DemoArgs::default()
        }))
    );
    let Ok(Bench::Run(args)) = bench(&["--log=info"]) else {
        panic!("parsed")
    };
    assert_eq!(args.log.as_deref(), Some("info"));
    for args in [&["--log", ""][..], &["--timeline="], &["--timeline"]] {
        let error = parse(args).expect_err("refused");
        assert!(
            error.0.contains(args[0].split('=').next().unwrap_or("")),
            "{error}"
        );
    }
    assert!(
        bench(&["--timeline", "x.json"]).is_err(),
        "bench draws no timeline"
    );
}
