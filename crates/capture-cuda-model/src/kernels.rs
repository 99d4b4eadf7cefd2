//! The kernels by entry point name, and how one runs over the model's memory.

use capture_core::{Builtin, Builtins, KernelSignature};
use capture_mock::MockBackend;

/// A host implementation of one CUDA entry point: the mock's form, a function over
/// copies of the buffers and the info words.
#[derive(Clone, Copy, Debug)]
pub struct HostKernel {
    /// Buffers and info words the entry point takes.
    pub signature: KernelSignature,
    /// What it computes.
    pub f: fn(&mut [Vec<u8>], &[u64]),
}

/// The host implementation of `entry`, if there is one.
pub fn find(entry: &str) -> Option<HostKernel> {
    if let Some(builtin) = Builtin::from_name(entry) {
        let k = MockBackend::builtin(builtin);
        return Some(HostKernel {
            signature: k.signature,
            f: k.f,
        });
    }
    match entry {
        "square_plus" => Some(HostKernel {
            signature: KernelSignature::new(2, 2),
            f: square_plus,
        }),
        _ => None,
    }
}

/// The CUDA example's kernel: `y[i] = x[i] * x[i] + b`, info `[n, bits of b]`.
fn square_plus(b: &mut [Vec<u8>], info: &[u64]) {
    let n = (info[0] as usize).min(b[0].len() / 4).min(b[1].len() / 4);
    let add = f32::from_bits(info[1] as u32);
    for i in 0..n {
        let x = f32::from_le_bytes(b[0][i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        b[1][i * 4..i * 4 + 4].copy_from_slice(&(x * x + add).to_le_bytes());
    }
}

/// A kernel of the parameter-list form (each buffer one pointer, scalars by value): a
/// host function over the launch as the model hands it over and the model's memory.
#[derive(Clone, Copy)]
pub struct ParamKernel {
    /// What it computes; why not, when the launch does not fit it or touches memory it
    /// may not.
    pub f: fn(&ParamLaunch, &mut dyn Memory) -> Result<(), String>,
}

impl std::fmt::Debug for ParamKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ParamKernel")
    }
}

/// One launch of a parameter-list kernel: its entry point, grid, block, dynamic shared
/// memory and each parameter's bytes in order.
#[derive(Debug)]
pub struct ParamLaunch {
    /// The entry point's name.
    pub entry: String,
    /// Blocks per dimension.
    pub grid: [u32; 3],
    /// Threads per block dimension.
    pub block: [u32; 3],
    /// Dynamic shared memory per block.
    pub shared_bytes: u32,
    /// Each parameter's bytes.
    pub params: Vec<Vec<u8>>,
}

impl ParamLaunch {
    /// Parameter `i` as a little-endian word (zero-extended).
    ///
    /// # Errors
    ///
    /// When the launch has no parameter `i`.
    pub fn word(&self, i: usize) -> Result<u64, String> {
        let p = self.params.get(i).ok_or(format!("no parameter {i}"))?;
        let mut w = [0u8; 8];
        w[..p.len().min(8)].copy_from_slice(&p[..p.len().min(8)]);
        Ok(u64::from_le_bytes(w))
    }

    /// Parameter `i` as a float (its low 4 bytes).
    ///
    /// # Errors
    ///
    /// When the launch has no parameter `i`.
    pub fn f32(&self, i: usize) -> Result<f32, String> {
        Ok(f32::from_bits(self.word(i)? as u32))
    }

    /// Checks the parameter sizes are `sizes`.
    ///
    /// # Errors
    ///
    /// Which sizes `entry` takes and which the launch passed, when they differ.
    pub fn expect(&self, entry: &str, sizes: &[usize]) -> Result<(), String> {
        let got: Vec<usize> = self.params.iter().map(Vec::len).collect();
        if got == sizes {
            Ok(())
        } else {
            Err(format!(
                "{entry} takes parameters of {sizes:?} bytes, the launch passed {got:?}"
            ))
        }
    }
}

/// The host implementation of a parameter-list `entry`, if there is one: the kernels of
/// capture-cuda's launch-model tests (`tests/it/kernels/user.cu`) and the engine
/// example's (`engine_*`, the facade's `examples/engine_step.cu`). The decoder's
/// (`decode_*`) are the decoder's own kernel library (capture-decode's
/// `examples/cuda_model_kernels.rs`).
pub fn find_params(entry: &str) -> Option<ParamKernel> {
    match entry {
        "block_sum" => Some(ParamKernel { f: block_sum }),
        "scale" => Some(ParamKernel { f: scale }),
        "count_until" => Some(ParamKernel { f: count_until }),
        "trap_at" => Some(ParamKernel { f: trap_at }),
        "engine_affine" => Some(ParamKernel { f: engine_affine }),
        "engine_gemv" => Some(ParamKernel { f: engine_gemv }),
        "engine_temperature" => Some(ParamKernel {
            f: engine_temperature,
        }),
        "paged_append" => Some(ParamKernel { f: paged_append }),
        "paged_attend" => Some(ParamKernel { f: paged_attend }),
        "toy_logits" => Some(ParamKernel { f: toy_logits }),
        "toy_sample" => Some(ParamKernel { f: toy_sample }),
        _ => None,
    }
}

/// Bytes from `address` to the end of the live allocation holding it: what a kernel
/// given only a pointer may reach.
///
/// # Errors
///
/// When `address` (parameter `what` of `entry`) is inside no live allocation.
pub fn extent(
    memory: &dyn Memory,
    entry: &str,
    what: usize,
    address: u64,
) -> Result<usize, String> {
    let inside = |bytes: usize| memory.inside(Range { address, bytes });
    if !inside(1) {
        return Err(format!(
            "{entry}: parameter {what} points at {address:#x}, not inside a live allocation"
        ));
    }
    let (mut lo, mut hi) = (1usize, 2usize);
    while hi < 1 << 40 && inside(hi) {
        lo = hi;
        hi *= 2;
    }
    // `lo` bytes fit, `hi` do not: halve the gap.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if inside(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Writes the runs of `after` that differ from `before` at `address`.
pub fn write_changes(memory: &mut dyn Memory, address: u64, before: &[u8], after: &[u8]) {
    let mut i = 0;
    while i < after.len() {
        if after[i] == before[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < after.len() && after[i] != before[i] {
            i += 1;
        }
        memory.write(
            Range {
                address: address + start as u64,
                bytes: i - start,
            },
            &after[start..i],
        );
    }
}

fn read_f32s(memory: &dyn Memory, r: Range) -> Vec<f32> {
    memory
        .read(r)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

fn check(memory: &dyn Memory, entry: &str, what: &str, r: Range) -> Result<(), String> {
    if r.bytes > 0 && !memory.inside(r) {
        return Err(format!(
            "{entry}: {what} at {:#x} ({} bytes) is not inside a live allocation",
            r.address, r.bytes
        ));
    }
    Ok(())
}

/// `sums[b] = sum(x[i] * scale)` over block `b`'s elements, summed as the CUDA kernel's
/// tree does (pairs at strides block/2, block/4, …), needing `block * 4` bytes of
/// dynamic shared memory.
fn block_sum(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("block_sum", &[8, 8, 4, 4])?;
    let (x, sums, n, a) = (l.word(0)?, l.word(1)?, l.word(2)? as u32, l.f32(3)?);
    let block = l.block[0] as usize;
    if !block.is_power_of_two() || l.block[1] != 1 || l.block[2] != 1 {
        return Err(format!(
            "block_sum: a block of {:?} threads; it reduces over a power of two in x",
            l.block
        ));
    }
    if (l.shared_bytes as usize) < block * 4 {
        return Err(format!(
            "block_sum: {} bytes of shared memory for {block} threads' partial sums ({} needed)",
            l.shared_bytes,
            block * 4
        ));
    }
    let blocks = l.grid[0] as usize;
    let xs = Range {
        address: x,
        bytes: (n as usize).min(blocks * block) * 4,
    };
    let out = Range {
        address: sums,
        bytes: blocks * 4,
    };
    check(memory, "block_sum", "x", xs)?;
    check(memory, "block_sum", "sums", out)?;
    let values = read_f32s(memory, xs);
    let mut result = Vec::with_capacity(blocks * 4);
    for b in 0..blocks {
        let mut partial: Vec<f32> = (0..block)
            .map(|t| values.get(b * block + t).map_or(0.0, |v| v * a))
            .collect();
        let mut stride = block / 2;
        while stride > 0 {
            for t in 0..stride {
                partial[t] += partial[t + stride];
            }
            stride /= 2;
        }
        result.extend_from_slice(&partial[0].to_le_bytes());
    }
    memory.write(out, &result);
    Ok(())
}

/// `y[i] = x[i] * a` for `i < n`.
fn scale(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("scale", &[8, 8, 4, 4])?;
    let (x, y, n, a) = (l.word(0)?, l.word(1)?, l.word(2)? as usize, l.f32(3)?);
    let threads = l.grid[0] as usize * l.block[0] as usize;
    let n = n.min(threads);
    let (xs, ys) = (
        Range {
            address: x,
            bytes: n * 4,
        },
        Range {
            address: y,
            bytes: n * 4,
        },
    );
    check(memory, "scale", "x", xs)?;
    check(memory, "scale", "y", ys)?;
    let out: Vec<u8> = read_f32s(memory, xs)
        .iter()
        .flat_map(|v| (v * a).to_le_bytes())
        .collect();
    memory.write(ys, &out);
    Ok(())
}

/// `count_until(x, done, k, limit)`: `x[0] += k`, then `done[0] = x[0] >= limit` (a loop
/// replay's step that sets its stop flag).
fn count_until(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("count_until", &[8, 8, 4, 4])?;
    let word = |address| Range { address, bytes: 4 };
    let (x, done) = (word(l.word(0)?), word(l.word(1)?));
    check(memory, "count_until", "x", x)?;
    check(memory, "count_until", "done", done)?;
    let bytes = memory.read(x);
    let v =
        u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")).wrapping_add(l.word(2)? as u32);
    memory.write(x, &v.to_le_bytes());
    memory.write(done, &u32::from(v >= l.word(3)? as u32).to_le_bytes());
    Ok(())
}

/// `trap_at(x, at)`: traps (faults) when `x[0] == at`.
fn trap_at(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("trap_at", &[8, 4])?;
    let x = Range {
        address: l.word(0)?,
        bytes: 4,
    };
    check(memory, "trap_at", "x", x)?;
    let bytes = memory.read(x);
    let v = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    if v == l.word(1)? as u32 {
        return Err(format!("trap_at: x[0] is {v}: __trap()"));
    }
    Ok(())
}

/// The threads a launch runs in x: its grid times its block.
fn threads_x(l: &ParamLaunch) -> usize {
    l.grid[0] as usize * l.block[0] as usize
}

/// A range of `n` floats at `address`, checked inside a live allocation.
fn floats(
    memory: &dyn Memory,
    entry: &str,
    what: &str,
    address: u64,
    n: usize,
) -> Result<Range, String> {
    let r = Range {
        address,
        bytes: n * 4,
    };
    check(memory, entry, what, r)?;
    Ok(r)
}

fn to_bytes(values: impl Iterator<Item = f32>) -> Vec<u8> {
    values.flat_map(f32::to_le_bytes).collect()
}

/// `engine_affine(x, h, n, a, b)`: `h[i] = a * x[i] + b` for `i < n`.
fn engine_affine(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("engine_affine", &[8, 8, 4, 4, 4])?;
    let n = (l.word(2)? as usize).min(threads_x(l));
    let (a, b) = (l.f32(3)?, l.f32(4)?);
    let x = floats(memory, "engine_affine", "x", l.word(0)?, n)?;
    let h = floats(memory, "engine_affine", "h", l.word(1)?, n)?;
    let out = to_bytes(read_f32s(memory, x).into_iter().map(|v| a * v + b));
    memory.write(h, &out);
    Ok(())
}

/// `engine_gemv(w, x, y, rows, cols)`: `y[r] = sum_c w[r * cols + c] * x[c]`, one thread
/// per row, columns in order.
fn engine_gemv(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("engine_gemv", &[8, 8, 8, 4, 4])?;
    let (rows, cols) = (l.word(3)? as usize, l.word(4)? as usize);
    let rows = rows.min(threads_x(l));
    let w = floats(memory, "engine_gemv", "w", l.word(0)?, rows * cols)?;
    let x = floats(memory, "engine_gemv", "x", l.word(1)?, cols)?;
    let y = floats(memory, "engine_gemv", "y", l.word(2)?, rows)?;
    let (w, x) = (read_f32s(memory, w), read_f32s(memory, x));
    let out = to_bytes(w.chunks_exact(cols.max(1)).take(rows).map(|row| {
        let mut acc = 0.0f32;
        for (a, b) in row.iter().zip(&x) {
            acc += a * b;
        }
        acc
    }));
    memory.write(y, &out);
    Ok(())
}

/// `engine_temperature(logits, n, inv_t)`: `logits[i] *= inv_t` for `i < n`.
fn engine_temperature(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("engine_temperature", &[8, 4, 4])?;
    let n = (l.word(1)? as usize).min(threads_x(l));
    let inv_t = l.f32(2)?;
    let logits = floats(memory, "engine_temperature", "logits", l.word(0)?, n)?;
    let out = to_bytes(read_f32s(memory, logits).into_iter().map(|v| v * inv_t));
    memory.write(logits, &out);
    Ok(())
}

/// `paged_append(h, page, row, dim)`: `page[row * dim + i] = h[i]` for `i < dim` (the
/// paged example's, `examples/paged_step.cu`).
fn paged_append(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("paged_append", &[8, 8, 4, 4])?;
    let (row, dim) = (l.word(2)? as usize, l.word(3)? as usize);
    let dim = dim.min(threads_x(l));
    let h = floats(memory, "paged_append", "h", l.word(0)?, dim)?;
    let page = floats(memory, "paged_append", "page", l.word(1)?, (row + 1) * dim)?;
    let values = read_f32s(memory, h);
    let target = Range {
        address: page.address + (row * dim * 4) as u64,
        bytes: dim * 4,
    };
    memory.write(target, &to_bytes(values.into_iter()));
    Ok(())
}

/// `paged_attend(page, out, pos, dim)`: `out[i]` the mean of `page[r * dim + i]` over
/// `r <= pos`, rows in order (the paged example's).
fn paged_attend(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("paged_attend", &[8, 8, 4, 4])?;
    let (pos, dim) = (l.word(2)? as usize, l.word(3)? as usize);
    let dim = dim.min(threads_x(l));
    let page = floats(memory, "paged_attend", "page", l.word(0)?, (pos + 1) * dim)?;
    let out = floats(memory, "paged_attend", "out", l.word(1)?, dim)?;
    let rows = read_f32s(memory, page);
    let means = (0..dim).map(|i| {
        let mut acc = 0.0f32;
        for r in 0..=pos {
            acc += rows[r * dim + i];
        }
        acc / (pos + 1) as f32
    });
    memory.write(out, &to_bytes(means));
    Ok(())
}

/// The `u32`s of `range`.
fn read_u32s(memory: &dyn Memory, range: Range) -> Vec<u32> {
    memory
        .read(range)
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

/// `toy_logits(state, logits, vocab)`: `logits[v] = (tok * 131 + pos * 17 + v * 29) % 97`
/// for `v < vocab`, `state = [pos, tok]` (the decode-until example's,
/// `examples/decode_until.cu`).
fn toy_logits(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("toy_logits", &[8, 8, 4])?;
    let vocab = (l.word(2)? as usize).min(threads_x(l));
    let state = floats(memory, "toy_logits", "state", l.word(0)?, 2)?;
    let logits = floats(memory, "toy_logits", "logits", l.word(1)?, vocab)?;
    let s = read_u32s(memory, state);
    let (pos, tok) = (s[0], s[1]);
    let values = (0..vocab as u32).map(|v| {
        (tok.wrapping_mul(131)
            .wrapping_add(pos.wrapping_mul(17))
            .wrapping_add(v * 29)
            % 97) as f32
    });
    memory.write(logits, &to_bytes(values));
    Ok(())
}

/// `toy_sample(state, logits, ids, done, vocab, eos, context)`, one thread: the first
/// index of the largest logit into `ids[pos]`, `state = [pos + 1, best]`, `done = 1` on
/// the end token or at the context's end (the decode-until example's).
fn toy_sample(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    l.expect("toy_sample", &[8, 8, 8, 8, 4, 4, 4])?;
    let (vocab, eos, context) = (l.word(4)? as usize, l.word(5)? as u32, l.word(6)? as u32);
    let state = floats(memory, "toy_sample", "state", l.word(0)?, 2)?;
    let logits = read_f32s(
        memory,
        floats(memory, "toy_sample", "logits", l.word(1)?, vocab)?,
    );
    let s = read_u32s(memory, state);
    let best = (1..vocab).fold(0, |b, v| if logits[v] > logits[b] { v } else { b }) as u32;
    let pos = s[0];
    if pos < context {
        let ids = floats(memory, "toy_sample", "ids", l.word(2)?, pos as usize + 1)?;
        let at = Range {
            address: ids.address + u64::from(pos) * 4,
            bytes: 4,
        };
        memory.write(at, &best.to_le_bytes());
    }
    memory.write(
        state,
        &[(pos + 1).to_le_bytes(), best.to_le_bytes()].concat(),
    );
    if best == eos || pos + 1 >= context {
        let done = floats(memory, "toy_sample", "done", l.word(3)?, 1)?;
        memory.write(done, &1u32.to_le_bytes());
    }
    Ok(())
}

/// One buffer a launch names: where it starts and how many bytes.
#[derive(Clone, Copy, Debug)]
pub struct Range {
    /// Its first byte's address.
    pub address: u64,
    /// Its length.
    pub bytes: usize,
}

/// The memory a launch runs over, as the model lets a kernel see it.
pub trait Memory {
    /// Whether `range` lies in one live allocation.
    fn inside(&self, range: Range) -> bool;
    /// A copy of `range`'s bytes (checked inside first).
    fn read(&self, range: Range) -> Vec<u8>;
    /// Writes `bytes` at `range` (checked inside first).
    fn write(&mut self, range: Range, bytes: &[u8]);
}

/// Runs `kernel` over `params` (the entry point's 64-bit parameters: each buffer's pointer
/// and length, then the info pointer) in `memory`; why not, when the launch does not fit
/// the kernel or touches memory it may not.
pub(crate) fn run(
    entry: &str,
    kernel: HostKernel,
    params: &[u64],
    memory: &mut impl Memory,
) -> Result<(), String> {
    let buffers = kernel.signature.buffers();
    let words = kernel.signature.info_words();
    if params.len() != 2 * buffers + 1 {
        return Err(format!(
            "{entry} takes {} parameters, the launch passed {}",
            2 * buffers + 1,
            params.len()
        ));
    }
    let ranges: Vec<Range> = (0..buffers)
        .map(|i| Range {
            address: params[2 * i],
            bytes: params[2 * i + 1] as usize,
        })
        .collect();
    let info = Range {
        address: params[2 * buffers],
        bytes: words * 8,
    };
    for (i, r) in ranges.iter().chain(std::iter::once(&info)).enumerate() {
        if r.bytes > 0 && !memory.inside(*r) {
            let what = if i < buffers {
                format!("buffer {i}")
            } else {
                "the info words".to_owned()
            };
            return Err(format!(
                "{entry}: {what} at {:#x} ({} bytes) is not inside a live allocation",
                r.address, r.bytes
            ));
        }
    }
    let info: Vec<u64> = memory
        .read(info)
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .collect();
    let before: Vec<Vec<u8>> = ranges.iter().map(|r| memory.read(*r)).collect();
    let mut after = before.clone();
    (kernel.f)(&mut after, &info);
    for ((r, old), new) in ranges.iter().zip(&before).zip(&after) {
        if new.len() != old.len() {
            return Err(format!(
                "{entry} resized a buffer of {} bytes to {}",
                old.len(),
                new.len()
            ));
        }
        if new != old {
            memory.write(*r, new);
        }
    }
    Ok(())
}

/// One allocation of the model's memory, at address 0x1000: what a kernel library's
/// tests hand a host kernel in place of the driver model's live allocations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlatMemory(pub Vec<u8>);

impl Memory for FlatMemory {
    fn inside(&self, r: Range) -> bool {
        r.address >= 0x1000 && r.address as usize - 0x1000 + r.bytes <= self.0.len()
    }
    fn read(&self, r: Range) -> Vec<u8> {
        let at = r.address as usize - 0x1000;
        self.0[at..at + r.bytes].to_vec()
    }
    fn write(&mut self, r: Range, bytes: &[u8]) {
        let at = r.address as usize - 0x1000;
        self.0[at..at + r.bytes].copy_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn every_shipped_entry_point_has_a_host_kernel() {
        for b in Builtin::ALL {
            assert!(find(b.name()).is_some(), "{}", b.name());
        }
        for entry in [
            "block_sum",
            "scale",
            "engine_affine",
            "engine_gemv",
            "engine_temperature",
            "paged_append",
            "paged_attend",
        ] {
            assert!(find_params(entry).is_some(), "{entry}");
        }
        assert!(find("square_plus").is_some());
        assert!(
            find_params("decode_rmsnorm").is_none(),
            "the program's kernel library"
        );
        assert!(find("no_such_kernel").is_none());
    }

    #[test]
    fn a_builtin_runs_over_its_ranges_and_writes_back_only_what_changed() {
        // x at 0x1000 (4 floats), y at 0x1010, info at 0x1020.
        let mut mem = FlatMemory(vec![0; 0x40]);
        mem.write(
            Range {
                address: 0x1000,
                bytes: 16,
            },
            &[1.0f32, 2.0, 3.0, 4.0].map(f32::to_le_bytes).concat(),
        );
        let info = Builtin::AddScalar.info(4, 0.5);
        mem.write(
            Range {
                address: 0x1020,
                bytes: 16,
            },
            &info.map(u64::to_le_bytes).concat(),
        );
        let k = find("add_scalar").unwrap();
        run("add_scalar", k, &[0x1000, 16, 0x1010, 16, 0x1020], &mut mem).unwrap();
        assert_eq!(floats(&mem.0[0x10..0x20]), [1.5, 2.5, 3.5, 4.5]);
        assert_eq!(floats(&mem.0[..0x10]), [1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn a_range_outside_the_allocations_is_a_fault_and_nothing_is_written() {
        let mut mem = FlatMemory(vec![0; 0x40]);
        let k = find("fill").unwrap();
        let err = run("fill", k, &[0x1000, 0x100, 0x1020], &mut mem).unwrap_err();
        assert!(err.contains("buffer 0"), "{err}");
        assert_eq!(mem.0, vec![0; 0x40]);
        let err = run("fill", k, &[0x1000, 16], &mut mem).unwrap_err();
        assert!(err.contains("3 parameters"), "{err}");
    }
}
