//! `capture timeline-svg`'s option parsing: exactly two files, help, and the refusals.

use super::*;

#[test]
fn timeline_svg_takes_two_files() {
    let svg = |args: &[&str]| parse_svg(&args.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
    assert_eq!(
        svg(&["in.json", "out.svg"]),
        Ok(Svg::Run(SvgArgs {
            input: PathBuf::from("in.json"),
            output: PathBuf::from("out.svg"),
        }))
    );
    assert_eq!(svg(&["in.json", "--help"]), Ok(Svg::Help));
    for args in [&["in.json"][..], &["a", "b", "c"], &["--width", "3"]] {
        assert!(svg(args).is_err(), "{args:?}");
    }
}
