pub mod fallback;
pub mod implicit_gemm;
pub mod split_k;
pub mod split_k_mma;

#[cfg(feature = "autotune")]
pub mod tune;

#[cfg(feature = "autotune")]
pub(crate) use tune::*;
