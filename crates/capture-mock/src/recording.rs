//! `Recording`: a sealed mock graph, compact. The queue's operations carry their buffers
//! inline (so an eager launch allocates nothing); a graph keeps thousands of them for
//! its life, so at the seal each becomes a small [`Step`] naming its buffers, words,
//! kernel and work by index into tables the recording shares: a recorded launch costs
//! its step (32 bytes) plus 25 bytes a buffer and 8 a scalar word, not the queue's
//! inline form (hundreds of bytes).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use capture_core::{Access, ServerError};

use crate::kernels::{MockKernel, MockWork};
use crate::queue::{Engine, Op, Queue, run_kernel, run_work};
use crate::storage::MockResource;

/// No info buffer.
const NONE: u32 = u32::MAX;

/// One recorded operation, by index into its recording's tables.
#[derive(Debug)]
enum Step {
    /// `resources[from]` (host staging) into `resources[to]`.
    Copy { from: u32, to: u32 },
    /// `kernels[kernel]` over `resources[args..args + n]` (each with its access), its
    /// info words read from `resources[info]` (or none), then `words[words..+scalars]`.
    Kernel {
        kernel: u32,
        args: u32,
        n: u8,
        info: u32,
        words: u32,
        scalars: u16,
    },
    /// `works[work]` over `resources[args..args + n]`.
    Work { work: u32, args: u32, n: u8 },
    /// Another graph, replayed inside this one.
    Replay { graph: Arc<Recording>, times: u32 },
    /// A device-side wait recorded into the graph.
    Wait {
        queue: Arc<Queue>,
        upto: u64,
        reports: u64,
    },
}

/// A recorded graph, shared by the executable and every replay still queued.
#[derive(Debug)]
pub(crate) struct Recording {
    steps: Vec<Step>,
    resources: Vec<MockResource>,
    /// Each resource's access, beside it (a byte each, not padded into the resource).
    accesses: Vec<Access>,
    words: Vec<u64>,
    /// Each distinct kernel once.
    kernels: Vec<MockKernel>,
    works: Vec<MockWork>,
    /// Set when the executable is destroyed: a replay still queued then fails.
    pub(crate) destroyed: AtomicBool,
}

impl Recording {
    /// Compacts the operations a stream recorded, in order.
    pub(crate) fn compile(ops: Vec<Op>) -> Self {
        let mut r = Self {
            steps: Vec::with_capacity(ops.len()),
            resources: Vec::new(),
            accesses: Vec::new(),
            words: Vec::new(),
            kernels: Vec::new(),
            works: Vec::new(),
            destroyed: AtomicBool::new(false),
        };
        for op in ops {
            let step = match op {
                Op::Copy { from, to } => Step::Copy {
                    from: r.resource(from, Access::Read),
                    to: r.resource(to, Access::Write),
                },
                Op::Kernel {
                    kernel,
                    args,
                    info,
                    scalars,
                } => {
                    let (args, n) = r.args(args.iter().flatten().copied());
                    let info = info.map_or(NONE, |i| r.resource(i, Access::Read));
                    let words = r.words.len() as u32;
                    r.words.extend_from_slice(&scalars);
                    Step::Kernel {
                        kernel: r.kernel(kernel),
                        args,
                        n,
                        info,
                        words,
                        scalars: scalars.len() as u16,
                    }
                }
                Op::Work { work, args } => {
                    let (args, n) = r.args(args.iter().flatten().copied());
                    r.works.push(work);
                    Step::Work {
                        work: (r.works.len() - 1) as u32,
                        args,
                        n,
                    }
                }
                Op::Replay { graph, times } => Step::Replay { graph, times },
                Op::Wait {
                    queue,
                    upto,
                    reports,
                } => Step::Wait {
                    queue,
                    upto,
                    reports,
                },
            };
            r.steps.push(step);
        }
        r.steps.shrink_to_fit();
        r.resources.shrink_to_fit();
        r.accesses.shrink_to_fit();
        r.words.shrink_to_fit();
        r.kernels.shrink_to_fit();
        r.works.shrink_to_fit();
        r
    }

    fn resource(&mut self, resource: MockResource, access: Access) -> u32 {
        self.resources.push(resource);
        self.accesses.push(access);
        (self.resources.len() - 1) as u32
    }

    fn args(&mut self, args: impl Iterator<Item = (MockResource, Access)>) -> (u32, u8) {
        let start = self.resources.len() as u32;
        let mut n = 0u8;
        for (resource, access) in args {
            self.resource(resource, access);
            n += 1;
        }
        (start, n)
    }

    /// The index of `kernel`, added the first time it is seen.
    fn kernel(&mut self, kernel: MockKernel) -> u32 {
        let same = |k: &MockKernel| {
            k.name == kernel.name
                && std::ptr::fn_addr_eq(k.f, kernel.f)
                && k.signature == kernel.signature
        };
        match self.kernels.iter().position(same) {
            Some(i) => i as u32,
            None => {
                self.kernels.push(kernel);
                (self.kernels.len() - 1) as u32
            }
        }
    }

    /// The buffers `n` resources from `start`, with their accesses.
    fn buffers(
        &self,
        start: u32,
        n: u8,
    ) -> impl Iterator<Item = (MockResource, Access)> + Clone + '_ {
        let range = start as usize..start as usize + usize::from(n);
        self.resources[range.clone()]
            .iter()
            .copied()
            .zip(self.accesses[range].iter().copied())
    }

    /// Runs every step once on `queue`'s memory, in order.
    pub(crate) fn run(&self, queue: &Queue, engine: &mut Engine) -> Result<(), ServerError> {
        for step in &self.steps {
            match step {
                Step::Copy { from, to } => {
                    let (from, to) = (self.resources[*from as usize], self.resources[*to as usize]);
                    queue.execute(&Op::Copy { from, to }, engine)?;
                }
                Step::Kernel {
                    kernel,
                    args,
                    n,
                    info,
                    words,
                    scalars,
                } => {
                    let info = (*info != NONE).then(|| self.resources[*info as usize]);
                    let words =
                        &self.words[*words as usize..*words as usize + usize::from(*scalars)];
                    run_kernel(
                        &queue.dev,
                        engine,
                        &self.kernels[*kernel as usize],
                        self.buffers(*args, *n),
                        info,
                        words,
                    )?;
                }
                Step::Work { work, args, n } => {
                    run_work(
                        &queue.dev,
                        engine,
                        &self.works[*work as usize],
                        self.buffers(*args, *n),
                    )?;
                }
                Step::Replay { graph, times } => {
                    queue.execute(
                        &Op::Replay {
                            graph: Arc::clone(graph),
                            times: *times,
                        },
                        engine,
                    )?;
                }
                Step::Wait {
                    queue: waited,
                    upto,
                    reports,
                } => waited.wait_until(*upto, *reports, engine)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The compact form's promise: a recorded step is 32 bytes and a buffer 25 (its
    /// resource, its access), where the queue's inline form takes hundreds.
    #[test]
    fn a_recorded_step_stays_small() {
        assert_eq!(std::mem::size_of::<super::Step>(), 32);
        assert_eq!(std::mem::size_of::<crate::storage::MockResource>(), 24);
        assert_eq!(std::mem::size_of::<capture_core::Access>(), 1);
        assert!(std::mem::size_of::<crate::queue::Op>() > 500);
    }
}
