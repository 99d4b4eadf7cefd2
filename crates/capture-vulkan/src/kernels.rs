//! Kernels: SPIR-V compute pipelines. The builtins are WGSL, turned into SPIR-V with naga
//! on first use and cached for the process; users bring their own SPIR-V (or WGSL, which
//! naga turns into SPIR-V) with a signature, which is checked against the module before
//! any driver sees it (reflected by naga's SPIR-V front end and validator):
//! - the compute entry point named exists; its workgroup size becomes the kernel's
//!   block, which a launch that gives one must match;
//! - every resource it uses is a storage buffer of set 0 at a binding the signature
//!   declares (buffers at bindings `0..buffers` in parameter order, the info words at
//!   binding `buffers`) or, when the kernel takes scalars, its push-constant block; no
//!   uniform buffers, images or samplers;
//! - each buffer's access as the shader makes it: a buffer declared read it must not
//!   write, one declared written it must write, one declared write-only it must not
//!   read; the info words' binding it must read and not write (so a signature declaring
//!   one buffer too many, whose last buffer the shader reads as its info words, is
//!   refused);
//! - its push-constant block has one member per scalar, each at the offset and of the
//!   size the scalars' layout gives them ([`Param::scalar_offset`]), and of the type the
//!   signature declares where it declares one ([`Param::scalar`]: a `u32` member for a
//!   `Param::scalar::<f32>()` is refused; [`Param::scalar_struct`] checks the size
//!   alone).

use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex};

use capture_core::{Access, Builtin, KernelSignature, Param, ScalarType, ServerError};

use crate::raw::{self, Gpu, KernelObjects};

/// A kernel before it is loaded.
#[derive(Clone, Debug)]
pub struct VulkanKernelSource {
    name: Cow<'static, str>,
    code: Code,
    entry: CString,
    signature: KernelSignature,
}

#[derive(Clone, Debug)]
enum Code {
    Wgsl(&'static str),
    Spirv(Arc<[u32]>),
}

impl VulkanKernelSource {
    /// A SPIR-V compute kernel with entry point `entry` and `signature`: its buffers are
    /// storage buffers at bindings `0..buffers` of set 0, in parameter order; when it
    /// takes info words, their buffer is at binding `buffers`; its scalars are its push
    /// constants, laid out in parameter order ([`Param::scalar_offset`]). The module is
    /// checked against the signature here (see the module's header), and the signature
    /// gains the entry point's workgroup size as the kernel's block.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the kernel for empty SPIR-V, a bad magic
    /// number, words naga's SPIR-V front end or validator refuses, no compute entry point
    /// `entry`, a resource the entry point uses that the layout lacks (a binding past the
    /// signature's, another descriptor set, a uniform buffer, an image or sampler, push
    /// constants for a kernel without scalars), a buffer whose access disagrees with the
    /// signature's, an info binding the shader does not read (or writes), a push-constant
    /// block that disagrees with the scalars, or an entry name with a NUL byte.
    pub fn spirv(
        name: impl Into<Cow<'static, str>>,
        words: Vec<u32>,
        entry: &str,
        signature: KernelSignature,
    ) -> Result<Self, ServerError> {
        let name = name.into();
        if words.first() != Some(&0x0723_0203) {
            return Err(ServerError::invalid(
                "SPIR-V",
                &name,
                "the words do not start with the SPIR-V magic number",
            ));
        }
        let entry_c = CString::new(entry)
            .map_err(|_| ServerError::invalid("entry point", &name, "it contains a NUL byte"))?;
        let block = check_spirv(&name, &words, entry, &signature)?;
        Ok(Self {
            name,
            code: Code::Spirv(words.into()),
            entry: entry_c,
            signature: signature.with_block(block),
        })
    }

    /// A WGSL compute kernel, turned into SPIR-V by naga (push constants are WGSL's
    /// `var<immediate>`), then taken as [`spirv`](Self::spirv) takes it.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the kernel with naga's message for WGSL it
    /// refuses; otherwise as [`spirv`](Self::spirv).
    pub fn wgsl(
        name: impl Into<Cow<'static, str>>,
        source: &str,
        entry: &str,
        signature: KernelSignature,
    ) -> Result<Self, ServerError> {
        let name = name.into();
        let words = wgsl_to_spirv(&name, source)?;
        Self::spirv(name, words.to_vec(), entry, signature)
    }

    /// The builtin `kernel`.
    pub fn builtin(kernel: Builtin) -> Self {
        Self {
            name: Cow::Borrowed(kernel.name()),
            code: Code::Wgsl(wgsl(kernel)),
            entry: CString::new("main").expect("no NUL"),
            signature: kernel.signature(),
        }
    }

    /// A kernel of the backend's own in WGSL it ships (the loop replays' setter), taken
    /// as a builtin is: entry point `main`, its buffers at bindings `0..buffers` of set
    /// 0, its scalars as push constants.
    pub(crate) fn internal(
        name: &'static str,
        source: &'static str,
        signature: KernelSignature,
    ) -> Self {
        Self {
            name: Cow::Borrowed(name),
            code: Code::Wgsl(source),
            entry: CString::new("main").expect("no NUL"),
            signature,
        }
    }

    /// The kernel's name.
    pub fn name(&self) -> &Cow<'static, str> {
        &self.name
    }

    /// What the kernel takes (with its workgroup size as its block, for user kernels).
    pub fn signature(&self) -> KernelSignature {
        self.signature
    }
}

/// A loaded kernel: its pipeline.
pub struct VulkanKernel {
    gpu: Arc<Gpu>,
    pub(crate) objects: KernelObjects,
}

impl Drop for VulkanKernel {
    fn drop(&mut self) {
        self.gpu.idle();
        raw::destroy_kernel(&self.gpu, &self.objects);
    }
}

/// Checks a user's SPIR-V against what the driver is promised (see the module's header),
/// naming the kernel in the refusal; the entry point's workgroup size.
fn check_spirv(
    name: &str,
    words: &[u32],
    entry: &str,
    signature: &KernelSignature,
) -> Result<[u32; 3], ServerError> {
    use naga::valid::GlobalUse;
    use naga::{AddressSpace, StorageAccess};

    let bad = |why: String| ServerError::invalid("SPIR-V", name, why);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let options = naga::front::spv::Options {
        adjust_coordinate_space: false,
        ..Default::default()
    };
    let module = naga::front::spv::parse_u8_slice(&bytes, &options)
        .map_err(|e| bad(format!("naga's SPIR-V front end refused it: {e}")))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| bad(format!("it does not validate: {}", e.as_inner())))?;
    let Some(index) = module
        .entry_points
        .iter()
        .position(|ep| ep.name == entry && ep.stage == naga::ShaderStage::Compute)
    else {
        return Err(bad(format!(
            "it has no compute entry point named {entry:?}"
        )));
    };
    let used = info.get_entry_point(index);
    let buffers: Vec<Param> = signature
        .params()
        .iter()
        .copied()
        .filter(|p| p.is_buffer())
        .collect();
    let info_binding = signature.has_info().then_some(buffers.len() as u32);
    let bindings = buffers.len() + usize::from(signature.has_info());
    let declared = match info_binding {
        Some(at) => {
            format!("storage buffers at bindings 0..{at} of set 0, the info words at binding {at}")
        }
        None => format!("storage buffers at bindings 0..{} of set 0", buffers.len()),
    } + if signature.scalars() > 0 {
        ", and its scalars as push constants"
    } else {
        ""
    };
    let mut info_read = false;
    let mut push_seen = false;
    for (handle, var) in module.global_variables.iter() {
        let uses = used[handle];
        if uses.is_empty() {
            continue;
        }
        let what = var.name.as_deref().unwrap_or("a global");
        let at = var
            .binding
            .as_ref()
            .map(|b| format!("set {} binding {}", b.group, b.binding));
        let kind = match var.space {
            AddressSpace::Storage { .. } => None,
            AddressSpace::Immediate if signature.scalars() > 0 => {
                check_push_block(&module, var.ty, signature).map_err(|why| {
                    bad(format!(
                        "entry point {entry:?}'s push constants ({what}) do not fit its \
                         scalars: {why}"
                    ))
                })?;
                push_seen = true;
                continue;
            }
            AddressSpace::Uniform => Some("a uniform buffer"),
            AddressSpace::Handle => Some("an image or sampler"),
            AddressSpace::Immediate => Some("push constants"),
            _ => continue,
        };
        if let Some(kind) = kind {
            return Err(bad(format!(
                "entry point {entry:?} uses {kind} ({what}{}); the layout has only {declared}",
                at.map(|a| format!(" at {a}")).unwrap_or_default()
            )));
        }
        let binding = match &var.binding {
            Some(b) if b.group == 0 && (b.binding as usize) < bindings => b.binding,
            _ => {
                return Err(bad(format!(
                    "entry point {entry:?} uses the storage buffer {what} at {}, which the \
                     signature does not declare: the layout has only {declared}",
                    at.unwrap_or_else(|| "no binding".into())
                )));
            }
        };
        let may_write = match var.space {
            AddressSpace::Storage { access } => access.contains(StorageAccess::STORE),
            _ => false,
        };
        let writes = may_write && uses.contains(GlobalUse::WRITE);
        let reads = uses.contains(GlobalUse::READ);
        if Some(binding) == info_binding {
            if writes {
                return Err(bad(format!(
                    "entry point {entry:?} writes binding {binding} ({what}), where the \
                     signature puts its info words, which a kernel only reads"
                )));
            }
            info_read = reads;
            continue;
        }
        let param = buffers[binding as usize];
        let problem = match param {
            Param::Buffer(Access::Read) if writes => Some("writes it, declared read"),
            Param::Buffer(Access::Write | Access::ReadWrite) if !writes => {
                Some("never writes it, declared written")
            }
            Param::Buffer(Access::Write) if reads => {
                Some("reads it, declared write-only (declare it read-write)")
            }
            _ => None,
        };
        if let Some(problem) = problem {
            return Err(bad(format!(
                "entry point {entry:?} {problem}: buffer {binding} ({what}); a launch's \
                 access must be the kernel's, or taint and cross-stream order follow the \
                 wrong one"
            )));
        }
    }
    if let Some(at) = info_binding
        && !info_read
    {
        return Err(bad(format!(
            "the signature puts {} info words at binding {at}, which entry point {entry:?} \
             does not read: does the signature declare a buffer too many (the shader then \
             reads that buffer as its info words)?",
            signature.info_words()
        )));
    }
    if signature.scalars() > 0 && !push_seen {
        return Err(bad(format!(
            "the signature declares {} scalars, which entry point {entry:?} does not take \
             (it uses no push constants)",
            signature.scalars()
        )));
    }
    Ok(module.entry_points[index].workgroup_size)
}

/// Checks a push-constant block's type against the scalars' layout: a struct with one
/// member per scalar at its offset and of its size (a single scalar may be the block
/// itself), each of the type the signature declares for it, where it declares one
/// ([`Param::scalar`]: every leaf of the member, a vector's or an array's elements
/// included, of that type).
fn check_push_block(
    module: &naga::Module,
    ty: naga::Handle<naga::Type>,
    signature: &KernelSignature,
) -> Result<(), String> {
    let gctx = module.to_ctx();
    let mut expected = Vec::new();
    let mut types = Vec::new();
    let mut end = 0;
    for p in signature.params() {
        if let Param::Scalar { bytes, element } = *p {
            let at = Param::scalar_offset(end, bytes);
            expected.push((at, u32::from(bytes)));
            types.push(element);
            end = at + u32::from(bytes);
        }
    }
    let members = |ty: naga::Handle<naga::Type>| -> Vec<(u32, u32, naga::Handle<naga::Type>)> {
        match &module.types[ty].inner {
            naga::TypeInner::Struct { members, .. } => members
                .iter()
                .map(|m| (m.offset, module.types[m.ty].inner.size(gctx), m.ty))
                .collect(),
            other => vec![(0, other.size(gctx), ty)],
        }
    };
    let mut found = members(ty);
    // A SPIR-V writer may wrap the block's struct in a struct of one member (naga does):
    // the scalars are that member's members.
    let shape = |m: &[(u32, u32, naga::Handle<naga::Type>)]| -> Vec<(u32, u32)> {
        m.iter().map(|&(o, s, _)| (o, s)).collect()
    };
    if shape(&found) != expected
        && let [(0, _, inner)] = found[..]
        && matches!(module.types[inner].inner, naga::TypeInner::Struct { .. })
    {
        found = members(inner);
    }
    let layout = shape(&found);
    if layout != expected {
        return Err(format!(
            "its members are (offset, size) {layout:?} bytes; the scalars are laid out as {expected:?}"
        ));
    }
    for (i, (&(_, _, member), declared)) in found.iter().zip(&types).enumerate() {
        let Some(declared) = *declared else { continue };
        let mut leaves = Vec::new();
        leaf_types(module, member, &mut leaves);
        if let Some(other) = leaves.iter().find(|&&t| t != Some(declared)) {
            let shader =
                other.map_or_else(|| "a type no scalar has".to_string(), |t| t.to_string());
            return Err(format!(
                "scalar {i} is {shader} in the shader; the signature declares {declared}"
            ));
        }
    }
    Ok(())
}

/// The scalar type of every leaf of `ty` (a vector's, a matrix's and an array's
/// elements, a struct's members), `None` for one no [`ScalarType`] names (a bool).
fn leaf_types(
    module: &naga::Module,
    ty: naga::Handle<naga::Type>,
    out: &mut Vec<Option<ScalarType>>,
) {
    match &module.types[ty].inner {
        naga::TypeInner::Scalar(s)
        | naga::TypeInner::Vector { scalar: s, .. }
        | naga::TypeInner::Matrix { scalar: s, .. }
        | naga::TypeInner::Atomic(s) => out.push(scalar_type(*s)),
        naga::TypeInner::Array { base, .. } => leaf_types(module, *base, out),
        naga::TypeInner::Struct { members, .. } => {
            for m in members {
                leaf_types(module, m.ty, out);
            }
        }
        _ => out.push(None),
    }
}

/// The [`ScalarType`] of a naga scalar, if one names it.
fn scalar_type(s: naga::Scalar) -> Option<ScalarType> {
    use naga::ScalarKind::{Float, Sint, Uint};
    Some(match (s.kind, s.width) {
        (Uint, 1) => ScalarType::U8,
        (Sint, 1) => ScalarType::I8,
        (Uint, 2) => ScalarType::U16,
        (Sint, 2) => ScalarType::I16,
        (Uint, 4) => ScalarType::U32,
        (Sint, 4) => ScalarType::I32,
        (Float, 4) => ScalarType::F32,
        (Uint, 8) => ScalarType::U64,
        (Sint, 8) => ScalarType::I64,
        (Float, 8) => ScalarType::F64,
        _ => return None,
    })
}

/// SPIR-V compiled from WGSL, by source text.
type SpirvCache = HashMap<&'static str, Arc<[u32]>>;

static SPIRV: Mutex<Option<SpirvCache>> = Mutex::new(None);

/// WGSL turned into SPIR-V, once per process per source.
fn compile(name: &str, source: &'static str) -> Result<Arc<[u32]>, ServerError> {
    let mut cache = SPIRV.lock().unwrap_or_else(|p| p.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(words) = cache.get(source) {
        return Ok(Arc::clone(words));
    }
    let words = wgsl_to_spirv(name, source)?;
    cache.insert(source, Arc::clone(&words));
    Ok(words)
}

/// WGSL turned into SPIR-V 1.3 by naga (push constants, WGSL's `var<immediate>`,
/// allowed), as the builtins and [`VulkanKernelSource::wgsl`] are: for a pipeline of the
/// caller's own that its work ([`VulkanWork`](crate::VulkanWork)) dispatches.
///
/// # Errors
///
/// [`ServerError::InvalidArgument`] naming `name` with naga's message.
pub fn compile_wgsl(name: &str, source: &str) -> Result<Vec<u32>, ServerError> {
    wgsl_to_spirv(name, source).map(|w| w.to_vec())
}

/// WGSL turned into SPIR-V 1.3 by naga (push constants allowed).
fn wgsl_to_spirv(name: &str, source: &str) -> Result<Arc<[u32]>, ServerError> {
    let bad = |what: String| ServerError::invalid("WGSL kernel", name, what);
    let module = naga::front::wgsl::parse_str(source).map_err(|e| bad(e.emit_to_string(source)))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::IMMEDIATES,
    )
    .validate(&module)
    .map_err(|e| bad(format!("{e:?}")))?;
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    Ok(naga::back::spv::write_vec(&module, &info, &options, None)
        .map_err(|e| bad(e.to_string()))?
        .into())
}

/// Builds the pipeline for `source`.
pub(crate) fn load(
    gpu: &Arc<Gpu>,
    source: &VulkanKernelSource,
) -> Result<VulkanKernel, ServerError> {
    let words = match &source.code {
        Code::Wgsl(text) => compile(&source.name, text)?,
        Code::Spirv(words) => Arc::clone(words),
    };
    let signature = source.signature;
    let bindings = (signature.buffers() + usize::from(signature.has_info())) as u32;
    let objects = raw::kernel(
        gpu,
        &words,
        &source.entry,
        bindings,
        signature.scalar_bytes(),
    )?;
    Ok(VulkanKernel {
        gpu: Arc::clone(gpu),
        objects,
    })
}

/// The WGSL source of builtin `kernel`, as this backend compiles it: its buffers storage
/// buffers of set 0 at bindings `0..buffers` in parameter order, its info words (the
/// little-endian bytes of [`Builtin::info`], read as `u32`s) at the next binding,
/// workgroups of 64 threads in a grid-stride loop. For a pipeline of the caller's own
/// that runs a builtin outside the runtime ([`compile_wgsl`] turns it into SPIR-V), as
/// capture-cuda's `BUILTINS_CU` is the builtins' CUDA C.
pub fn builtin_wgsl(kernel: Builtin) -> &'static str {
    wgsl(kernel)
}

/// The WGSL of a builtin (its buffers are bound in order, its info words after them).
fn wgsl(kernel: Builtin) -> &'static str {
    match kernel {
        Builtin::Fill => FILL,
        Builtin::AddScalar => ADD_SCALAR,
        Builtin::MulScalar => MUL_SCALAR,
        Builtin::Axpy => AXPY,
        Builtin::Copy => COPY,
        Builtin::RowBias => ROW_BIAS,
    }
}

macro_rules! unary {
    ($name:ident, $y:literal, $expr:literal) => {
        const $name: &str = concat!(
            "@group(0) @binding(0) var<storage, read> x: array<f32>;\n",
            "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n",
            "@group(0) @binding(2) var<storage, read> info: array<u32>;\n",
            "@compute @workgroup_size(64)\n",
            "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {\n",
            "    let stride = groups.x * 64u;\n",
            "    let n = min(info[0], min(arrayLength(&x), arrayLength(&y)));\n",
            "    let a = bitcast<f32>(info[2]);\n",
            "    for (var i = gid.x; i < n; i = i + stride) {\n",
            "        ", $y, " = ", $expr, ";\n",
            "    }\n",
            "}\n"
        );
    };
}

unary!(ADD_SCALAR, "y[i]", "x[i] + a");
unary!(MUL_SCALAR, "y[i]", "x[i] * a");
unary!(AXPY, "y[i]", "y[i] + a * x[i]");
unary!(COPY, "y[i]", "x[i]");

const FILL: &str = "
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 64u;
    let n = min(info[0], arrayLength(&out));
    let a = bitcast<f32>(info[2]);
    for (var i = gid.x; i < n; i = i + stride) {
        out[i] = a;
    }
}
";

const ROW_BIAS: &str = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 64u;
    let cols = max(info[2], 1u);
    let n = min(info[0] * info[2], min(arrayLength(&x), arrayLength(&y)));
    for (var k = gid.x; k < n; k = k + stride) {
        y[k] = x[k] + f32(k / cols);
    }
}
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_compiles_to_spirv() {
        for b in Builtin::ALL {
            let source = wgsl(b);
            let words = compile(b.name(), source).expect("compiles");
            assert_eq!(words[0], 0x0723_0203, "{}", b.name());
        }
    }

    #[test]
    fn every_builtin_passes_the_user_spirv_check() {
        for b in Builtin::ALL {
            let words = compile(b.name(), wgsl(b)).expect("compiles");
            check_spirv(b.name(), &words, "main", &b.signature())
                .unwrap_or_else(|e| panic!("{}: {e}", b.name()));
        }
    }

    #[test]
    fn bad_spirv_is_refused_naming_the_kernel() {
        let err =
            VulkanKernelSource::spirv("mine", vec![1, 2, 3], "main", KernelSignature::new(1, 0))
                .unwrap_err();
        assert!(err.to_string().contains("invalid SPIR-V mine"), "{err}");
    }
}
