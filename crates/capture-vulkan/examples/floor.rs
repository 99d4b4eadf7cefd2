//! The hand-written Vulkan floor's figures on this machine's device (the one
//! `CAPTURE_VULKAN_DEVICE` names, else the best-ranked): eager and replay passes of the
//! add-one chain, interleaved, each from a reset, and their medians per kernel.
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
    // Warm-up: one of each.
    for replay in [false, true] {
        floor.reset(&start)?;
        if replay {
            floor.replay_pass()?;
        } else {
            floor.eager_pass()?;
        }
    }
    let (mut eager, mut replay) = (Vec::new(), Vec::new());
    for _ in 0..passes {
        floor.reset(&start)?;
        eager.push(floor.eager_pass()?);
        assert_eq!(floor.output()[0], start[0] + kernels as f32);
        floor.reset(&start)?;
        replay.push(floor.replay_pass()?);
        assert_eq!(floor.output()[0], start[0] + kernels as f32);
    }
    for (name, passes) in [("eager", eager), ("replay", replay)] {
        let enqueue = median(passes.iter().map(|p| p.enqueue).collect());
        let total = median(passes.iter().map(|p| p.total).collect());
        println!(
            "{name:>6}: {:8.3} µs/kernel total, {:8.3} µs/kernel enqueue (median pass {:?})",
            micros_per_kernel(total, kernels),
            micros_per_kernel(enqueue, kernels),
            total
        );
    }
    Ok(())
}
