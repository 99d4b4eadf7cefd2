//! Labels: a buffer or graph the user names shows its label beside its id in errors,
//! the trace and the memory report, deterministically.

use capture_core::{Arg, Chain, DeviceConfig, MemoryConfig, ServerError};

use crate::{S0, S1, add_one, device, device_with, filled, kernels, suite_lock};

fn text(e: &ServerError) -> String {
    Chain(e).to_string()
}

#[test]
fn an_unwritten_labelled_input_is_named_with_the_launch_and_its_kernel() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = dev.alloc(S0, 16).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    dev.label(&x, "prompt ids").unwrap();
    let err = add_one(&dev, &k, S0, &x, &y).unwrap_err();
    let message = text(&err);
    assert!(
        message.contains("add_one") && message.contains(&format!("{} \"prompt ids\"", x.id())),
        "{message}"
    );
    // Reading the output the skipped launch claimed names the input in its chain.
    let read = dev.read(S0, &y).unwrap_err();
    assert!(
        text(&read).contains(&format!("(input {} \"prompt ids\"", x.id())),
        "{}",
        text(&read)
    );
    if let ServerError::Unwritten(u) = &err {
        assert_eq!(u.label.as_deref(), Some("prompt ids"));
    } else {
        panic!("{err:?}");
    }
}

#[test]
fn a_binding_past_the_end_names_the_label() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = dev.alloc(S0, 16).unwrap();
    dev.label(&x, "kv cache").unwrap();
    let err = dev.write(S0, &x, 12, [0u8; 8]).unwrap_err();
    assert!(
        text(&err).contains(&format!("{} \"kv cache\"", x.id())),
        "{}",
        text(&err)
    );
}

#[test]
fn the_trace_shows_labels_from_the_labelling_on_and_renders_alike_every_run() {
    let run = || {
        let (dev, _) = device();
        let k = kernels(&dev);
        let x = filled(&dev, S0, &[1, 2]);
        let y = dev.alloc(S0, 8).unwrap();
        add_one(&dev, &k, S0, &x, &y).unwrap();
        dev.label(&x, "input").unwrap();
        dev.label(&y, "output").unwrap();
        let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
        dev.label_graph(&g, "step").unwrap();
        dev.replay(S0, &g, 1).unwrap();
        dev.read(S0, &y).unwrap();
        (dev.trace().render(), dev.trace().to_string(), x.id(), g)
    };
    let _suite = suite_lock();
    let (first, displayed, x, g) = run();
    assert_eq!(first, displayed, "Trace's Display is its rendering");
    assert_eq!(first, run().0, "deterministic");
    let lines: Vec<&str> = first.lines().collect();
    let labelled = lines
        .iter()
        .position(|l| l.contains(&format!("label {x} \"input\"")))
        .expect("the label event");
    assert!(
        lines[..labelled].iter().all(|l| !l.contains("\"input\"")),
        "no label before the labelling:\n{first}"
    );
    assert!(
        first.contains(&format!("replay {g} \"step\"")),
        "the graph's label beside its id:\n{first}"
    );
    assert!(
        lines[labelled + 1..]
            .iter()
            .any(|l| l.contains(&format!("{x} \"input\"["))),
        "later lines name the buffer with its label:\n{first}"
    );
}

#[test]
fn a_graphs_label_is_in_its_ledger_the_report_and_its_errors() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2, 3, 4]);
    let y = dev.alloc(S0, 16).unwrap();
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    dev.label_graph(&g, "decode b=1").unwrap();
    assert_eq!(dev.graph(&g).unwrap().label.as_deref(), Some("decode b=1"));
    let report = dev.memory_report().to_string();
    assert!(
        report.contains(&format!("{g} \"decode b=1\": device")),
        "{report}"
    );
    let err = dev.replay(S1, &g, 1).unwrap_err();
    assert!(
        text(&err).contains(&format!("of {g} \"decode b=1\": a graph replays only")),
        "{}",
        text(&err)
    );
    // The graph and its label are fields of the error, not only its text.
    let subject = err.subject().expect("the error names the graph");
    assert_eq!(subject.graph_id(), Some(g.id()));
    assert_eq!(subject.label(), Some("decode b=1"));
    dev.drop_graph(g).unwrap();
}

#[test]
fn an_out_of_memory_error_names_each_graph_with_its_label() {
    let _suite = suite_lock();
    let config = DeviceConfig::new().device_memory(MemoryConfig::limited(1 << 20).unwrap());
    let (dev, _) = device_with(config);
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 64]);
    let y = dev.alloc(S0, 256).unwrap();
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    dev.label_graph(&g, "prefill").unwrap();
    let err = dev.alloc(S0, 4 << 20).unwrap_err();
    assert!(
        matches!(err, ServerError::OutOfMemory(_)) && text(&err).contains("\"prefill\""),
        "{}",
        text(&err)
    );
}

#[test]
fn a_bad_label_or_a_foreign_buffer_is_refused_and_nothing_changes() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let (other, _) = device();
    let x = dev.alloc(S0, 16).unwrap();
    dev.label(&x, "good").unwrap();
    for bad in ["", "with \"quotes\"", "line\nbreak"] {
        let err = dev.label(&x, bad).unwrap_err();
        assert!(
            matches!(err, ServerError::InvalidArgument { what: "label", .. }),
            "{err:?}"
        );
    }
    assert_eq!(dev.label_of(&x).as_deref(), Some("good"));
    assert!(other.label(&x, "theirs").is_err());
    assert!(other.label_of(&x).is_none());
    // A new label replaces the old one.
    dev.label(&x, "better").unwrap();
    assert_eq!(dev.label_of(&x).as_deref(), Some("better"));
}

#[test]
fn a_label_goes_with_its_memory() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = dev.alloc(S0, 16).unwrap();
    let id = x.id();
    dev.label(&x, "temporary").unwrap();
    drop(x);
    dev.sync(S0).unwrap();
    dev.cleanup().unwrap();
    // The id is never handed out again; a fresh buffer has no label.
    let fresh = dev.alloc(S0, 16).unwrap();
    assert_ne!(fresh.id(), id);
    assert!(dev.label_of(&fresh).is_none());
    let launch = dev.launch(
        S0,
        &kernels(&dev).add_one,
        [1, 1, 1],
        &[Arg::read(&fresh), Arg::write(&fresh)],
        &[],
    );
    assert!(!text(&launch.unwrap_err()).contains("temporary"));
}
