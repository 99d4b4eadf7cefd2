//! How the mock runs a kernel or the user's work on a stream's memory: gather the
//! ranges it is given, run it, copy back what it may write. Shared by the queue's
//! operations and a graph's recorded steps.

use std::sync::Mutex;

use capture_core::{Access, ServerError};

use crate::kernels::{MockKernel, MockWork};
use crate::lock::lock;
use crate::storage::{MockResource, Pages};

/// Scratch the running operation uses. All mock queues run under this one lock, so a
/// device-side wait can run another queue's work without two queues waiting on each
/// other's locks; a queue's own lock is held only to take its next operation.
#[derive(Debug, Default)]
pub(crate) struct Engine {
    pub(crate) scratch: Vec<Vec<u8>>,
    pub(crate) words: Vec<u64>,
}

thread_local! {
    /// The grid of the launch whose kernel function runs on this thread now.
    static GRID: std::cell::Cell<Option<[u32; 3]>> = const { std::cell::Cell::new(None) };
}

/// The grid (workgroups per dimension) of the launch whose kernel this thread runs now:
/// what a mock kernel function calls to see its grid, as a GPU kernel sees
/// `gridDim`/`gl_NumWorkGroups` (a kernel that covers its work by workgroup checks the
/// grid covers it, so a grid set too small shows on the mock as it would on a GPU).
/// `None` outside a kernel function.
pub fn launch_grid() -> Option<[u32; 3]> {
    GRID.with(std::cell::Cell::get)
}

/// Runs `kernel` over `args` (its buffers, in order), its info words read from `info`
/// and then `scalars`, on `grid`: gathers the ranges, runs it, and copies back what it
/// may write. A kernel that panics faults like one on a GPU: nothing written, an
/// asynchronous error.
pub(crate) fn run_kernel<I>(
    dev: &Mutex<Pages>,
    engine: &mut Engine,
    kernel: &MockKernel,
    args: I,
    info: Option<MockResource>,
    scalars: &[u64],
    grid: [u32; 3],
) -> Result<(), ServerError>
where
    I: Iterator<Item = (MockResource, Access)> + Clone,
{
    let Engine { scratch, words } = engine;
    let mut dev = lock(dev);
    let n = gather(&dev, args.clone(), scratch);
    words.clear();
    if let Some(info) = info {
        words.extend(
            dev.slice(info.page, info.bytes)
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
        );
    }
    words.extend_from_slice(scalars);
    let outer = GRID.with(|g| g.replace(Some(grid)));
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (kernel.f)(&mut scratch[..n], words);
    }));
    GRID.with(|g| g.set(outer));
    if ran.is_err() {
        return Err(ServerError::driver(
            "kernel",
            crate::MockError::new(format!("kernel {} panicked", kernel.name)),
        ));
    }
    scatter(&mut dev, args, scratch, "kernel", kernel.name)
}

/// Runs the user's `work` over `args`, as [`run_kernel`] runs a kernel: an `Err` or a
/// panic fails it as a kernel's fault does.
pub(crate) fn run_work<I>(
    dev: &Mutex<Pages>,
    engine: &mut Engine,
    work: &MockWork,
    args: I,
) -> Result<(), ServerError>
where
    I: Iterator<Item = (MockResource, Access)> + Clone,
{
    let Engine { scratch, .. } = engine;
    let mut dev = lock(dev);
    let n = gather(&dev, args.clone(), scratch);
    let ran =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.run(&mut scratch[..n])));
    let failed = match ran {
        Ok(Ok(())) => None,
        Ok(Err(why)) => Some(why),
        Err(_) => Some("it panicked".to_string()),
    };
    if let Some(why) = failed {
        return Err(ServerError::driver(
            "work",
            crate::MockError::new(format!("work {} failed: {why}", work.name())),
        ));
    }
    scatter(&mut dev, args, scratch, "work", &work.name())
}

/// Copies the bytes of `args`' ranges into `scratch`; how many there are.
fn gather(
    dev: &Pages,
    args: impl Iterator<Item = (MockResource, Access)>,
    scratch: &mut Vec<Vec<u8>>,
) -> usize {
    let mut n = 0;
    for (res, _) in args {
        if scratch.len() <= n {
            scratch.push(Vec::new());
        }
        scratch[n].clear();
        scratch[n].extend_from_slice(dev.slice(res.page, res.bytes));
        n += 1;
    }
    n
}

/// Copies back what the kernel or work (`what` named `name`) wrote: only the ranges it
/// may write. One that changed a range's length broke its contract, and faults like one
/// that panicked (nothing written).
fn scatter(
    dev: &mut Pages,
    args: impl Iterator<Item = (MockResource, Access)> + Clone,
    scratch: &[Vec<u8>],
    what: &'static str,
    name: &str,
) -> Result<(), ServerError> {
    if let Some((i, (res, _))) = args
        .clone()
        .enumerate()
        .find(|(i, (res, _))| scratch[*i].len() as u64 != res.bytes.len())
    {
        return Err(ServerError::driver(
            what,
            crate::MockError::new(format!(
                "{what} {name} resized buffer {i} from {} to {} bytes",
                res.bytes.len(),
                scratch[i].len()
            )),
        ));
    }
    for (i, (res, access)) in args.enumerate() {
        if access.writes() {
            dev.slice_mut(res.page, res.bytes)
                .copy_from_slice(&scratch[i]);
        }
    }
    Ok(())
}
