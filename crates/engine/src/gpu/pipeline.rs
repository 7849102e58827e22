//! What a compute pipeline is made of: a kernel variant ([`KernelSpec`], one type per
//! kernel family, beside its op in `ops/`), its WGSL ([`Wgsl`]: files of `shaders/` and
//! the variant's constants, put together by the op that owns the kernel) and the key the
//! cache holds it under ([`SpecKey`]: the spec itself, of whichever type). Compiling and
//! caching: [`cache`] ([`PipelineCache`]). This module knows no op by name; adding a
//! specialisation to a kernel touches its spec type and its shader only.

use std::any::{Any, TypeId};
use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::error::Result;
use crate::gpu::GpuContext;

pub mod cache;

pub use cache::{Pipeline, PipelineCache};

/// A kernel variant: the value that picks every part of a shader's text, and the
/// pipeline cache's key for it.
///
/// [`KernelSpec::source`] is a function of the spec alone (no environment, no device, no
/// global), so two equal specs compile the same shader and everything that changes the
/// text is in the key. Implemented by one type per kernel family (`ops::embed::EmbedSpec`,
/// `ops::matmul::MatvecSpec`, …), which derives `Hash` and `Eq`.
pub trait KernelSpec: fmt::Debug + Clone + Eq + Hash + Send + Sync + 'static {
    /// The pipeline's label (`op` or `op[encoding]`) for compile errors and GPU captures.
    fn label(&self) -> String;

    /// The WGSL of this variant (entry point `main`).
    ///
    /// Errors: [`crate::EngineError::Op`] for a variant without a shader (an encoding
    /// the kernels do not read).
    fn source(&self) -> Result<String>;
}

/// A [`KernelSpec`] of any kernel family, compared and hashed with its type (specs of
/// two families are never equal).
pub(crate) trait AnySpec: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn eq_any(&self, other: &dyn AnySpec) -> bool;
    fn hash_any(&self, h: &mut dyn Hasher);
    fn fmt_any(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl<S: KernelSpec> AnySpec for S {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn eq_any(&self, other: &dyn AnySpec) -> bool {
        other.as_any().downcast_ref::<S>() == Some(self)
    }

    fn hash_any(&self, mut h: &mut dyn Hasher) {
        TypeId::of::<S>().hash(&mut h);
        self.hash(&mut h);
    }

    fn fmt_any(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl PartialEq for dyn AnySpec {
    fn eq(&self, other: &Self) -> bool {
        self.eq_any(other)
    }
}

impl Eq for dyn AnySpec {}

impl Hash for dyn AnySpec {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.hash_any(h);
    }
}

/// The pipeline cache's key: a spec of any kernel family. Looked up by `&dyn AnySpec`
/// (no allocation for a pipeline already built).
pub struct SpecKey(Box<dyn AnySpec>);

impl SpecKey {
    pub fn new<S: KernelSpec>(spec: &S) -> Self {
        SpecKey(Box::new(spec.clone()))
    }
}

impl PartialEq for SpecKey {
    fn eq(&self, other: &Self) -> bool {
        *self.0 == *other.0
    }
}

impl Eq for SpecKey {}

impl Hash for SpecKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (*self.0).hash(h);
    }
}

impl Borrow<dyn AnySpec> for SpecKey {
    fn borrow(&self) -> &(dyn AnySpec + 'static) {
        &*self.0
    }
}

impl fmt::Debug for SpecKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_any(f)
    }
}

/// A shader's source as its op puts it together: directives first, then the variant's
/// constants (`const NAME: u32 = …;`) and the files of `shaders/` it picks, in order.
/// (WGSL declarations may come in any order: only directives must lead.)
#[derive(Debug, Default)]
pub struct Wgsl {
    directives: String,
    body: String,
}

impl Wgsl {
    pub fn new() -> Self {
        Self::default()
    }

    /// A file of directives (`enable …;`), placed before every declaration.
    pub fn directives(mut self, text: &str) -> Self {
        self.directives.push_str(text);
        self
    }

    /// `const NAME: u32 = VALUEu;`.
    pub fn u32(mut self, name: &str, value: u32) -> Self {
        self.body
            .push_str(&format!("const {name}: u32 = {value}u;\n"));
        self
    }

    /// `const NAME: u32 = 1u;` (or `0u`): a switch the shader tests as `NAME == 1u`.
    pub fn flag(self, name: &str, on: bool) -> Self {
        self.u32(name, u32::from(on))
    }

    /// `const NAME: f32 = VALUE;`, written so that it reads back as the same f32.
    pub fn f32(mut self, name: &str, value: f32) -> Self {
        self.body
            .push_str(&format!("const {name}: f32 = {value:?};\n"));
        self
    }

    /// A file of `shaders/` (its text, from `include_str!`).
    pub fn file(mut self, text: &str) -> Self {
        self.body.push_str(text);
        self
    }

    /// The source.
    pub fn build(self) -> String {
        self.directives + &self.body
    }
}

/// Whether shaders may be built without wgpu's runtime bounds checks: on Vulkan (where
/// robust buffer access stands behind them) unless `RWKV_CHECKED_SHADERS` is set
/// ([`crate::gpu::Tuning::checked_shaders`]).
pub(crate) fn unchecked_ok(ctx: &GpuContext) -> bool {
    ctx.adapter.get_info().backend == wgpu::Backend::Vulkan && !ctx.tuning.checked_shaders
}
