mod dequantize;
mod quantize;

pub use dequantize::*;
pub use quantize::*;
