//! The fused BatchNorm (+ SiLU) on the GPU: lays the operands out as `rows x C`, picks the
//! vector width and the split of the rows, and launches [`super::kernels`].

use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::{DType, Shape};
use burn_cubecl::CubeBackend;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::kernel::{into_contiguous, untile};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::ops::permute;
use burn_cubecl::tensor::CubeTensor;

use super::kernels::{self, CUBE_UNITS};
use super::{BatchNormActBackend, STATS_ROWS};

/// About how many cubes a sums kernel launches: a few per streaming multiprocessor.
const TARGET_CUBES: usize = 1024;
/// The fewest rows a unit of a sums kernel walks; below it, fewer splits.
const MIN_ROWS_PER_UNIT: usize = 8;
/// Channel vectors a sums cube covers at most (the rest of its units walk rows).
const MAX_CHANNEL_LANES: usize = 32;

impl BatchNormActBackend for CubeBackend {
    fn batch_norm_act_forward(x: CubeTensor, weight: CubeTensor, bias: CubeTensor, epsilon: f64, act: bool) -> (CubeTensor, CubeTensor) {
        let x = channel_rows(x);
        let plan = Plan::new(&x, &[&x]);
        let client = x.client.clone();
        let stats = empty_device_contiguous_dtype(client.clone(), x.device.clone(), Shape::new([STATS_ROWS, plan.channels]), DType::F32);
        let partials = plan.partials(&x);
        let address = address_type(&[&x, &partials]);
        unsafe {
            kernels::forward_sums::launch_unchecked(
                &client,
                plan.sums_count(),
                plan.sums_dim(),
                address,
                plan.vector,
                x.clone().into_tensor_arg(),
                partials.clone().into_tensor_arg(),
                plan.rows,
                plan.rows_per_split,
                row_stride(&x) / plan.vector,
                plan.channel_vectors(),
                plan.channel_lanes(),
                dtype_to_storage_type(x.dtype),
            );
            kernels::finalize_forward::launch_unchecked(
                &client,
                CubeCount::Static(plan.channels as u32, 1, 1),
                CubeDim::new_1d(CUBE_UNITS as u32),
                address,
                x.clone().into_tensor_arg(),
                partials.into_tensor_arg(),
                weight.into_tensor_arg(),
                bias.into_tensor_arg(),
                stats.clone().into_tensor_arg(),
                plan.splits,
                plan.rows as f32,
                epsilon as f32,
                dtype_to_storage_type(x.dtype),
            );
        }
        let y = plan.output(&x);
        let address = address_type(&[&x, &y]);
        unsafe {
            kernels::apply_forward::launch_unchecked(
                &client,
                plan.elementwise_count(),
                CubeDim::new_1d(CUBE_UNITS as u32),
                address,
                plan.vector,
                x.clone().into_tensor_arg(),
                stats.clone().into_tensor_arg(),
                y.clone().into_tensor_arg(),
                plan.elementwise_units(),
                row_stride(&x) / plan.vector,
                plan.channel_vectors(),
                act,
                dtype_to_storage_type(x.dtype),
            );
        }
        (from_rows(y), stats)
    }

    fn batch_norm_act_backward(x: CubeTensor, grad: CubeTensor, stats: CubeTensor, act: bool) -> (CubeTensor, CubeTensor, CubeTensor) {
        let x = channel_rows(x);
        let grad = channel_rows(grad);
        let plan = Plan::new(&x, &[&x, &grad]);
        let client = x.client.clone();
        let partials = plan.partials(&x);
        let coef = empty_device_contiguous_dtype(client.clone(), x.device.clone(), Shape::new([2, plan.channels]), DType::F32);
        let per_channel = || empty_device_contiguous_dtype(client.clone(), x.device.clone(), Shape::new([plan.channels]), DType::F32);
        let (dweight, dbias) = (per_channel(), per_channel());
        let address = address_type(&[&x, &grad, &partials]);
        unsafe {
            kernels::backward_sums::launch_unchecked(
                &client,
                plan.sums_count(),
                plan.sums_dim(),
                address,
                plan.vector,
                x.clone().into_tensor_arg(),
                grad.clone().into_tensor_arg(),
                stats.clone().into_tensor_arg(),
                partials.clone().into_tensor_arg(),
                plan.rows,
                plan.rows_per_split,
                row_stride(&x) / plan.vector,
                row_stride(&grad) / plan.vector,
                plan.channel_vectors(),
                plan.channel_lanes(),
                act,
                dtype_to_storage_type(x.dtype),
            );
            kernels::finalize_backward::launch_unchecked(
                &client,
                CubeCount::Static(plan.channels as u32, 1, 1),
                CubeDim::new_1d(CUBE_UNITS as u32),
                address,
                partials.into_tensor_arg(),
                stats.clone().into_tensor_arg(),
                coef.clone().into_tensor_arg(),
                dweight.clone().into_tensor_arg(),
                dbias.clone().into_tensor_arg(),
                plan.splits,
                plan.rows as f32,
            );
        }
        let dx = plan.output(&x);
        let address = address_type(&[&x, &grad, &dx]);
        unsafe {
            kernels::apply_backward::launch_unchecked(
                &client,
                plan.elementwise_count(),
                CubeDim::new_1d(CUBE_UNITS as u32),
                address,
                plan.vector,
                x.clone().into_tensor_arg(),
                grad.clone().into_tensor_arg(),
                stats.into_tensor_arg(),
                coef.into_tensor_arg(),
                dx.clone().into_tensor_arg(),
                plan.elementwise_units(),
                row_stride(&x) / plan.vector,
                row_stride(&grad) / plan.vector,
                plan.channel_vectors(),
                act,
                dtype_to_storage_type(x.dtype),
            );
        }
        (from_rows(dx), dweight, dbias)
    }
}

/// The widest address any of `tensors` needs (64-bit offsets past 2^32 elements).
fn address_type(tensors: &[&CubeTensor]) -> AddressType {
    tensors.iter().map(|t| t.required_address_type()).max().unwrap_or_default()
}

/// Whether `t` (`[N, C, H, W]`) is `rows x C` in memory: channels contiguous, and every row
/// (pixel) one stride after the previous one, across the image rows and the batch too.
fn is_channel_rows(t: &CubeTensor) -> bool {
    let [_, c, h, w] = [0, 1, 2, 3].map(|d| t.meta.shape()[d]);
    let s = t.meta.strides();
    s[1] == 1 && s[3] >= c && s[2] == w * s[3] && s[0] == h * s[2]
}

/// `t` as `rows x C` in memory: a convolution's output already is; anything else is copied
/// channels-last once.
fn channel_rows(t: CubeTensor) -> CubeTensor {
    let t = untile(t);
    if is_channel_rows(&t) {
        return t;
    }
    permute(into_contiguous(permute(t, &[0, 2, 3, 1])), &[0, 3, 1, 2])
}

/// The row stride of a `rows x C` tensor, in elements.
fn row_stride(t: &CubeTensor) -> usize {
    t.meta.strides()[3]
}

/// `y`, allocated `[N, H, W, C]`, presented as `[N, C, H, W]`.
fn from_rows(y: CubeTensor) -> CubeTensor {
    permute(y, &[0, 3, 1, 2])
}

/// Sizes shared by a layer's launches.
struct Plan {
    dims: [usize; 4],
    channels: usize,
    rows: usize,
    /// Channels a unit reads at once.
    vector: usize,
    splits: usize,
    rows_per_split: usize,
}

impl Plan {
    fn new(x: &CubeTensor, operands: &[&CubeTensor]) -> Self {
        let dims = [0, 1, 2, 3].map(|d| x.meta.shape()[d]);
        let [n, channels, h, w] = dims;
        let rows = n * h * w;
        let aligned = |v: usize| {
            operands.iter().all(|t| {
                let offset = t.handle.offset_start.unwrap_or(0) as usize;
                row_stride(t).is_multiple_of(v) && offset.is_multiple_of(v * t.dtype.size())
            })
        };
        let vector = [4, 2, 1].into_iter().find(|&v| channels % v == 0 && aligned(v)).unwrap_or(1);
        let mut plan = Self { dims, channels, rows, vector, splits: 1, rows_per_split: rows };
        let blocks = plan.channel_vectors().div_ceil(MAX_CHANNEL_LANES);
        let by_rows = (rows / (plan.row_lanes() * MIN_ROWS_PER_UNIT)).max(1);
        let splits = TARGET_CUBES.div_ceil(blocks).clamp(1, by_rows);
        plan.rows_per_split = rows.div_ceil(splits);
        plan.splits = rows.div_ceil(plan.rows_per_split);
        plan
    }

    fn channel_vectors(&self) -> usize {
        self.channels / self.vector
    }

    /// Channel vectors a sums cube covers; its other units walk rows (`kernels::SumsUnit`).
    fn channel_lanes(&self) -> usize {
        self.channel_vectors().min(MAX_CHANNEL_LANES)
    }

    /// Row lanes of a sums cube.
    fn row_lanes(&self) -> usize {
        CUBE_UNITS / self.channel_lanes()
    }

    /// One cube shape for every layer, so each sums kernel compiles once per dtype and vector
    /// width (a cube shaped by the channel count compiled once per channel count).
    fn sums_dim(&self) -> CubeDim {
        CubeDim::new_1d(CUBE_UNITS as u32)
    }

    fn sums_count(&self) -> CubeCount {
        CubeCount::Static(self.channel_vectors().div_ceil(self.channel_lanes()) as u32, self.splits as u32, 1)
    }

    /// `[splits, 2, C]` f32 partial sums.
    fn partials(&self, x: &CubeTensor) -> CubeTensor {
        empty_device_contiguous_dtype(x.client.clone(), x.device.clone(), Shape::new([self.splits, 2, self.channels]), DType::F32)
    }

    /// A dense `[N, H, W, C]` tensor of x's dtype for an elementwise result.
    fn output(&self, x: &CubeTensor) -> CubeTensor {
        let [n, c, h, w] = self.dims;
        empty_device_contiguous_dtype(x.client.clone(), x.device.clone(), Shape::new([n, h, w, c]), x.dtype)
    }

    fn elementwise_units(&self) -> usize {
        self.rows * self.channel_vectors()
    }

    fn elementwise_count(&self) -> CubeCount {
        CubeCount::Static(self.elementwise_units().div_ceil(CUBE_UNITS) as u32, 1, 1)
    }
}
