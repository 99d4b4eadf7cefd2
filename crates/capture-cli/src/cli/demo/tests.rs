//! `capture demo`'s option parsing: defaults, both value forms, the device, help, and
//! every bad value named.

use super::*;

fn parse(args: &[&str]) -> Result<Demo, UsageError> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    parse_demo(&args)
}

#[test]
fn defaults_are_the_mock_512_kernels_and_20_replays() {
    assert_eq!(
        parse(&[]),
        Ok(Demo::Run(DemoArgs {
            backend: BackendName::Mock,
            device: None,
            kernels: 512,
            replays: 20,
            log: None,
            timeline: None,
        }))
    );
}

#[test]
fn options_take_a_separate_or_inline_value() {
    assert_eq!(
        parse(&["--backend", "cuda", "--kernels=64", "--replays", "3"]),
        Ok(Demo::Run(DemoArgs {
            backend: BackendName::Cuda,
            device: None,
            kernels: 64,
            replays: 3,
            log: None,
            timeline: None,
        }))
    );
}

#[test]
fn device_names_a_vulkan_device() {
    assert_eq!(
        parse(&["--backend", "vulkan", "--device=llvmpipe"]),
        Ok(Demo::Run(DemoArgs {
            backend: BackendName::Vulkan,
            device: Some("llvmpipe".into()),
            ..DemoArgs::default()
        }))
    );
    let error = parse(&["--device", "0"]).expect_err("refused");
    assert!(
        error
            .0
            .contains("--device is for --backend vulkan, not mock"),
        "{error}"
    );
}

#[test]
fn help_wins_over_other_options() {
    assert_eq!(parse(&["--kernels", "64", "-h"]), Ok(Demo::Help));
    assert_eq!(parse(&["--help"]), Ok(Demo::Help));
}

#[test]
fn bad_values_are_named() {
    for (args, named) in [
        (&["--kernels", "0"][..], "\"0\""),
        (&["--kernels", "1"], "\"1\""),
        (&["--kernels", "abc"], "\"abc\""),
        (&["--kernels", "-5"], "\"-5\""),
        (&["--kernels", "100001"], "\"100001\""),
        (&["--replays", "0"], "\"0\""),
        (&["--replays=x"], "\"x\""),
        (&["--backend", "metal"], "\"metal\""),
        (&["--frobnicate"], "\"--frobnicate\""),
        (&["--kernels"], "--kernels needs a value"),
        (&["--backend", "vulkan", "--device", ""], "--device"),
    ] {
        let error = parse(args).expect_err("refused");
        assert!(error.0.contains(named), "{args:?}: {error}");
    }
}
