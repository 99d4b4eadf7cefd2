//! `capture decode`'s three checks on a tiny configuration (2 layers, dim 64, 16
//! tokens): on the mock, and on Vulkan (lavapipe in CI; `SKIP:` without a Vulkan
//! device unless `CAPTURE_REQUIRE_VULKAN=1`; the facade's `vulkan` feature, which
//! `cargo xtask test` turns on for this binary, with `cuda`). The full-size workload is
//! the program's (`capture decode`), not a test's.
#![cfg(any(feature = "mock", feature = "vulkan", feature = "cuda"))]

use capture_decode::{
    Config, DecodeBackend, DecodeOptions, DecodeReport, LadderOptions, LadderReport, UNTIL_MODES,
    UntilOptions, UntilReport, render, render_ladder, render_until, run, run_ladder, run_until,
};

/// The tiny configuration.
fn tiny() -> DecodeOptions {
    DecodeOptions {
        config: Config {
            dim: 64,
            layers: 2,
            heads: 4,
            vocab: 512,
            context: 64,
        },
        tokens: 16,
        ..DecodeOptions::default()
    }
}

/// Runs the tiny configuration and asserts every check, each by name.
fn all_checks_hold<B: DecodeBackend>(backend: B) -> DecodeReport {
    let report = run(backend, tiny()).expect("the decoder runs");
    let text = render(&report);
    assert_eq!(report.eager.ids.len(), 16, "{text}");
    assert_eq!(report.eager.ids, report.replayed.ids, "{text}");
    assert_eq!(report.eager.ids, report.one_call.ids, "{text}");
    let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(report.replayed.logits.len(), 16 * 512, "{text}");
    assert_eq!(
        bits(&report.eager.logits),
        bits(&report.replayed.logits),
        "{text}"
    );
    // The host choosing the position through the slotted graph's slots, and a graph
    // captured per token: the same ids and logits, bit for bit.
    for (mode, g) in [
        ("updated", &report.updated),
        ("re-captured", &report.recaptured),
    ] {
        assert_eq!(report.eager.ids, g.ids, "{mode}\n{text}");
        assert_eq!(
            bits(&report.eager.logits),
            bits(&g.logits),
            "{mode}\n{text}"
        );
    }
    assert!(report.host.passed(), "{:?}\n{text}", report.host);
    for check in report.checks() {
        assert!(check.passed, "{}: {}\n{text}", check.name, check.detail);
    }
    // The step is one graph of every kernel, holding the user's weights and cache.
    assert_eq!(report.ledger.launches, report.kernels_per_step, "{text}");
    assert_eq!(report.kernels_per_step, 1 + 15 * 2 + 4);
    // The core's split, cross-checked against the program's own count: the user's
    // buffers it kept, and the intermediates whose handles it dropped after capture.
    let (l, f) = (report.ledger.clone(), report.footprint);
    assert!(f.weights > 0 && f.cache == 2 * 2 * 64 * 64 * 4, "{text}");
    assert_eq!(
        l.user_bytes,
        f.weights + f.cache + f.io + f.workspace,
        "{text}"
    );
    assert!(f.scratch > 0, "{text}");
    assert_eq!(l.graph_only_bytes, f.scratch, "{text}");
    // The kernels take their dimensions and constants as scalars by value, recorded
    // with each launch: no info words.
    assert_eq!((l.info_entries, l.info_bytes), (0, 0), "{text}");
    assert_eq!(
        l.user_bytes + l.graph_only_bytes + l.info_bytes,
        l.device_bytes,
        "{text}"
    );
    report
}

#[cfg(feature = "mock")]
#[test]
fn decode_on_the_mock_passes_all_three_checks() {
    let report = all_checks_hold(capture_graphs::mock::MockBackend::new());
    // The mock's kernels and the host reference sum in the same order.
    assert_eq!(report.host.worst, 0.0, "{}", render(&report));
}

#[cfg(feature = "mock")]
#[test]
fn each_check_fails_on_a_report_that_breaks_it() {
    use capture_decode::{Weights, host_check};
    let options = tiny();
    let good = run(capture_graphs::mock::MockBackend::new(), options).expect("runs");
    let failing = |r: &DecodeReport| -> Vec<&'static str> {
        r.checks()
            .into_iter()
            .filter(|c| !c.passed)
            .map(|c| c.name)
            .collect()
    };
    assert!(failing(&good).is_empty());

    let mut ids = good.clone();
    ids.replayed.ids[7] ^= 1;
    assert_eq!(failing(&ids), ["eager and replayed ids identical"]);

    let mut one_call = good.clone();
    one_call.one_call.ids.pop();
    assert_eq!(failing(&one_call), ["eager and replayed ids identical"]);
    let mut one_call = good.clone();
    one_call.one_call.logits[0] = -one_call.one_call.logits[0];
    assert_eq!(
        failing(&one_call),
        ["logits of every step bit for bit, eager against replayed"]
    );

    let mut updated = good.clone();
    updated.updated.logits[11 * 512 + 7] += 1e-6;
    assert_eq!(
        failing(&updated),
        ["logits of every step bit for bit, eager against replayed"]
    );
    let mut recaptured = good.clone();
    recaptured.recaptured.ids[15] ^= 2;
    assert_eq!(failing(&recaptured), ["eager and replayed ids identical"]);

    let mut bits = good.clone();
    bits.replayed.logits[3 * 512 + 5] =
        f32::from_bits(bits.replayed.logits[3 * 512 + 5].to_bits() ^ 1);
    assert_eq!(
        failing(&bits),
        ["logits of every step bit for bit, eager against replayed"]
    );

    // The host reference refuses a logit off by 1% and an id it disagrees with.
    let weights = Weights::random(&options.config, options.seed);
    let mut off = good.replayed.clone();
    off.logits[9 * 512 + 100] *= 1.01;
    off.logits[9 * 512 + 100] += 0.01;
    let verdict = host_check(&options, &weights, &good.prompt, &off);
    assert!(!verdict.passed() && verdict.worst_step == 9, "{verdict:?}");
    let mut wrong = good.replayed.clone();
    wrong.ids[0] = (wrong.ids[0] + 1) % 512;
    let verdict = host_check(&options, &weights, &good.prompt, &wrong);
    assert_eq!(
        verdict.id_mismatches.first().map(|m| m.0),
        Some(0),
        "{verdict:?}"
    );
}

#[cfg(feature = "vulkan")]
#[test]
fn decode_on_vulkan_passes_all_three_checks() {
    use capture_graphs::vulkan::{VulkanBackend, VulkanOptions};
    let required = std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
    match VulkanBackend::new(VulkanOptions::from_env()) {
        Ok(backend) => {
            let report = all_checks_hold(backend);
            println!("{}", render(&report));
        }
        Err(why) => {
            assert!(!required, "CAPTURE_REQUIRE_VULKAN=1 but {why}");
            println!("SKIP: decode on vulkan: {why}");
        }
    }
}

/// The bucket ladder (`--buckets 1,2,4,8`) with its defaults, every check held.
fn ladder_holds<B: DecodeBackend>(backend: B) -> LadderReport {
    let report = run_ladder(backend, LadderOptions::new(vec![1, 2, 4, 8])).expect("runs");
    let text = render_ladder(&report);
    for check in report.checks() {
        assert!(check.passed, "{}: {}\n{text}", check.name, check.detail);
    }
    // One pool holds the ladder in its largest member's bytes; separate pools pay
    // every bucket (1 + 2 + 4 + 8 slots against 8).
    assert_eq!(report.shared_bytes, report.largest_alone(), "{text}");
    assert_eq!(
        report.separate_total() * 8,
        report.largest_alone() * 15,
        "{text}"
    );
    assert!(
        text.contains("shared pool:") && text.contains("separate pools:"),
        "{text}"
    );
    assert!(text.contains("separate / shared = 1.88"), "{text}");
    report
}

#[cfg(feature = "mock")]
#[test]
fn the_bucket_ladder_on_the_mock_holds_every_check() {
    let report = ladder_holds(capture_graphs::mock::MockBackend::new());
    assert!(report.path.len() >= 32);
}

#[cfg(feature = "mock")]
#[test]
fn each_ladder_check_fails_on_a_report_that_breaks_it() {
    let mut options = LadderOptions::new(vec![1, 2, 4]);
    options.replays = 8;
    let good = run_ladder(capture_graphs::mock::MockBackend::new(), options).expect("runs");
    let failing = |r: &LadderReport| -> Vec<&'static str> {
        r.checks()
            .into_iter()
            .filter(|c| !c.passed)
            .map(|c| c.name)
            .collect()
    };
    assert!(failing(&good).is_empty(), "{}", render_ladder(&good));
    let mut r = good.clone();
    r.capture_failures.push("bucket 4: refused".into());
    assert_eq!(failing(&r), ["every bucket captures"]);
    let mut r = good.clone();
    r.path.retain(|&(_, b)| b != 4);
    assert!(failing(&r).contains(&"the schedule visits every bucket, up and down"));
    let mut r = good.clone();
    r.eager_mismatches.push((3, 0));
    assert_eq!(
        failing(&r),
        ["replayed logits bit for bit, eager against the shared ladder"]
    );
    let mut r = good.clone();
    r.separate_mismatches.push((3, 0));
    assert_eq!(
        failing(&r),
        ["the shared ladder bit for bit against separate pools"]
    );
    let mut r = good.clone();
    r.descending_bytes = r.largest_alone() * 2;
    assert_eq!(
        failing(&r),
        ["the shared pool holds about its largest member"]
    );
    let mut r = good;
    r.report_change = Some(("a".into(), "b".into()));
    assert_eq!(
        failing(&r),
        ["further replays leave the memory report unchanged"]
    );
}

#[cfg(feature = "vulkan")]
#[test]
fn the_bucket_ladder_on_vulkan_holds_every_check() {
    use capture_graphs::vulkan::{VulkanBackend, VulkanOptions};
    let required = std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
    match VulkanBackend::new(VulkanOptions::from_env()) {
        Ok(backend) => println!("{}", render_ladder(&ladder_holds(backend))),
        Err(why) => {
            assert!(!required, "CAPTURE_REQUIRE_VULKAN=1 but {why}");
            println!("SKIP: the bucket ladder on vulkan: {why}");
        }
    }
}

/// The slotted step's graph: its two slots listed as recorded (the position a `u32`
/// scalar of one launch, the attention grid of every layer's score launch, bounded by
/// the context); an update within them accepted, and one past them refused naming the
/// slot, changing nothing.
#[cfg(feature = "mock")]
#[test]
fn the_slotted_step_names_its_position_and_attention_grid_and_refuses_past_the_context() {
    use capture_decode::{ATTENTION_SLOT, DeviceModel, POSITION_SLOT, Weights};
    use capture_graphs::{Device, DeviceConfig, ServerError, SlotKind, StreamId};
    let s = StreamId::new(0);
    let options = tiny();
    let config = options.config;
    let dev = Device::new(
        capture_graphs::mock::MockBackend::new(),
        DeviceConfig::new(),
    )
    .unwrap();
    let weights = Weights::random(&config, options.seed);
    let model = DeviceModel::new(&dev, s, config, &weights).unwrap();
    let graph = dev.capture(s, |d| model.slotted_step(d, 3, true)).unwrap();
    let slots = graph.slots().unwrap();
    let find = |name: &str| {
        slots
            .iter()
            .find(|i| i.name.as_str() == name)
            .unwrap_or_else(|| panic!("no slot {name}: {slots:?}"))
    };
    let pos = find(POSITION_SLOT);
    assert_eq!(
        pos.kind,
        SlotKind::Scalar {
            bytes: 4,
            element: Some(capture_graphs::ScalarType::U32)
        },
        "{slots:?}"
    );
    assert_eq!(pos.launches, [0], "the first launch sets the position");
    let attn = find(ATTENTION_SLOT);
    assert_eq!(attn.launches.len(), config.layers as usize, "{slots:?}");
    let SlotKind::Grid { max, .. } = attn.kind else {
        panic!("{slots:?}");
    };
    // The mock's blocks are 256 threads: the whole context's (row, head) pairs.
    assert_eq!(max, [(config.heads * config.context).div_ceil(256), 1, 1]);
    model.update(&graph, config.context - 1).unwrap();
    let past = graph.set_grid(ATTENTION_SLOT, [max[0] + 1, 1, 1]);
    assert!(
        matches!(&past, Err(ServerError::SlotRefused(r)) if r.slot.as_str() == ATTENTION_SLOT),
        "{past:?}"
    );
    let wrong = graph.set(POSITION_SLOT, 7u64);
    assert!(
        matches!(wrong, Err(ServerError::SlotRefused(_))),
        "{wrong:?}"
    );
    dev.replay(s, &graph, 1).unwrap();
    dev.drop_graph(graph).unwrap();
}

/// A short attention grid shows on the mock as it does on a GPU (issue 45, item 9): the
/// mock's score kernel covers only the (row, head) pairs its grid's invocations reach,
/// so a slotted step whose grid is set short computes other logits than the same step
/// with its grid covering the position (before, the mock ran every kernel over its whole
/// buffers and a short grid passed).
#[cfg(feature = "mock")]
#[test]
fn a_short_attention_grid_gives_other_logits_on_the_mock_as_on_a_gpu() {
    use capture_decode::{ATTENTION_SLOT, Config, DeviceModel, Weights};
    use capture_graphs::{Device, DeviceConfig, StreamId};
    let s = StreamId::new(0);
    // 4 heads over 128 rows: 512 (row, head) pairs, two of the mock's 256-thread blocks.
    let config = Config {
        dim: 64,
        layers: 1,
        heads: 4,
        vocab: 64,
        context: 128,
    };
    let dev = Device::new(
        capture_graphs::mock::MockBackend::new(),
        DeviceConfig::new(),
    )
    .unwrap();
    let weights = Weights::random(&config, 7);
    let model = DeviceModel::new(&dev, s, config, &weights).unwrap();
    let graph = dev.capture(s, |d| model.slotted_step(d, 3, true)).unwrap();
    let at = |pos: u32, short: bool| -> Vec<u32> {
        model.set_state(&dev, pos, 5).unwrap();
        model.update(&graph, pos).unwrap();
        if short {
            graph.set_grid(ATTENTION_SLOT, [1, 1, 1]).unwrap();
        }
        dev.replay(s, &graph, 1).unwrap();
        let row = pos as u64 * config.vocab as u64 * 4;
        let bytes = dev
            .read_range(s, &model.logit_history, row, config.vocab as u64 * 4)
            .unwrap();
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    // A step at row 70 leaves the scores past it zero; at row 100 one block covers
    // rows 0..64 only, so rows 64..=100 keep those zeros unless the grid covers them.
    at(70, false);
    let short = at(100, true);
    let covered = at(100, false);
    assert_ne!(
        short, covered,
        "a grid one block short computed the same logits as one covering the position"
    );
    assert_eq!(covered, at(100, false), "the covered step is deterministic");
}

/// Decodes the tiny configuration until its end token and asserts every check.
fn until_holds<B: DecodeBackend>(backend: B) -> UntilReport {
    let options = UntilOptions {
        decode: tiny(),
        ..UntilOptions::default()
    };
    let report = run_until(backend, options).expect("the decoder runs");
    println!("{}", render_until(&report));
    for check in report.checks() {
        assert!(check.passed, "{}: {}", check.name, check.detail);
    }
    let eager = &report.modes[0];
    assert_eq!(report.modes.len(), UNTIL_MODES.len());
    assert!(
        eager.ids.len() < tiny().tokens as usize,
        "the end token comes before the most tokens: {:?}",
        eager.ids
    );
    // replay x 8 ran past the end token; the loop ran exactly the sequence.
    let chunks = report.mode(UNTIL_MODES[2]).expect("the chunked mode");
    assert!(chunks.steps as usize >= eager.ids.len());
    assert_eq!(report.iterations as usize, eager.ids.len());
    report
}

#[cfg(feature = "mock")]
#[test]
fn decode_until_the_end_token_on_the_mock_stops_on_the_device() {
    let report = until_holds(capture_graphs::mock::MockBackend::new());
    // A report whose loop ran one more iteration fails its check.
    let mut broken = report.clone();
    broken.iterations += 1;
    assert!(!broken.passed());
    let mut broken = report;
    broken.modes[3].ids.push(0);
    assert!(!broken.passed());
}

#[cfg(feature = "vulkan")]
#[test]
fn decode_until_the_end_token_on_vulkan_stops_on_the_device() {
    use capture_graphs::vulkan::{VulkanBackend, VulkanOptions};
    let required = std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
    match VulkanBackend::new(VulkanOptions::from_env()) {
        Ok(backend) => {
            until_holds(backend);
        }
        Err(why) => {
            assert!(!required, "CAPTURE_REQUIRE_VULKAN=1 but {why}");
            println!("SKIP: decode until on vulkan: {why}");
        }
    }
}
