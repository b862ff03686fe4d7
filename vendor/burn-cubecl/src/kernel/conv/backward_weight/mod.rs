pub mod fallback;
pub mod implicit_gemm;
pub mod split_k;
pub mod split_k_mma;
pub mod split_k_mma_vec;

#[cfg(feature = "autotune")]
pub mod tune;

#[cfg(feature = "autotune")]
pub(crate) use tune::*;
