//! `--competitors N`: CPU-bound threads that run beside a benchmark, so its figures show
//! what a busy machine (an inference server's, say) does to them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Busy threads, stopped and joined on drop.
pub(crate) struct Competitors {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<u64>>,
}

impl Competitors {
    /// Starts `n` threads that spin on arithmetic until dropped.
    pub(crate) fn start(n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|i| {
                let stop = Arc::clone(&stop);
                std::thread::Builder::new()
                    .name(format!("competitor-{i}"))
                    .spawn(move || {
                        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
                        while !stop.load(Ordering::Relaxed) {
                            for _ in 0..1024 {
                                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                            }
                            x = std::hint::black_box(x);
                        }
                        x
                    })
                    .expect("a competitor thread starts")
            })
            .collect();
        Self { stop, threads }
    }

    /// How many run.
    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }
}

impl Drop for Competitors {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
