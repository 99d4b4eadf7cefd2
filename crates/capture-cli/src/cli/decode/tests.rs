//! `capture decode`'s option parsing: sizes, buckets, log and timeline, and every
//! refusal named.

use super::*;

fn decode(args: &[&str]) -> Result<Decode, UsageError> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    parse_decode(&args)
}

#[test]
fn decode_takes_sizes_and_refuses_what_does_not_fit() {
    let Ok(Decode::Run(args)) = decode(&["--dim=64", "--layers", "2", "--tokens", "16"]) else {
        panic!("parsed")
    };
    assert_eq!(
        (args.backend, args.options.config.dim),
        (BackendName::Mock, 64)
    );
    assert_eq!((args.options.config.layers, args.options.tokens), (2, 16));
    assert_eq!(args.options.config.heads, 4);
    for (args, named) in [
        (&["--dim", "30"][..], "even head width"),
        (&["--tokens", "300"], "cache rows"),
        (&["--tokens", "0"], "\"0\""),
        (&["--seed", "x"], "\"x\""),
        (&["--device", "0"], "--device"),
        (&["--backend", "metal"], "\"metal\""),
    ] {
        let error = decode(args).expect_err("refused");
        assert!(error.0.contains(named), "{args:?}: {error}");
    }
    assert_eq!(decode(&["--dim", "7", "-h"]), Ok(Decode::Help));
}

#[test]
fn decode_takes_buckets_and_refuses_a_ladder_that_does_not_fit() {
    let Ok(Decode::Run(args)) = decode(&["--buckets", "1,2,4,8", "--replays=10"]) else {
        panic!("parsed")
    };
    let ladder = args.ladder.expect("a ladder");
    assert_eq!(ladder.buckets, [1, 2, 4, 8]);
    assert_eq!(
        (ladder.steps, ladder.replays, ladder.block_rows),
        (40, 10, 8)
    );
    assert_eq!(ladder.config, capture_decode::LadderOptions::CONFIG);
    let Ok(Decode::Run(args)) = decode(&["--buckets=2,3", "--dim", "32", "--steps", "33"]) else {
        panic!("parsed")
    };
    let ladder = args.ladder.expect("a ladder");
    assert_eq!((ladder.config.dim, ladder.steps), (32, 33));
    for (args, named) in [
        (&["--buckets", "4,2"][..], "ascending"),
        (&["--buckets", "0,1"], "ascending"),
        (&["--buckets", "1,128"], "64"),
        (&["--buckets", "1,x"], "\"x\""),
        (&["--buckets", "1", "--steps", "8"], "--steps"),
        (&["--buckets", "1", "--tokens", "8"], "--steps"),
        (&["--buckets", "1", "--block-rows", "99"], "block rows"),
        (&["--replays", "5"], "--buckets"),
    ] {
        let error = decode(args).expect_err("refused");
        assert!(error.0.contains(named), "{args:?}: {error}");
    }
}

#[test]
fn decode_takes_until_eos_with_an_end_token_and_a_check_interval() {
    let Ok(Decode::Run(args)) = decode(&["--until-eos", "--eos", "7", "--every=4"]) else {
        panic!("parsed")
    };
    let until = args.until.expect("until-eos");
    assert_eq!((until.eos, until.every), (Some(7), 4));
    let Ok(Decode::Run(args)) = decode(&["--until-eos"]) else {
        panic!("parsed")
    };
    assert_eq!(args.until.map(|u| (u.eos, u.every)), Some((None, 8)));
    for (args, named) in [
        (&["--eos", "3"][..], "--until-eos"),
        (&["--every", "3"], "--until-eos"),
        (&["--until-eos", "--eos", "512"], "vocabulary"),
        (&["--until-eos", "--every", "0"], "--every"),
        (&["--until-eos=1"], "no value"),
        (&["--until-eos", "--buckets", "1,2"], "pick one"),
    ] {
        let error = decode(args).expect_err("refused");
        assert!(error.0.contains(named), "{args:?}: {error}");
    }
}

#[test]
fn decode_takes_log_and_timeline_like_demo() {
    let Ok(Decode::Run(args)) = decode(&["--log", "debug", "--timeline=t.json", "--dim", "64"])
    else {
        panic!("parsed")
    };
    assert_eq!(args.log.as_deref(), Some("debug"));
    assert_eq!(args.timeline, Some(PathBuf::from("t.json")));
    assert_eq!(args.options.config.dim, 64);
    assert!(decode(&["--timeline"]).is_err(), "--timeline needs a path");
}
