//! `Recording`: a sealed mock graph, compact. The queue's operations carry their buffers
//! inline (so an eager launch allocates nothing); a graph keeps thousands of them for
//! its life, so at the seal each launch becomes a small [`Step`] naming its buffers,
//! words, kernel and work by index into tables the recording shares: a recorded launch
//! costs its step (24 bytes) plus 25 bytes a buffer and 8 a scalar word, not the
//! queue's inline form (hundreds of bytes). The rarer operations (a recorded copy, a
//! nested replay, a device-side wait) stay in the queue's own form `O`, boxed.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use capture_core::{Access, ServerError};

use crate::exec::{Engine, run_kernel, run_work};
use crate::kernels::{MockKernel, MockWork};
use crate::storage::{MockResource, Pages};

/// No info buffer.
const NONE: u32 = u32::MAX;

/// One recorded operation, by index into its recording's tables.
#[derive(Debug, Clone)]
enum Step<O> {
    /// `kernels[kernel]` over `resources[args..args + n]` (each with its access), its
    /// info words read from `resources[info]` (or none), then `words[words..+scalars]`.
    Kernel {
        kernel: u32,
        args: u32,
        n: u8,
        info: u32,
        words: u32,
        scalars: u16,
        /// Its grid, `grids[grid]`.
        grid: u32,
    },
    /// `works[work]` over `resources[args..args + n]`.
    Work { work: u32, args: u32, n: u8 },
    /// Any other operation, in the queue's own form.
    Other(Box<O>),
}

/// A recorded graph, shared by the executable and every replay still queued; `O` is
/// the queue's operation, for what is not a launch. An update of a launch while a
/// replay still holds the recording changes a copy (the replay keeps what it was
/// enqueued with); every copy shares the one `destroyed` flag.
#[derive(Debug, Clone)]
pub(crate) struct Recording<O> {
    steps: Vec<Step<O>>,
    resources: Vec<MockResource>,
    /// Each resource's access, beside it (a byte each, not padded into the resource).
    accesses: Vec<Access>,
    words: Vec<u64>,
    /// Each recorded launch's grid.
    grids: Vec<[u32; 3]>,
    /// Each distinct kernel once.
    kernels: Vec<MockKernel>,
    works: Vec<MockWork>,
    /// Set when the executable is destroyed: a replay still queued then fails.
    pub(crate) destroyed: Arc<AtomicBool>,
    /// For a recording whose lanes were reordered: each recorded launch's step among
    /// the launches and work, by its place in the recording.
    order: Option<Vec<u32>>,
}

impl<O> Recording<O> {
    /// An empty recording with room for `steps` steps.
    pub(crate) fn with_capacity(steps: usize) -> Self {
        Self {
            steps: Vec::with_capacity(steps),
            resources: Vec::new(),
            accesses: Vec::new(),
            words: Vec::new(),
            grids: Vec::new(),
            kernels: Vec::new(),
            works: Vec::new(),
            destroyed: Arc::new(AtomicBool::new(false)),
            order: None,
        }
    }

    /// Notes where each recorded launch (by its place in the recording) ran to, once
    /// lanes were put in order.
    pub(crate) fn set_order(&mut self, order: Vec<u32>) {
        self.order = Some(order);
    }

    /// Records a launch of `kernel` over `args`, its info words in `info`, then `scalars`,
    /// on `grid`.
    pub(crate) fn kernel(
        &mut self,
        kernel: MockKernel,
        args: impl Iterator<Item = (MockResource, Access)>,
        info: Option<MockResource>,
        scalars: &[u64],
        grid: [u32; 3],
    ) {
        self.grids.push(grid);
        let grid = (self.grids.len() - 1) as u32;
        let (args, n) = self.args(args);
        let info = info.map_or(NONE, |i| self.resource(i, Access::Read));
        let words = self.words.len() as u32;
        self.words.extend_from_slice(scalars);
        let kernel = self.kernel_index(kernel);
        self.steps.push(Step::Kernel {
            kernel,
            args,
            n,
            info,
            words,
            scalars: scalars.len() as u16,
            grid,
        });
    }

    /// Records the user's `work` over `args`.
    pub(crate) fn work(
        &mut self,
        work: MockWork,
        args: impl Iterator<Item = (MockResource, Access)>,
    ) {
        let (args, n) = self.args(args);
        self.works.push(work);
        self.steps.push(Step::Work {
            work: (self.works.len() - 1) as u32,
            args,
            n,
        });
    }

    /// Records any other operation as it is.
    pub(crate) fn other(&mut self, op: O) {
        self.steps.push(Step::Other(Box::new(op)));
    }

    /// Sets recorded launch `node` (counting launches and work from 0) to run `kernel`
    /// over `args`, its info words from `info`, then `scalars`, on `grid`: the parameters
    /// of the same launch, given again. Refused, changing nothing, when `node` is no kernel
    /// launch of this recording or the launch has another shape (kernel, buffer count,
    /// info buffer, scalar words).
    pub(crate) fn update_kernel(
        &mut self,
        node: u64,
        kernel: MockKernel,
        args: &[(MockResource, Access)],
        info: Option<MockResource>,
        scalars: &[u64],
        grid: [u32; 3],
    ) -> Result<(), String> {
        let at = match &self.order {
            Some(order) => order.get(node as usize).map(|&at| u64::from(at)),
            None => Some(node),
        };
        let step = at
            .and_then(|at| {
                self.steps
                    .iter()
                    .filter(|s| !matches!(s, Step::Other(_)))
                    .nth(at as usize)
            })
            .ok_or_else(|| format!("the graph has no recorded launch {node}"))?;
        let Step::Kernel {
            kernel: k,
            args: at,
            n,
            info: info_at,
            words,
            scalars: count,
            grid: grid_at,
        } = *step
        else {
            return Err(format!("recorded launch {node} is work, not a kernel"));
        };
        let recorded = self.kernels[k as usize];
        if recorded.name != kernel.name || !std::ptr::fn_addr_eq(recorded.f, kernel.f) {
            return Err(format!(
                "recorded launch {node} runs {}, not {}",
                recorded.name, kernel.name
            ));
        }
        if args.len() != usize::from(n)
            || scalars.len() != usize::from(count)
            || info.is_some() != (info_at != NONE)
        {
            return Err(format!(
                "recorded launch {node} has another shape than the update gives"
            ));
        }
        for (i, (resource, access)) in args.iter().enumerate() {
            self.resources[at as usize + i] = *resource;
            self.accesses[at as usize + i] = *access;
        }
        if let Some(info) = info {
            self.resources[info_at as usize] = info;
        }
        self.words[words as usize..words as usize + scalars.len()].copy_from_slice(scalars);
        self.grids[grid_at as usize] = grid;
        Ok(())
    }

    /// Gives back the tables' spare room: the graph keeps exactly what it recorded.
    pub(crate) fn seal(mut self) -> Self {
        self.steps.shrink_to_fit();
        self.resources.shrink_to_fit();
        self.accesses.shrink_to_fit();
        self.words.shrink_to_fit();
        self.grids.shrink_to_fit();
        self.kernels.shrink_to_fit();
        self.works.shrink_to_fit();
        self
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
    fn kernel_index(&mut self, kernel: MockKernel) -> u32 {
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

    /// Runs every step once, in order, on the memory `dev`; the other operations through
    /// `other` (the queue's own way of running them).
    pub(crate) fn run(
        &self,
        dev: &Mutex<Pages>,
        engine: &mut Engine,
        other: &mut dyn FnMut(&O, &mut Engine) -> Result<(), ServerError>,
    ) -> Result<(), ServerError> {
        for step in &self.steps {
            match step {
                Step::Kernel {
                    kernel,
                    args,
                    n,
                    info,
                    words,
                    scalars,
                    grid,
                } => {
                    let info = (*info != NONE).then(|| self.resources[*info as usize]);
                    let at = *words as usize;
                    run_kernel(
                        dev,
                        engine,
                        &self.kernels[*kernel as usize],
                        self.buffers(*args, *n),
                        info,
                        &self.words[at..at + usize::from(*scalars)],
                        self.grids[*grid as usize],
                    )?;
                }
                Step::Work { work, args, n } => {
                    run_work(
                        dev,
                        engine,
                        &self.works[*work as usize],
                        self.buffers(*args, *n),
                    )?;
                }
                Step::Other(op) => other(op, engine)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The compact form's promise: a recorded step is 24 bytes whatever the queue's
    /// operations weigh (the rare others are boxed), and a buffer 25 (its resource, its
    /// access).
    #[test]
    fn a_recorded_step_stays_small() {
        assert_eq!(std::mem::size_of::<super::Step<[u8; 1024]>>(), 24);
        assert_eq!(std::mem::size_of::<crate::storage::MockResource>(), 24);
        assert_eq!(std::mem::size_of::<capture_core::Access>(), 1);
    }
}
