//! Where candidates run. Each target names the worker that evaluates it and the dialect of its kernels.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Target {
    /// C kernels compiled by the system compiler, run in the worker through ctypes.
    #[serde(rename = "cpu")]
    Cpu,
    /// Metal kernel bodies through `mx.fast.metal_kernel` (Apple GPUs).
    #[serde(rename = "mlx-metal")]
    MlxMetal,
    /// CUDA kernel bodies through `mx.fast.cuda_kernel` (NVIDIA GPUs).
    #[serde(rename = "mlx-cuda")]
    MlxCuda,
    /// Whole `__global__` CUDA kernels compiled by NVRTC for the device's architecture and launched by the
    /// worker through CuPy on a stream of its own (NVIDIA GPUs, no MLX).
    #[serde(rename = "cuda")]
    Cuda,
}

pub const ALL: [Target; 4] = [Target::Cpu, Target::MlxMetal, Target::MlxCuda, Target::Cuda];

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Cpu => "cpu",
            Target::MlxMetal => "mlx-metal",
            Target::MlxCuda => "mlx-cuda",
            Target::Cuda => "cuda",
        }
    }

    /// GPU targets launch a grid of threads; the CPU target calls each kernel once.
    pub fn is_gpu(self) -> bool {
        !matches!(self, Target::Cpu)
    }

    /// Targets whose kernels run through MLX (bodies MLX wraps in a signature of its own).
    pub fn is_mlx(self) -> bool {
        matches!(self, Target::MlxMetal | Target::MlxCuda)
    }

    /// Targets whose kernels are CUDA C++ (compiled by NVRTC): the CUDA dialect.
    pub fn is_cuda_dialect(self) -> bool {
        matches!(self, Target::MlxCuda | Target::Cuda)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ALL.iter().copied().find(|t| t.name() == s).ok_or_else(|| {
            format!("unknown target `{s}`; expected cpu, mlx-metal, mlx-cuda or cuda")
        })
    }
}
