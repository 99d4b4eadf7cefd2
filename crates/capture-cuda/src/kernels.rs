//! Kernels: CUDA modules. The builtins are CUDA C (`kernels/builtins.cu`), compiled by
//! NVRTC to cubins for sm_80 and sm_90 (loaded without the driver's JIT on the common
//! GPUs) and to PTX for compute_80 and compute_90 (JIT-compiled on any other GPU of
//! those generations or newer), all shipped in the crate; a test recompiles them and
//! checks the shipped images are exactly NVRTC's output. Users bring their own PTX,
//! whose parameter list is checked against the declared signature at load.

use std::borrow::Cow;
use std::ffi::CString;
use std::sync::Arc;

use capture_core::{Builtin, KernelSignature, ServerError};

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

/// Threads per block of every launch.
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
}

#[derive(Clone, Debug)]
enum Ptx {
    Builtins,
    User(Arc<CString>),
}

impl CudaKernelSource {
    /// A PTX kernel with entry point `entry` and `signature`: each of its buffers is
    /// passed as a pointer and its length in bytes (two 64-bit arguments), and, when it
    /// takes info words, a pointer to them comes last.
    ///
    /// The PTX's parameter list is checked against `signature` when the kernel loads
    /// (the driver reads the count from the image, so a mismatch would read past the
    /// arguments): a kernel whose parameters differ is refused with
    /// [`ServerError::InvalidArgument`], and so is any user kernel on a driver that cannot
    /// report its parameters (`cuFuncGetParamInfo`, CUDA 12.4 and newer).
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the kernel when the PTX or the entry name
    /// holds a NUL byte, or the PTX lacks a `.version` directive.
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
        let ptx = CString::new(ptx)
            .map_err(|_| ServerError::invalid("PTX", &name, "it contains a NUL byte"))?;
        let entry = CString::new(entry)
            .map_err(|_| ServerError::invalid("entry point", &name, "it contains a NUL byte"))?;
        Ok(Self {
            name,
            ptx: Ptx::User(Arc::new(ptx)),
            entry,
            signature,
        })
    }

    /// The builtin `kernel`.
    pub fn builtin(kernel: Builtin) -> Self {
        Self {
            name: Cow::Borrowed(kernel.name()),
            ptx: Ptx::Builtins,
            entry: CString::new(kernel.name()).expect("no NUL"),
            signature: kernel.signature(),
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

/// A loaded kernel.
pub struct CudaKernel {
    gpu: Arc<Gpu>,
    module: usize,
    pub(crate) function: usize,
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
    Ptx(Arc<CString>),
}

impl Image {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Cubin(bytes) => bytes,
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

/// Checks a kernel's parameters, as its image declares them (`(offset, size)` each), against
/// what a launch of `signature` passes: two 8-byte arguments per buffer, and one for the
/// info words when it takes any.
pub(crate) fn check_params(
    name: &str,
    params: &[(usize, usize)],
    signature: KernelSignature,
) -> Result<(), ServerError> {
    let expected = 2 * signature.buffers() + usize::from(signature.info_words() > 0);
    let sizes: Vec<usize> = params.iter().map(|&(_, size)| size).collect();
    let fits = sizes.len() == expected
        && params
            .iter()
            .enumerate()
            .all(|(i, &(offset, size))| size == 8 && offset == 8 * i);
    if fits {
        return Ok(());
    }
    Err(ServerError::invalid(
        "kernel",
        name,
        format!(
            "its image takes {} parameters of sizes {sizes:?} bytes, but a launch of its \
             declared signature ({} buffers, {} info words) passes {expected} 8-byte \
             arguments (a pointer and a length per buffer, then the info pointer)",
            sizes.len(),
            signature.buffers(),
            signature.info_words()
        ),
    ))
}

/// Loads `source` for `gpu`: the builtins' image for its compute capability, or the
/// user's PTX, whose parameters are checked against its declared signature.
pub(crate) fn load(gpu: &Arc<Gpu>, source: &CudaKernelSource) -> Result<CudaKernel, ServerError> {
    let image = match &source.ptx {
        Ptx::User(ptx) => Image::Ptx(Arc::clone(ptx)),
        Ptx::Builtins => builtins_image(gpu.compute)?,
    };
    let module = raw::module_load(image.bytes())?;
    // Owned from here: an error below unloads the module.
    let mut kernel = CudaKernel {
        gpu: Arc::clone(gpu),
        module,
        function: 0,
    };
    let function = raw::module_function(module, &source.entry)?;
    if let Ptx::User(_) = source.ptx {
        match raw::params(function)? {
            Some(params) => check_params(&source.name, &params, source.signature)?,
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
        check_params("k", &params(5), KernelSignature::new(2, 3)).unwrap();
        check_params("k", &params(4), KernelSignature::new(2, 0)).unwrap();
    }

    #[test]
    fn a_kernel_whose_parameters_differ_is_refused_naming_it() {
        for (image, signature) in [
            (params(3), KernelSignature::new(2, 1)),
            (params(5), KernelSignature::new(2, 0)),
            (vec![(0, 8), (8, 4)], KernelSignature::new(1, 0)),
            (vec![(0, 8), (16, 8)], KernelSignature::new(1, 0)),
        ] {
            let e = check_params("mine", &image, signature).unwrap_err();
            assert!(matches!(e, ServerError::InvalidArgument { .. }), "{e:?}");
            assert!(capture_core::Chain(&e).to_string().contains("mine"), "{e}");
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
