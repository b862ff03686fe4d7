mod base;
#[cfg(feature = "autotune")]
mod bounds;
#[cfg(feature = "autotune")]
mod tune;

pub use base::*;
#[cfg(feature = "autotune")]
pub use tune::*;
