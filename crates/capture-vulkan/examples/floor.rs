//! The hand-written Vulkan floor's figures on this machine's device (the one
//! `CAPTURE_VULKAN_DEVICE` names, else the best-ranked): eager passes at each submission
//! cadence `Floor::cadences` lists, and replay passes, of the add-one chain, interleaved,
//! each from a reset and checked, and their medians per kernel.
//!
//! `cargo run --release -p capture-vulkan --example floor -- [ELEMENTS] [KERNELS] [PASSES]`
//! (defaults 64, 1000, 21).

use std::time::Duration;

use capture_vulkan::{Floor, FloorError, VulkanOptions};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn micros_per_kernel(d: Duration, kernels: usize) -> f64 {
    d.as_secs_f64() * 1e6 / kernels as f64
}

fn main() -> Result<(), FloorError> {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .map_or(default, |a| a.parse().expect("a whole number"))
    };
    let (elements, kernels, passes) = (arg(1, 64), arg(2, 1000) as usize, arg(3, 21) as usize);
    let mut floor = Floor::new(&VulkanOptions::from_env(), elements, kernels)?;
    println!(
        "device: {}; {}; E={elements} K={kernels}, grid {:?}, {passes} passes each",
        floor.device_name(),
        floor.memory_choice(),
        floor.grid()
    );
    let start: Vec<f32> = (0..elements).map(|i| i as f32).collect();
    let cadences = floor.cadences();
    // Warm-up: one of each.
    for &every in &cadences {
        floor.set_submit_every(every)?;
        floor.reset(&start)?;
        floor.eager_pass()?;
    }
    floor.reset(&start)?;
    floor.replay_pass()?;
    let mut eager = vec![Vec::new(); cadences.len()];
    let mut replay = Vec::new();
    for _ in 0..passes {
        for (i, &every) in cadences.iter().enumerate() {
            floor.set_submit_every(every)?;
            floor.reset(&start)?;
            eager[i].push(floor.eager_pass()?);
            assert_eq!(floor.output()[0], start[0] + kernels as f32);
        }
        floor.reset(&start)?;
        replay.push(floor.replay_pass()?);
        assert_eq!(floor.output()[0], start[0] + kernels as f32);
    }
    let mut rows: Vec<(String, Vec<_>)> = cadences
        .iter()
        .zip(eager)
        .map(|(every, passes)| {
            let name = if *every >= kernels {
                "eager, whole pass".to_string()
            } else {
                format!("eager, every {every}")
            };
            (name, passes)
        })
        .collect();
    rows.push(("replay".into(), replay));
    for (name, passes) in rows {
        let enqueue = median(passes.iter().map(|p| p.enqueue).collect());
        let total = median(passes.iter().map(|p| p.total).collect());
        println!(
            "{name:>18}: {:8.3} µs/kernel total, {:8.3} µs/kernel enqueue (median pass {:?})",
            micros_per_kernel(total, kernels),
            micros_per_kernel(enqueue, kernels),
            total
        );
    }
    Ok(())
}
