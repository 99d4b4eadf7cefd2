//! The helpers every command's parsing shares, as the commands see them: `--log` and
//! `--timeline` taken by demo (capture-bench's own tests: taken and refused by bench).

use std::path::PathBuf;

use super::demo::{Demo, DemoArgs, parse_demo};

fn parse(args: &[&str]) -> Result<Demo, crate::args::UsageError> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    parse_demo(&args)
}

#[test]
fn demo_takes_a_log_directive_and_a_timeline_file() {
    assert_eq!(
        parse(&["--log", "capture=debug", "--timeline=out.json"]),
        Ok(Demo::Run(DemoArgs {
            log: Some("capture=debug".into()),
            timeline: Some(PathBuf::from("out.json")),
            ..DemoArgs::default()
        }))
    );
    for args in [&["--log", ""][..], &["--timeline="], &["--timeline"]] {
        let error = parse(args).expect_err("refused");
        assert!(
            error.0.contains(args[0].split('=').next().unwrap_or("")),
            "{error}"
        );
    }
}
