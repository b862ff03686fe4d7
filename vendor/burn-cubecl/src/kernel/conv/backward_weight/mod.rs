pub mod fallback;
pub mod implicit_gemm;

#[cfg(feature = "autotune")]
pub mod tune;

#[cfg(feature = "autotune")]
pub(crate) use tune::*;
