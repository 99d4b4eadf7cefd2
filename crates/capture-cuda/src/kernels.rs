//! Kernels: CUDA modules. The builtins are CUDA C (`kernels/builtins.cu`), compiled by
//! NVRTC to cubins for sm_80 and sm_90 (loaded without the driver's JIT on the common
//! GPUs) and to PTX for compute_80 and compute_90 (JIT-compiled on any other GPU of
//! those generations or newer), all shipped in the crate; a test recompiles them and
//! checks the shipped images are exactly NVRTC's output. Users bring their own PTX,
//! whose parameter list is checked against the declared signature at load.

use std::borrow::Cow;
use std::ffi::CString;
use std::sync::Arc;

use capture_core::{Builtin, KernelSignature, Param, ServerError};

use crate::gpu::Gpu;
use crate::raw;

/// The builtins' CUDA C source.
pub const BUILTINS_CU: &str = include_str!("../kernels/builtins.cu");
/// The builtins' PTX for compute capability 8.x (JIT-compiled where no cubin applies).
pub const BUILTINS_SM80: &str = include_str!("../kernels/builtins.sm_80.ptx");
/// The builtins' PTX for compute capability 9.0 and newer (JIT-compiled on GPUs newer
/// than 9.0).
pub const BUILTINS_SM90: &str = include_str!("../kernels/builtins.sm_90.ptx");
/// The builtins' cubin for compute capability 8.x (A100, A10, L4, RTX 30/40).
pub const BUILTINS_SM80_CUBIN: &[u8] = include_bytes!("../kernels/builtins.sm_80.cubin");
/// The builtins' cubin for compute capability 9.0 (H100, H200).
pub const BUILTINS_SM90_CUBIN: &[u8] = include_bytes!("../kernels/builtins.sm_90.cubin");

/// Threads per block of a launch that gives none, unless the kernel source says
/// otherwise.
pub(crate) const BLOCK: u32 = 64;

/// The NVRTC virtual architectures the builtins ship PTX for, with their PTX.
pub const SHIPPED: [(&str, &str); 2] =
    [("compute_80", BUILTINS_SM80), ("compute_90", BUILTINS_SM90)];

/// The NVRTC real architectures the builtins ship cubins for, with their cubins.
pub const SHIPPED_CUBINS: [(&str, &[u8]); 2] = [
    ("sm_80", BUILTINS_SM80_CUBIN),
    ("sm_90", BUILTINS_SM90_CUBIN),
];

/// A kernel before it is loaded.
#[derive(Clone, Debug)]
pub struct CudaKernelSource {
    name: Cow<'static, str>,
    ptx: Ptx,
    entry: CString,
    signature: KernelSignature,
    abi: Abi,
    block: [u32; 3],
}

#[derive(Clone, Debug)]
enum Ptx {
    Builtins,
    User(Arc<CString>),
    Cubin(Arc<[u8]>),
}

/// How a kernel takes its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Abi {
    /// Each buffer as a pointer and its length in bytes (two 64-bit arguments), then
    /// the info words' pointer: the builtins' form, and a user kernel's whose signature
    /// leaves the access to each launch ([`KernelSignature::new`]).
    Pairs,
    /// Each parameter as the kernel declares it: a buffer as one 8-byte device pointer
    /// to the start of its range, a scalar by value; then the info words' pointer, if it
    /// takes any.
    Params,
}

impl CudaKernelSource {
    /// A PTX kernel with entry point `entry` and `signature`.
    ///
    /// A signature listing its parameters ([`KernelSignature::of`]) is the kernel's own
    /// parameter list, as CUDA C declares it: each buffer one 8-byte device pointer to
    /// the start of the range the launch binds (no hidden length: pass one as a scalar),
    /// each scalar by value, and a pointer to the info words last only when it takes any.
    /// A signature of [`KernelSignature::new`] (buffers whose access each launch says) is
    /// the library's first form: each buffer a pointer and its length in bytes (two
    /// 64-bit arguments), then the info words' pointer.
    ///
    /// Blocks are `[64, 1, 1]` threads unless [`with_block`](Self::with_block) says
    /// otherwise or a launch gives its own ([`Dims::block`](capture_core::Dims::block)),
    /// with the dynamic shared memory the launch asks for.
    ///
    /// The image's parameters are checked against `signature` when the kernel loads (its
    /// first launch, in warmup), offsets and sizes: a kernel whose parameters differ is
    /// refused at that launch with [`ServerError::InvalidArgument`] naming both lists,
    /// and so is any user kernel on a driver that cannot report its parameters
    /// (`cuFuncGetParamInfo`, CUDA 12.4 and newer).
    ///
    /// A signature that declares the grid-dependency wait
    /// ([`KernelSignature::with_grid_dependency_wait`], for programmatic dependent
    /// launch) is checked against the PTX too: the entry's body must hold a
    /// `griddepcontrol.wait` (what `cudaGridDependencySynchronize()` compiles to).
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the kernel when the PTX or the entry name
    /// holds a NUL byte, the PTX lacks a `.version` directive, or the signature declares
    /// the grid-dependency wait and the entry's body has no `griddepcontrol.wait`.
    pub fn ptx(
        name: impl Into<Cow<'static, str>>,
        ptx: String,
        entry: &str,
        signature: KernelSignature,
    ) -> Result<Self, ServerError> {
        let name = name.into();
        if !ptx.contains(".version") {
            return Err(ServerError::invalid(
                "PTX",
                &name,
                "it has no .version directive",
            ));
        }
        if signature.waits_for_grid_dependency()
            && !entry_body(&ptx, entry).is_some_and(|body| body.contains("griddepcontrol.wait"))
        {
            return Err(ServerError::invalid(
                "PTX",
                &name,
                format!(
                    "its signature declares the grid-dependency wait, but entry {entry} has \
                     no griddepcontrol.wait (cudaGridDependencySynchronize)"
                ),
            ));
        }
        let ptx = CString::new(ptx)
            .map_err(|_| ServerError::invalid("PTX", &name, "it contains a NUL byte"))?;
        Self::user(name, Ptx::User(Arc::new(ptx)), entry, signature)
    }

    /// A cubin (an ELF image NVRTC or nvcc built for the GPU's architecture) with entry
    /// point `entry` and `signature`, taken as [`ptx`](Self::ptx) takes it. Its machine
    /// code is not read, so a signature declaring the grid-dependency wait (for a
    /// programmatic launch) is refused: only PTX is checked for it.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the kernel when the bytes are not an ELF
    /// image, the entry name holds a NUL byte, or the signature declares the
    /// grid-dependency wait; a cubin for another architecture is refused by the driver
    /// when it loads, at the first launch.
    pub fn cubin(
        name: impl Into<Cow<'static, str>>,
        cubin: Vec<u8>,
        entry: &str,
        signature: KernelSignature,
    ) -> Result<Self, ServerError> {
        let name = name.into();
        if !cubin.starts_with(b"\x7fELF") {
            return Err(ServerError::invalid(
                "cubin",
                &name,
                "the bytes are not an ELF image",
            ));
        }
        if signature.waits_for_grid_dependency() {
            return Err(ServerError::invalid(
                "cubin",
                &name,
                "its signature declares the grid-dependency wait, which a cubin's machine \
                 code cannot be checked for: ship the kernel as PTX (checked for \
                 griddepcontrol.wait), or declare no wait (no programmatic launch)",
            ));
        }
        Self::user(name, Ptx::Cubin(cubin.into()), entry, signature)
    }

    fn user(
        name: Cow<'static, str>,
        ptx: Ptx,
        entry: &str,
        signature: KernelSignature,
    ) -> Result<Self, ServerError> {
        let entry = CString::new(entry)
            .map_err(|_| ServerError::invalid("entry point", &name, "it contains a NUL byte"))?;
        let abi = if signature.undeclared() {
            Abi::Pairs
        } else {
            Abi::Params
        };
        Ok(Self {
            name,
            ptx,
            entry,
            signature,
            abi,
            block: [BLOCK, 1, 1],
        })
    }

    /// The same kernel, launched in blocks of `block` threads when a launch gives none.
    pub fn with_block(mut self, block: [u32; 3]) -> Self {
        self.block = block;
        self
    }

    /// The builtin `kernel`. Its signature declares the grid-dependency wait: on sm_90
    /// and later every builtin waits for its predecessor first (`kernels/builtins.cu`),
    /// so a builtin launch may be programmatic ([`Dims::programmatic`](capture_core::Dims::programmatic));
    /// an older device runs none, and the core refuses them there.
    pub fn builtin(kernel: Builtin) -> Self {
        Self {
            name: Cow::Borrowed(kernel.name()),
            ptx: Ptx::Builtins,
            entry: CString::new(kernel.name()).expect("no NUL"),
            signature: kernel.signature().with_grid_dependency_wait(),
            abi: Abi::Pairs,
            block: [BLOCK, 1, 1],
        }
    }

    /// The kernel's name.
    pub fn name(&self) -> &Cow<'static, str> {
        &self.name
    }

    /// What the kernel takes.
    pub fn signature(&self) -> KernelSignature {
        self.signature
    }
}

/// The body of `entry` in `ptx`: from its `.entry` directive to the next one (or the
/// end); `None` when the PTX has no such entry.
fn entry_body<'a>(ptx: &'a str, entry: &str) -> Option<&'a str> {
    let at = ptx.match_indices(".entry ").find_map(|(i, m)| {
        let rest = &ptx[i + m.len()..];
        let named = rest.strip_prefix(entry)?;
        named.trim_start().starts_with('(').then_some(i + m.len())
    })?;
    let body = &ptx[at..];
    Some(body.find(".entry ").map_or(body, |end| &body[..end]))
}

/// A loaded kernel.
pub struct CudaKernel {
    gpu: Arc<Gpu>,
    module: usize,
    pub(crate) function: usize,
    pub(crate) abi: Abi,
    /// Its block when a launch gives none.
    pub(crate) block: [u32; 3],
}

impl Drop for CudaKernel {
    fn drop(&mut self) {
        match raw::Current::enter(self.gpu.context) {
            Ok(_current) => raw::module_unload(self.module),
            Err(error) => {
                tracing::warn!(target: "capture", %error, "a CUDA module could not be unloaded");
            }
        }
    }
}

/// The image a module loads from: a cubin, or NUL-terminated PTX.
enum Image {
    Cubin(&'static [u8]),
    UserCubin(Arc<[u8]>),
    Ptx(Arc<CString>),
}

impl Image {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Cubin(bytes) => bytes,
            Self::UserCubin(bytes) => bytes,
            Self::Ptx(text) => text.as_bytes_with_nul(),
        }
    }
}

/// The builtins' image for a GPU of compute capability `compute`: its cubin where one
/// was built for it (a cubin runs on its own major version from its minor on), else the
/// newest PTX it can JIT.
fn builtins_image(compute: (i32, i32)) -> Result<Image, ServerError> {
    let ptx = |text: &str| {
        Image::Ptx(Arc::new(
            CString::new(text).expect("shipped PTX has no NUL"),
        ))
    };
    match compute {
        (9, 0) => Ok(Image::Cubin(BUILTINS_SM90_CUBIN)),
        (8, _) => Ok(Image::Cubin(BUILTINS_SM80_CUBIN)),
        (major, _) if major >= 9 => Ok(ptx(BUILTINS_SM90)),
        (major, minor) => Err(ServerError::invalid(
            "device",
            format!("compute capability {major}.{minor}"),
            "the shipped kernels target compute capability 8.0 and newer",
        )),
    }
}

/// What a launch of `signature` passes a kernel of `abi`, as `(size, what)` per
/// parameter.
fn passed(abi: Abi, signature: &KernelSignature) -> Vec<(usize, &'static str)> {
    let mut out = Vec::new();
    for p in signature.params() {
        match (abi, *p) {
            (Abi::Pairs, _) => out.extend([(8, "a pointer"), (8, "a length")]),
            (Abi::Params, Param::Scalar { bytes, .. }) => {
                out.push((usize::from(bytes), "a scalar"));
            }
            (Abi::Params, _) => out.push((8, "a pointer")),
        }
    }
    if signature.has_info() {
        out.push((8, "the info pointer"));
    }
    out
}

/// Checks a kernel's parameters, as its image declares them (`(offset, size)` each),
/// against what a launch of `signature` passes it under `abi`: the count, each size, and
/// offsets that rise in order, each at least the end of the one before.
pub(crate) fn check_params(
    name: &str,
    params: &[(usize, usize)],
    signature: &KernelSignature,
    abi: Abi,
) -> Result<(), ServerError> {
    let expected = passed(abi, signature);
    let sizes: Vec<usize> = params.iter().map(|&(_, size)| size).collect();
    // The pairs form is 8-byte words back to back; a parameter list is laid out as C
    // lays out its parameters: in order, each past the one before (alignment may leave
    // a gap).
    let mut end = 0;
    let ordered = params.iter().enumerate().all(|(i, &(offset, size))| {
        let fits = match abi {
            Abi::Pairs => offset == 8 * i,
            Abi::Params => offset >= end,
        };
        end = offset + size;
        fits
    });
    let fits = ordered
        && sizes.len() == expected.len()
        && sizes.iter().zip(&expected).all(|(a, (b, _))| a == b);
    if fits {
        return Ok(());
    }
    let want: Vec<String> = expected
        .iter()
        .map(|(size, what)| format!("{what} ({size} B)"))
        .collect();
    Err(ServerError::invalid(
        "kernel",
        name,
        format!(
            "its image takes {} parameters of sizes {sizes:?} bytes (offsets {:?}), but a launch \
             of its declared signature passes {}: {}",
            sizes.len(),
            params.iter().map(|&(o, _)| o).collect::<Vec<_>>(),
            expected.len(),
            want.join(", ")
        ),
    ))
}

/// Loads `source` for `gpu`: the builtins' image for its compute capability, or the
/// user's PTX, whose parameters are checked against its declared signature.
pub(crate) fn load(gpu: &Arc<Gpu>, source: &CudaKernelSource) -> Result<CudaKernel, ServerError> {
    let image = match &source.ptx {
        Ptx::User(ptx) => Image::Ptx(Arc::clone(ptx)),
        Ptx::Cubin(bytes) => Image::UserCubin(Arc::clone(bytes)),
        Ptx::Builtins => builtins_image(gpu.compute)?,
    };
    let module = raw::module_load(image.bytes())?;
    // Owned from here: an error below unloads the module.
    let mut kernel = CudaKernel {
        gpu: Arc::clone(gpu),
        module,
        function: 0,
        abi: source.abi,
        block: source.block,
    };
    let function = raw::module_function(module, &source.entry)?;
    if !matches!(source.ptx, Ptx::Builtins) {
        match raw::params(function)? {
            Some(params) => check_params(&source.name, &params, &source.signature, source.abi)?,
            None => {
                return Err(ServerError::invalid(
                    "kernel",
                    &source.name,
                    "this driver cannot report a kernel's parameters (cuFuncGetParamInfo \
                     came with CUDA 12.4), so a user kernel cannot be checked and is refused",
                ));
            }
        }
    }
    kernel.function = function;
    Ok(kernel)
}

/// Whether NVRTC can be loaded here (it runs without a GPU).
pub fn nvrtc_present() -> bool {
    raw::nvrtc_version().is_ok()
}

/// Which NVRTC loads here (the name or path it was found by) and its release; why none
/// does otherwise.
///
/// # Errors
///
/// Every library name tried and why it did not load.
pub fn nvrtc_version() -> Result<(String, (i32, i32)), String> {
    raw::nvrtc_version()
}

/// Compiles the builtins' CUDA C to PTX for `arch` (`compute_80`, `compute_90`) with
/// NVRTC, as the shipped PTX was made.
///
/// # Errors
///
/// NVRTC's refusal, with its log.
pub fn compile_builtins(arch: &str) -> Result<String, ServerError> {
    let bytes = raw::compile(BUILTINS_CU, arch, "builtins.cu", raw::Output::Ptx)?;
    String::from_utf8(bytes).map_err(|_| {
        ServerError::invalid(
            "CUDA C kernels",
            "builtins.cu",
            "NVRTC gave PTX that is not UTF-8",
        )
    })
}

/// Compiles a user's CUDA C (`source`, named `file` in NVRTC's messages) to PTX for
/// `arch` (`compute_80`, `compute_90`) with NVRTC, as the builtins are compiled
/// (`--fmad=false`, no headers): what a program ships beside its kernel source and hands
/// to [`CudaKernelSource::ptx`]. Runs without a GPU.
///
/// # Errors
///
/// [`ServerError::InvalidArgument`] naming `file`: NVRTC cannot be loaded, or refused
/// the source (its log is in the error), or gave PTX that is not UTF-8.
pub fn compile_ptx(source: &str, file: &str, arch: &str) -> Result<String, ServerError> {
    let bytes = raw::compile(source, arch, file, raw::Output::Ptx)?;
    String::from_utf8(bytes).map_err(|_| {
        ServerError::invalid("CUDA C kernels", file, "NVRTC gave PTX that is not UTF-8")
    })
}

/// Compiles the builtins' CUDA C to a cubin for `arch` (`sm_80`, `sm_90`) with NVRTC,
/// as the shipped cubins were made.
///
/// # Errors
///
/// NVRTC's refusal, with its log.
pub fn compile_builtins_cubin(arch: &str) -> Result<Vec<u8>, ServerError> {
    raw::compile(BUILTINS_CU, arch, "builtins.cu", raw::Output::Cubin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(n: usize) -> Vec<(usize, usize)> {
        (0..n).map(|i| (8 * i, 8)).collect()
    }

    #[test]
    fn a_kernel_taking_what_its_signature_passes_is_accepted() {
        let pairs = |sig| check_params("k", &params(5), &sig, Abi::Pairs);
        pairs(KernelSignature::new(2, 3)).unwrap();
        check_params("k", &params(4), &KernelSignature::new(2, 0), Abi::Pairs).unwrap();
        // (float* x, float* y, unsigned n, float2 ab): two pointers, a 4-byte and an
        // 8-byte scalar (aligned to 8, after a gap), no info.
        let sig = KernelSignature::of(&[
            Param::READ,
            Param::WRITE,
            Param::scalar::<u32>(),
            Param::scalar::<[f32; 2]>(),
        ]);
        check_params("k", &[(0, 8), (8, 8), (16, 4), (24, 8)], &sig, Abi::Params).unwrap();
        // With info words, their pointer comes last.
        let sig = KernelSignature::of(&[Param::READ_WRITE, Param::scalar::<u16>()]).with_info(2);
        check_params("k", &[(0, 8), (8, 2), (16, 8)], &sig, Abi::Params).unwrap();
    }

    #[test]
    fn a_kernel_whose_parameters_differ_is_refused_naming_it() {
        for (image, signature, abi) in [
            (params(3), KernelSignature::new(2, 1), Abi::Pairs),
            (params(5), KernelSignature::new(2, 0), Abi::Pairs),
            (vec![(0, 8), (8, 4)], KernelSignature::new(1, 0), Abi::Pairs),
            (
                vec![(0, 8), (16, 8)],
                KernelSignature::new(1, 0),
                Abi::Pairs,
            ),
            // A pointer and a length where the list says one pointer.
            (
                vec![(0, 8), (8, 8)],
                KernelSignature::of(&[Param::READ]),
                Abi::Params,
            ),
            // A 4-byte scalar where the list says 8.
            (
                vec![(0, 8), (8, 4)],
                KernelSignature::of(&[Param::READ, Param::scalar::<u64>()]),
                Abi::Params,
            ),
            // Overlapping offsets.
            (
                vec![(0, 8), (4, 4)],
                KernelSignature::of(&[Param::READ, Param::scalar::<u32>()]),
                Abi::Params,
            ),
        ] {
            let e = check_params("mine", &image, &signature, abi).unwrap_err();
            assert!(matches!(e, ServerError::InvalidArgument { .. }), "{e:?}");
            assert!(capture_core::Chain(&e).to_string().contains("mine"), "{e}");
        }
    }

    #[test]
    fn a_cubin_declaring_the_grid_dependency_wait_is_refused_naming_it() {
        let sig = KernelSignature::new(0, 0);
        let elf = b"\x7fELF and the rest".to_vec();
        CudaKernelSource::cubin("plain", elf.clone(), "plain", sig).unwrap();
        let e = CudaKernelSource::cubin("mine", elf, "mine", sig.with_grid_dependency_wait())
            .unwrap_err();
        assert!(matches!(e, ServerError::InvalidArgument { .. }), "{e:?}");
        assert!(
            e.to_string().contains("mine") && e.to_string().contains("cannot be checked"),
            "{e}"
        );
    }

    #[test]
    fn ptx_declaring_the_grid_dependency_wait_must_hold_it_in_its_entry() {
        const PTX: &str = ".version 8.8\n.target sm_90\n.address_size 64\n\
            .visible .entry waits(\n.param .u64 p\n)\n{\ngriddepcontrol.wait;\nret;\n}\n\
            .visible .entry waits_not(\n.param .u64 p\n)\n{\nret;\n}\n";
        let sig = KernelSignature::new(0, 0);
        let waits = sig.with_grid_dependency_wait();
        CudaKernelSource::ptx("waits", PTX.into(), "waits", waits).unwrap();
        // Not declared: nothing to check.
        CudaKernelSource::ptx("waits_not", PTX.into(), "waits_not", sig).unwrap();
        for entry in ["waits_not", "absent", "wait"] {
            let e = CudaKernelSource::ptx("mine", PTX.into(), entry, waits).unwrap_err();
            assert!(matches!(e, ServerError::InvalidArgument { .. }), "{e:?}");
            let text = e.to_string();
            assert!(
                text.contains("mine") && text.contains("no griddepcontrol.wait"),
                "{text}"
            );
        }
        // Every builtin waits on sm_90, so its signature says so.
        for b in Builtin::ALL {
            assert!(
                CudaKernelSource::builtin(b)
                    .signature()
                    .waits_for_grid_dependency()
            );
            let body = entry_body(BUILTINS_SM90, b.name()).unwrap();
            assert!(body.contains("griddepcontrol.wait"), "{}", b.name());
        }
    }

    #[test]
    fn the_builtins_load_from_a_cubin_where_one_applies() {
        assert!(matches!(builtins_image((9, 0)), Ok(Image::Cubin(c)) if c == BUILTINS_SM90_CUBIN));
        assert!(matches!(builtins_image((8, 6)), Ok(Image::Cubin(c)) if c == BUILTINS_SM80_CUBIN));
        assert!(matches!(builtins_image((10, 0)), Ok(Image::Ptx(_))));
        assert!(builtins_image((7, 5)).is_err());
    }
}
