pub mod fallback;
pub mod implicit_gemm;
pub mod split_k;

#[cfg(feature = "autotune")]
pub mod tune;

#[cfg(feature = "autotune")]
pub(crate) use tune::*;
