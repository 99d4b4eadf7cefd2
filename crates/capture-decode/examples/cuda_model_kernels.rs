//! The program's kernel library for the CUDA driver model: the decoder's kernels
//! (`decode_*`, `src/decode/decode.cu`) in the parameter-list form, each running the mock
//! decoder's function over the model's memory after checking its launch. A cdylib
//! exporting `capture_model_run` (`crates/capture-cuda-model/driver/model.h`), which the
//! model asks after the library's own kernel library (`CAPTURE_CUDA_MODEL_KERNELS` is a
//! colon-separated list): test tooling of the program, built on capture-cuda-model's glue
//! as a path-only dev-dependency, so nothing of the library's tests depends on the
//! program.

use std::ffi::{c_char, c_int};

use capture_cuda_model::{
    Launch, Library, Memory, ParamKernel, ParamLaunch, Range, extent, serve, write_changes,
};
use capture_decode::model::STATE_WORDS;
use capture_decode::{DecodeBackend, Kernel};
use capture_graphs::Param;
use capture_graphs::mock::MockBackend;

/// The decoder's kernels, by entry point name; no pairs-form kernels.
const DECODER: Library = Library {
    params: |entry| decode_kernel(entry).map(|_| ParamKernel { f: decode }),
    pairs: |_| None,
};

/// `driver/model.h`'s `capture_model_run` over the decoder's kernels.
///
/// # Safety
///
/// The driver model's contract (`serve`'s): `launch` valid for the call, `error` at
/// `error_len` writable bytes.
// SAFETY: the contract is `serve`'s, which the driver model keeps.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn capture_model_run(
    launch: *const Launch,
    error: *mut c_char,
    error_len: usize,
) -> c_int {
    // SAFETY: the caller's contract, passed on unchanged.
    unsafe { serve(launch, error, error_len, &DECODER) }
}

/// The decoder's kernel whose CUDA entry point is `entry`.
fn decode_kernel(entry: &str) -> Option<Kernel> {
    let name = entry.strip_prefix("decode_")?;
    Kernel::ALL.into_iter().find(|k| k.name() == name)
}

/// A decoder kernel (`decode_*`) in the parameter-list form: each buffer one pointer,
/// its dimensions and constants by value, a block and (for a reduction) dynamic shared
/// memory per launch. Checks the parameters against the kernel's signature and a
/// reduction's block and shared memory against what its tree needs, then runs the mock
/// decoder's function (the host reference's order) over each buffer from its pointer to
/// the end of its allocation, and writes back only the bytes it changed in the buffers
/// the kernel may write.
fn decode(l: &ParamLaunch, memory: &mut dyn Memory) -> Result<(), String> {
    let entry = l.entry.as_str();
    let kernel = decode_kernel(entry).ok_or(format!("{entry} is not a decoder kernel"))?;
    let signature = kernel.signature();
    let sizes: Vec<usize> = signature
        .params()
        .iter()
        .map(|p| match p {
            Param::Scalar { bytes, .. } => usize::from(*bytes),
            _ => 8,
        })
        .collect();
    l.expect(entry, &sizes)?;
    let per_thread = kernel.shared_per_thread();
    if per_thread > 0 {
        let block = l.block[0];
        if !block.is_power_of_two() || l.block[1] != 1 || l.block[2] != 1 {
            return Err(format!(
                "{entry}: a block of {:?} threads; its tree reduces over a power of two in x",
                l.block
            ));
        }
        if l.shared_bytes < per_thread * block {
            return Err(format!(
                "{entry}: {} bytes of dynamic shared memory for a tree over {block} threads \
                 ({} needed)",
                l.shared_bytes,
                per_thread * block
            ));
        }
    }
    if matches!(kernel, Kernel::Matvec | Kernel::MatvecResidual) {
        let rows = l.word(3)?;
        if u64::from(l.grid[0]) < rows {
            return Err(format!(
                "{entry}: {} blocks for {rows} rows (one block per row)",
                l.grid[0]
            ));
        }
    }
    if kernel == Kernel::AttnScores {
        // Rows outermost, one thread each per head: the grid must cover the rows the
        // state's position reads (the slotted step shrinks it per token).
        let (heads, ctx) = (l.word(6)?, l.word(7)?);
        let state = memory.read(Range {
            address: l.word(0)?,
            bytes: 4,
        });
        let pos = u64::from(u32::from_le_bytes(state[..4].try_into().expect("4 bytes")));
        let threads = u64::from(l.grid[0]) * u64::from(l.block[0]);
        let needed = heads * (pos + 1).min(ctx);
        if threads < needed {
            return Err(format!(
                "{entry}: {threads} threads for {needed} (row, head) pairs at position {pos}"
            ));
        }
    }
    let mock = <MockBackend as DecodeBackend>::decode_kernel(kernel).map_err(|e| e.to_string())?;
    let words: Vec<u64> = (0..sizes.len())
        .filter(|&i| !signature.params()[i].is_buffer())
        .map(|i| l.word(i))
        .collect::<Result<_, _>>()?;
    let reach = reach(kernel, &words);
    let (mut buffers, mut ranges) = (Vec::new(), Vec::new());
    for (i, param) in signature.params().iter().enumerate() {
        if param.is_buffer() {
            let address = l.word(i)?;
            let extent = extent(memory, entry, i, address)?;
            let bytes = match reach.get(ranges.len()).copied().flatten() {
                Some(bytes) if bytes > extent => {
                    return Err(format!(
                        "{entry}: parameter {i} reaches {bytes} bytes from {address:#x}, past \
                         the end of its allocation ({extent} bytes on)"
                    ));
                }
                Some(bytes) => bytes,
                None => extent,
            };
            let range = Range { address, bytes };
            buffers.push(memory.read(range));
            ranges.push((range, *param));
        }
    }
    let before = buffers.clone();
    (mock.f)(&mut buffers, &words);
    for (((range, param), after), before) in ranges.iter().zip(&buffers).zip(&before) {
        let changed = after != before;
        if changed && *param == Param::READ {
            return Err(format!(
                "{entry} wrote the buffer at {:#x}, which it takes read-only",
                range.address
            ));
        }
        if changed {
            write_changes(memory, range.address, before, after);
        }
    }
    Ok(())
}

/// Bytes each buffer parameter of `kernel` reaches from its pointer, given its scalars
/// (`words`, in order), where the scalars bound it; `None` where only the data does (the
/// embedding row a token picks).
fn reach(kernel: Kernel, words: &[u64]) -> Vec<Option<usize>> {
    let w = |i: usize| words.get(i).copied().unwrap_or(0) as usize * 4;
    let dims = |i: usize| words.get(i).copied().unwrap_or(0) as usize;
    let state = Some(STATE_WORDS as usize * 4);
    match kernel {
        Kernel::Embed => vec![state, None, Some(w(0))],
        Kernel::RmsNorm | Kernel::SwiGlu => vec![Some(w(0)); 3],
        Kernel::Matvec | Kernel::MatvecResidual => {
            vec![Some(w(0) * dims(1)), Some(w(1)), Some(w(0))]
        }
        Kernel::Rope => vec![state, Some(w(0)), Some(w(0))],
        // A paged cache: the block table reaches one entry per block of the context;
        // the cache rows, whatever blocks the table names (the data bounds them).
        Kernel::KvStore => {
            let table = Some(dims(1).div_ceil(dims(2).max(1)) * 4);
            vec![state, table, Some(w(0)), Some(w(0)), None, None]
        }
        Kernel::AttnScores => vec![
            state,
            Some(dims(2).div_ceil(dims(4).max(1)) * 4),
            Some(w(0)),
            None,
            Some(w(1) * dims(2)),
        ],
        Kernel::AttnSoftmax => vec![state, Some(w(0) * dims(1))],
        Kernel::AttnMix => vec![
            state,
            Some(dims(2).div_ceil(dims(3).max(1)) * 4),
            Some(w(1) * dims(2)),
            None,
            Some(w(0)),
        ],
        Kernel::RecordLogits => vec![state, Some(w(0)), Some(w(0) * dims(1))],
        Kernel::Argmax => vec![state, Some(w(0)), Some(w(1))],
        Kernel::SetPosition => vec![state],
        Kernel::StopAt => vec![state, Some(4)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use capture_cuda_model::FlatMemory;

    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn every_decoder_kernel_has_a_host_kernel() {
        for k in Kernel::ALL {
            let entry = format!("decode_{}", k.name());
            assert!((DECODER.params)(&entry).is_some(), "{entry}");
        }
        assert!((DECODER.params)("decode_no_such_kernel").is_none());
        assert!(
            (DECODER.params)("fill").is_none(),
            "the library's kernel library"
        );
        assert!((DECODER.pairs)("fill").is_none());
    }

    /// A `decode_rmsnorm` launch over 4 floats at 0x1000, weights at 0x1010, out at
    /// 0x1020, in blocks of `block` with `shared` bytes of dynamic shared memory.
    fn rmsnorm(block: u32, shared: u32, n: u32) -> ParamLaunch {
        ParamLaunch {
            entry: "decode_rmsnorm".into(),
            grid: [1, 1, 1],
            block: [block, 1, 1],
            shared_bytes: shared,
            params: vec![
                0x1000u64.to_le_bytes().to_vec(),
                0x1010u64.to_le_bytes().to_vec(),
                0x1020u64.to_le_bytes().to_vec(),
                n.to_le_bytes().to_vec(),
                1e-5f32.to_le_bytes().to_vec(),
            ],
        }
    }

    #[test]
    fn a_decode_stand_in_checks_its_launch_and_writes_only_its_output() {
        let mut mem = FlatMemory(vec![0; 0x30]);
        let ones = [1.0f32; 4].map(f32::to_le_bytes).concat();
        mem.0[..16].copy_from_slice(&ones);
        mem.0[16..32].copy_from_slice(&ones);
        let f = (DECODER.params)("decode_rmsnorm").unwrap().f;
        // The tree needs a power-of-two block and 4 bytes of shared memory per thread.
        let err = f(&rmsnorm(256, 512, 4), &mut mem).unwrap_err();
        assert!(err.contains("1024 needed"), "{err}");
        let err = f(&rmsnorm(96, 384, 4), &mut mem).unwrap_err();
        assert!(err.contains("power of two"), "{err}");
        // Its scalars say how far each pointer reaches: past the allocation is a fault.
        let err = f(&rmsnorm(256, 1024, 8), &mut mem).unwrap_err();
        assert!(err.contains("past the end of its allocation"), "{err}");
        assert_eq!(mem.0[32..], [0; 16], "nothing written on a fault");
        f(&rmsnorm(256, 1024, 4), &mut mem).unwrap();
        let out = floats(&mem.0[32..48]);
        let want = 1.0 / (1.0f32 + 1e-5).sqrt();
        assert_eq!(out, [want; 4]);
        assert_eq!(floats(&mem.0[..16]), [1.0; 4], "the inputs are untouched");
    }
}
