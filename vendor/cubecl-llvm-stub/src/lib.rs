//! Offline stand-in for `cubecl-llvm` 0.11.3.
//!
//! `cubecl-cuda` depends on `cubecl-llvm` unconditionally, and the real crate downloads an LLVM
//! bundle from GitHub in its build script, which cannot work on a machine without network access.
//! We compile kernels with NVRTC instead (`cubecl-cuda/cpp`), so the LLVM compiler is never
//! constructed; this crate only keeps the items `cubecl-cuda` names so that it type-checks.
//! `compile` returns an error that says what to do. Re-check this crate on every cubecl upgrade.

use cubecl_core::ir::DeviceProperties;
use cubecl_core::prelude::KernelDefinition;
use cubecl_environment::backtrace::BackTrace;
use cubecl_runtime::compiler::{CompilationError, Compiler};
use cubecl_runtime::kernel::BufferIOAttr;

pub mod nvptx {
    pub mod ptx_version {
        use core::fmt;

        /// PTX ISA version supported by a given driver version.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct PtxVersion(u32);

        const DRIVER_PTX: &[(i32, u32)] = &[
            (13030, 93), (13020, 92), (13010, 91), (13000, 90), (12090, 88), (12080, 87),
            (12070, 86), (12050, 85), (12040, 84), (12030, 83), (12020, 82), (12010, 81),
            (12000, 80), (11080, 78), (11070, 77), (11060, 76), (11050, 75), (11040, 74),
            (11030, 73), (11020, 72), (11010, 71), (11000, 70), (10020, 65), (10010, 64),
            (10000, 63),
        ];

        impl PtxVersion {
            pub fn for_driver(driver: i32) -> Option<Self> {
                DRIVER_PTX.iter().find(|(d, _)| driver >= *d).map(|(_, p)| Self(*p))
            }
        }

        impl fmt::Display for PtxVersion {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "ptx{}", self.0)
            }
        }
    }
}

pub mod shared {
    pub mod lowered_features {
        use super::super::DeviceProperties;

        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum GpuTarget {
            Nvptx,
            AmdGpu,
        }

        /// Only called when the LLVM backend is selected, which never happens with NVRTC.
        pub fn restrict_features(_props: &mut DeviceProperties, _target: GpuTarget) {}
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LlvmTarget {
    #[default]
    Cpu,
    AmdGpu,
    Nvptx,
}

#[derive(Clone, Debug)]
pub struct NvptxModule {
    pub ptx: Vec<core::ffi::c_char>,
    pub entrypoint: String,
    pub ir: String,
    pub shared_memory_size: usize,
    pub io: Vec<BufferIOAttr>,
}

#[derive(Clone, Debug, Default)]
pub struct PlironOptions {
    pub cpu_buffer_alignment: Option<u32>,
    pub arch: Option<()>,
    pub sm_arch: Option<cubecl_core::ir::nvidia::SmArch>,
    pub ptx_version: Option<nvptx::ptx_version::PtxVersion>,
    pub grid_constants: bool,
}

#[derive(Clone, Debug)]
pub enum PlironArtifact {
    NvptxCode(NvptxModule),
    Unavailable,
}

impl core::fmt::Display for PlironArtifact {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PlironArtifact::NvptxCode(m) => f.write_str(&m.ir),
            PlironArtifact::Unavailable => f.write_str("<llvm backend stubbed out>"),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct PlironCompiler {
    pub target: LlvmTarget,
}

impl Compiler for PlironCompiler {
    type Representation = PlironArtifact;
    type CompilationOptions = PlironOptions;

    fn compile(
        &mut self,
        _kernel: KernelDefinition,
        _options: &Self::CompilationOptions,
    ) -> Result<Self::Representation, CompilationError> {
        Err(CompilationError::Generic {
            reason: "cubecl-llvm is a stand-in in libreyolo-run; kernels compile with NVRTC \
                     (enable cubecl-cuda's `cpp` feature)"
                .into(),
            backtrace: BackTrace::capture(),
        })
    }

    fn extension(&self) -> &'static str {
        "ll"
    }

    fn lang_tag(&self) -> &'static str {
        "llvm"
    }
}
