//! Kernels: PTX modules. The builtins are CUDA C (`kernels/builtins.cu`), compiled by
//! NVRTC to PTX for sm_80 and sm_90 and shipped in the crate (a test recompiles them
//! and checks the shipped PTX is exactly NVRTC's output); users bring their own PTX.

use std::borrow::Cow;
use std::ffi::CString;
use std::sync::Arc;

use capture_core::{Builtin, KernelSignature, ServerError};

use crate::driver::Gpu;
use crate::raw;

/// The builtins' CUDA C source.
pub const BUILTINS_CU: &str = include_str!("../kernels/builtins.cu");
/// The builtins' PTX for compute capability 8.x (A100 and newer GPUs JIT it).
pub const BUILTINS_SM80: &str = include_str!("../kernels/builtins.sm_80.ptx");
/// The builtins' PTX for compute capability 9.0 and newer (H100, H200).
pub const BUILTINS_SM90: &str = include_str!("../kernels/builtins.sm_90.ptx");
/// The PTX ISA the shipped PTX declares (NVRTC 12.9).
pub const PTX_ISA: &str = "PTX ISA 8.8, from NVRTC 12.9";
/// The oldest driver that loads it.
pub const MIN_DRIVER: &str = "CUDA 12.9 PTX needs an NVIDIA driver of release 575 or newer";

/// The NVRTC architectures the builtins ship for, with their PTX.
pub const SHIPPED: [(&str, &str); 2] =
    [("compute_80", BUILTINS_SM80), ("compute_90", BUILTINS_SM90)];

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
        let _ = raw::make_current(self.gpu.context);
        raw::module_unload(self.module);
    }
}

/// Loads `source` for `gpu`: the builtins' PTX for its compute capability.
pub(crate) fn load(gpu: &Arc<Gpu>, source: &CudaKernelSource) -> Result<CudaKernel, ServerError> {
    let ptx = match &source.ptx {
        Ptx::User(ptx) => Arc::clone(ptx),
        Ptx::Builtins => {
            let text = match gpu.compute {
                (major, _) if major >= 9 => BUILTINS_SM90,
                (8, _) => BUILTINS_SM80,
                (major, minor) => {
                    return Err(ServerError::invalid(
                        "device",
                        format!("compute capability {major}.{minor}"),
                        "the shipped PTX targets compute capability 8.0 and newer",
                    ));
                }
            };
            Arc::new(CString::new(text).expect("shipped PTX has no NUL"))
        }
    };
    let module = raw::module_load(&ptx)?;
    let function = match raw::module_function(module, &source.entry) {
        Ok(f) => f,
        Err(e) => {
            raw::module_unload(module);
            return Err(e);
        }
    };
    Ok(CudaKernel {
        gpu: Arc::clone(gpu),
        module,
        function,
    })
}

/// Whether NVRTC can be loaded here (it runs without a GPU).
pub fn nvrtc_present() -> bool {
    raw::nvrtc_present()
}

/// Compiles the builtins' CUDA C to PTX for `arch` (`compute_80`, `compute_90`) with
/// NVRTC, as the shipped PTX was made.
///
/// # Errors
///
/// NVRTC's refusal, with its log.
pub fn compile_builtins(arch: &'static str) -> Result<String, ServerError> {
    raw::compile_ptx(BUILTINS_CU, arch, "builtins.cu")
}
