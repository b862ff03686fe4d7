//! The weight gradient of a dense 2D convolution as one implicit GEMM whose contraction is
//! split across cubes (libreyolo-run's patch; vendor/README.md).
//!
//! `grad_w[co, (kh, kw, ci)] = sum over m = (n, oh, ow) of grad_out[m, co] * x[n, oh * s + kh * d
//! - p, ow * s + kw * d - p, ci]`. The contraction (batch x output pixels, 10^5-10^6 long) dwarfs
//! the output (`c_out` x `kh * kw * c_in`, a few thousand elements for YOLO's small layers), so
//! the matmul kernels, which give each output tile the whole contraction, leave most of the
//! device idle; the im2col route also writes the column matrix (9x the input for a 3x3) first.
//! On the H200 that made YOLOv9-t's weight gradients 76 ms a training step at batch 16 against
//! cuDNN's 8.5 ms.
//!
//! Here a cube owns a (16, 32 or 64) x 64 tile of the output and one slice of the contraction:
//! it stages 32 rows of the gradient and of the (never materialised) columns in shared memory,
//! gathering the columns straight from the input, and accumulates in f32 registers, up to 4 x 4
//! outputs a unit. Each slice writes its partial tile to `[splits, c_out, J]` in f32, and one
//! reduction over the slices sums them in a fixed order: the result does not depend on which
//! cube finishes first.

use burn_backend::{DType, ops::ConvOptions};
use burn_backend::cubecl::dtype_to_storage_type;
use burn_std::Shape;
use cubecl::prelude::*;
use cubek::convolution::components::ConvSetupError;
use cubek::reduce::components::instructions::ReduceOperationConfig;

use super::split_k_mma::{MMA_UNITS, wgrad_split_k_mma_kernel};
use super::split_k_mma_vec::{self, wgrad_split_k_mma_vec_kernel};
use crate::{
    kernel::{
        cast,
        reduce::{KernelReduceStrategy, reduce_dim},
        utils::address_type,
    },
    ops::{max_vector_size_many, numeric::empty_device_dtype, reshape},
    tensor::CubeTensor,
};

/// Units of a cube along each axis.
const UNITS: usize = 16;
/// Columns `(kh, kw, ci)` of a cube's tile (16 units across, 4 columns each).
const TILE_J: usize = 64;
/// Contraction rows staged in shared memory at a time.
const ROWS: usize = 32;
/// About how many cubes to launch: a few per streaming multiprocessor on current GPUs.
const TARGET_CUBES: usize = 1024;
/// The shortest slice of the contraction worth a cube of its own.
const MIN_ROWS_PER_SPLIT: usize = 256;
/// Overrides both for experiments: `BURN_WGRAD_SPLIT_K=TARGET_CUBES,MIN_ROWS_PER_SPLIT`.
const SPLIT_ENV: &str = "BURN_WGRAD_SPLIT_K";

/// The split's two knobs, from [`SPLIT_ENV`] when it is set and well formed.
fn split_knobs() -> (usize, usize) {
    static KNOBS: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    *KNOBS.get_or_init(|| {
        let parsed = std::env::var(SPLIT_ENV).ok().and_then(|v| {
            let (cubes, rows) = v.split_once(',')?;
            Some((cubes.trim().parse().ok()?, rows.trim().parse().ok()?))
        });
        match parsed {
            Some((cubes, rows)) if cubes > 0 && rows > 0 => (cubes, rows),
            _ => (TARGET_CUBES, MIN_ROWS_PER_SPLIT),
        }
    })
}

/// Output channels a unit computes (`16 * co_per_unit` a cube): as few as fill `c_out`, so a
/// 16-channel layer does not pay for a 64-channel tile, and up to 4, which halves the
/// shared-memory reads per multiply-add against 1.
fn co_per_unit(c_out: usize) -> usize {
    match c_out {
        0..=16 => 1,
        17..=32 => 2,
        _ => 4,
    }
}

#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn wgrad_split_k_kernel<E: Float>(
    input: &Tensor<E>,          // [N, H, W, C_in], any strides
    out_grad: &Tensor<E>,       // [N, OH, OW, C_out], any strides
    partials: &mut Tensor<f32>, // [splits, C_out, J]; rows may be pitched
    shape: Sequence<u32>,       // in_h, in_w, c_in, out_h, out_w, c_out, k_w, rows, rows_per_split
    conv: Sequence<u32>,        // stride_h, stride_w, pad_h, pad_w, dil_h, dil_w
    #[comptime] rm: usize,
    #[comptime] cols_by_row: bool,
    #[comptime] grad_by_row: bool,
    #[define(E)] _dtype: ElemType,
) {
    let in_h = shape[0] as usize;
    let in_w = shape[1] as usize;
    let c_in = shape[2] as usize;
    let out_h = shape[3] as usize;
    let out_w = shape[4] as usize;
    let c_out = shape[5] as usize;
    let k_w = shape[6] as usize;
    let rows = shape[7] as usize;
    let rows_per_split = shape[8] as usize;
    let stride_h = conv[0] as usize;
    let stride_w = conv[1] as usize;
    let pad_h = conv[2] as usize;
    let pad_w = conv[3] as usize;
    let dil_h = conv[4] as usize;
    let dil_w = conv[5] as usize;
    let j_total = partials.shape(2);
    let p_split = partials.stride(0);
    let p_co = partials.stride(1);
    let p_j = partials.stride(2);
    let tile_co = comptime!(UNITS * rm);

    let tx = UNIT_POS_X as usize;
    let ty = UNIT_POS_Y as usize;
    let unit = ty * UNITS + tx;
    let j0 = CUBE_POS_X as usize * TILE_J;
    let co0 = CUBE_POS_Y as usize * tile_co;
    let split = CUBE_POS_Z as usize;
    let row_begin = split * rows_per_split;
    let row_end = select(row_begin + rows_per_split < rows, row_begin + rows_per_split, rows);

    // [row][co] and [row][j] of the current stage, each row one longer than the tile so that
    // a column (the by-row loads) falls in distinct banks too.
    let grad_pitch = comptime!(UNITS * rm + 1);
    let col_pitch = comptime!(TILE_J + 1);
    let mut grad_stage = Shared::<[f32]>::new_slice(comptime!(ROWS * (UNITS * rm + 1)));
    let mut col_stage = Shared::<[f32]>::new_slice(comptime!(ROWS * (TILE_J + 1)));
    // Where each row of the stage reads: its image's offset, its first input row and column
    // (before the tap and the padding; past the image for a row beyond the slice), and its
    // gradient's offset (or 0 with `row_ok` 0).
    let mut row_image = Shared::<[usize]>::new_slice(ROWS);
    let mut row_h = Shared::<[u32]>::new_slice(ROWS);
    let mut row_w = Shared::<[u32]>::new_slice(ROWS);
    let mut row_grad = Shared::<[usize]>::new_slice(ROWS);
    let mut row_ok = Shared::<[u32]>::new_slice(ROWS);

    // The columns this unit gathers at every stage are fixed, so their taps and channels are
    // too. Neighbouring units take neighbouring channels where the channels are contiguous
    // (NHWC), else neighbouring rows (pixels) of one column, so that loads coalesce either way.
    let (in_s1, in_s2, in_s3) = (input.stride(1), input.stride(2), input.stride(3));
    let col_loads = comptime!(ROWS * TILE_J / (UNITS * UNITS));
    let mut load_col = Array::<u32>::new(col_loads);
    let mut load_row = Array::<u32>::new(col_loads);
    let mut h_shift = Array::<u32>::new(col_loads);
    let mut w_shift = Array::<u32>::new(col_loads);
    let mut ci_offset = Array::<usize>::new(col_loads);
    let mut j_ok = Array::<u32>::new(col_loads);
    #[unroll]
    for i in 0..col_loads {
        let mut jl = unit % TILE_J;
        let mut r = unit / TILE_J + i * (UNITS * UNITS / TILE_J);
        if cols_by_row {
            jl = unit / ROWS + i * (UNITS * UNITS / ROWS);
            r = unit % ROWS;
        }
        let j = j0 + jl;
        let tap = j / c_in;
        load_col[i] = jl as u32;
        load_row[i] = r as u32;
        h_shift[i] = ((tap / k_w) * dil_h) as u32;
        w_shift[i] = ((tap % k_w) * dil_w) as u32;
        ci_offset[i] = (j % c_in) * in_s3;
        j_ok[i] = select(j < j_total, 1u32, 0u32);
    }
    // The gradient values likewise: neighbouring channels, or neighbouring rows.
    let grad_loads = comptime!(ROWS * UNITS * rm / (UNITS * UNITS));
    let g_s3 = out_grad.stride(3);

    let mut acc = Array::<f32>::new(comptime!(rm * 4));
    #[unroll]
    for i in 0..comptime!(rm * 4) {
        acc[i] = 0.0f32;
    }

    let mut row0 = row_begin;
    while row0 < row_end {
        // One division chain a row, not one a load.
        if unit < ROWS {
            let m = row0 + unit;
            let ow = m % out_w;
            let rest = m / out_w;
            let oh = rest % out_h;
            let n = rest / out_h;
            let ok = m < row_end;
            row_image[unit] = n * input.stride(0);
            row_h[unit] = select(ok, oh * stride_h, in_h + pad_h) as u32;
            row_w[unit] = (ow * stride_w) as u32;
            row_grad[unit] = select(ok, n * out_grad.stride(0) + oh * out_grad.stride(1) + ow * out_grad.stride(2), 0);
            row_ok[unit] = select(ok, 1u32, 0u32);
        }
        sync_cube();

        // Gather ROWS x TILE_J columns.
        #[unroll]
        for i in 0..col_loads {
            let r = load_row[i] as usize;
            let ih = row_h[r] as usize + h_shift[i] as usize;
            let iw = row_w[r] as usize + w_shift[i] as usize;
            let mut v = 0.0f32;
            if j_ok[i] == 1u32 && ih >= pad_h && iw >= pad_w && ih - pad_h < in_h && iw - pad_w < in_w {
                v = f32::cast_from(input[row_image[r] + (ih - pad_h) * in_s1 + (iw - pad_w) * in_s2 + ci_offset[i]]);
            }
            col_stage[r * col_pitch + load_col[i] as usize] = v;
        }
        // ROWS x tile_co gradient values.
        #[unroll]
        for i in 0..grad_loads {
            let mut col = unit % tile_co;
            let mut r = unit / tile_co + i * comptime!(UNITS * UNITS / (UNITS * rm));
            if grad_by_row {
                col = unit / ROWS + i * (UNITS * UNITS / ROWS);
                r = unit % ROWS;
            }
            let g_co = co0 + col;
            let mut v = 0.0f32;
            if g_co < c_out && row_ok[r] == 1u32 {
                v = f32::cast_from(out_grad[row_grad[r] + g_co * g_s3]);
            }
            grad_stage[r * grad_pitch + col] = v;
        }
        sync_cube();

        for r in 0..ROWS {
            let mut a = Array::<f32>::new(rm);
            #[unroll]
            for p in 0..rm {
                a[p] = grad_stage[r * grad_pitch + ty + p * UNITS];
            }
            #[unroll]
            for q in 0..4usize {
                let b = col_stage[r * col_pitch + tx + q * UNITS];
                #[unroll]
                for p in 0..rm {
                    acc[p * 4 + q] += a[p] * b;
                }
            }
        }
        sync_cube();
        row0 += ROWS;
    }

    #[unroll]
    for p in 0..rm {
        let co = co0 + ty + p * UNITS;
        #[unroll]
        for q in 0..4usize {
            let jj = j0 + tx + q * UNITS;
            if co < c_out && jj < j_total {
                partials[split * p_split + co * p_co + jj * p_j] = acc[p * 4 + q];
            }
        }
    }
}

/// The weight gradient of a dense 2D convolution (NHWC tensors; `weight_shape` is
/// `[c_out, kh, kw, c_in]`) by the split-contraction kernel above. Declines grouped
/// convolutions, other ranks and dtypes without a float kernel.
pub fn wgrad_split_k<const N: usize>(
    input: CubeTensor,
    out_grad: CubeTensor,
    weight_shape: Shape,
    options: ConvOptions<N>,
) -> Result<CubeTensor, ConvSetupError> {
    // Declines read only what the autotune key holds exactly (rank, groups, dtype), as the other
    // candidates' must: a cached choice is unwrapped for every shape sharing its key.
    if N != 2 || options.groups != 1 {
        return Err(ConvSetupError::Groups(options.groups));
    }
    if !matches!(input.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(ConvSetupError::Unknown);
    }
    let dtype = input.dtype;
    let [batch, in_h, in_w, c_in] = [0, 1, 2, 3].map(|d| input.meta.shape()[d]);
    let [_, out_h, out_w, c_out] = [0, 1, 2, 3].map(|d| out_grad.meta.shape()[d]);
    let (k_h, k_w) = (weight_shape[1], weight_shape[2]);
    let j_total = k_h * k_w * c_in;
    let rows = batch * out_h * out_w;
    if rows == 0 || c_out == 0 || j_total == 0 {
        // Nothing to contract or nothing to write: no split to size (it would divide by zero).
        return Err(ConvSetupError::Unknown);
    }

    let rm = co_per_unit(c_out);
    let (tiles_j, tiles_co) = (j_total.div_ceil(TILE_J), c_out.div_ceil(UNITS * rm));
    let tiles = tiles_j * tiles_co;
    let (target_cubes, min_rows) = split_knobs();
    let by_rows = (rows / min_rows).max(1);
    let splits = target_cubes.div_ceil(tiles).clamp(1, by_rows);
    // A multiple of the vector kernel's stage (itself a multiple of ROWS) for every kernel, so
    // the two tensor-core kernels split the rows alike and agree bit for bit.
    let rows_per_split = rows.div_ceil(splits).next_multiple_of(split_k_mma_vec::ROWS);
    let splits = rows.div_ceil(rows_per_split);

    // Channel-last in memory (a convolution's own output) or not (e.g. NCHW from elsewhere).
    let cols_by_row = input.meta.strides()[3] != 1;
    let grad_by_row = out_grad.meta.strides()[3] != 1;
    let client = input.client.clone();
    let partials = empty_device_dtype(client.clone(), input.device.clone(), Shape::new([splits, c_out, j_total]), DType::F32);
    let pad = options.padding_begin();
    let sequence = |values: &[usize]| {
        let mut s = SequenceArg::new();
        for &v in values {
            s.push(v as u32);
        }
        s
    };
    let shape_values = [in_h, in_w, c_in, out_h, out_w, c_out, k_w, rows, rows_per_split];
    let conv_values = [options.stride[0], options.stride[1], pad[0], pad[1], options.dilation[0], options.dilation[1]];
    let shape = sequence(&shape_values);
    let conv = sequence(&conv_values);
    // 64-bit offsets where a tensor holds more than 2^32 elements (u32 below, as before).
    let address = address_type!(input, out_grad, partials);
    let kernel = wgrad_kernel(&client, dtype);
    // `split_k_mma.rs`'s kernel into `partials`: the tensor-core path without vectors, and the
    // vector kernel's check under `BURN_WGRAD_VERIFY`.
    let launch_gather = |input: CubeTensor, out_grad: CubeTensor, partials: CubeTensor| {
        wgrad_split_k_mma_kernel::launch(
            &client,
            CubeCount::Static(tiles_j as u32, tiles_co as u32, splits as u32),
            CubeDim::new_1d(MMA_UNITS as u32),
            address,
            input.into_tensor_arg(),
            out_grad.into_tensor_arg(),
            partials.into_tensor_arg(),
            sequence(&shape_values),
            sequence(&conv_values),
            rm,
            cols_by_row,
            grad_by_row,
            dtype_to_storage_type(dtype),
        )
    };
    let vectors = kernel == WgradKernel::TensorCoresVectors
        && !cols_by_row
        && !grad_by_row
        && c_in % split_k_mma_vec::VEC == 0
        && c_out % split_k_mma_vec::VEC == 0
        && max_vector_size_many(&[&input, &out_grad], 3) >= split_k_mma_vec::VEC
        // the kernel divides whole element offsets by the width: every outer stride a multiple
        && [&input, &out_grad].iter().all(|t| t.meta.strides()[..3].iter().all(|s| s % split_k_mma_vec::VEC == 0));
    if vectors {
        // Kept for the diagnosis (`launch_gather` on the same operands).
        let operands = verify_vectors().then(|| (input.clone(), out_grad.clone()));
        wgrad_split_k_mma_vec_kernel::launch(
            &client,
            CubeCount::Static(tiles_j as u32, tiles_co as u32, splits as u32),
            CubeDim::new_1d(MMA_UNITS as u32),
            address,
            split_k_mma_vec::VEC,
            input.into_tensor_arg(),
            out_grad.into_tensor_arg(),
            partials.clone().into_tensor_arg(),
            shape,
            conv,
            rm,
            dtype_to_storage_type(dtype),
        );
        if let Some((input, out_grad)) = operands {
            let gathered = empty_device_dtype(client.clone(), input.device.clone(), Shape::new([splits, c_out, j_total]), DType::F32);
            let layout = format!("x {:?}/{:?}@{:?} dy {:?}/{:?}@{:?}", input.meta.shape(), input.meta.strides(), input.handle.offset_start, out_grad.meta.shape(), out_grad.meta.strides(), out_grad.handle.offset_start);
            launch_gather(input, out_grad, gathered.clone());
            compare_partials(&layout, partials.clone(), gathered);
        }
        return sum_splits(partials, dtype, weight_shape);
    }
    if kernel != WgradKernel::CudaCores {
        launch_gather(input, out_grad, partials.clone());
        return sum_splits(partials, dtype, weight_shape);
    }
    wgrad_split_k_kernel::launch(
        &client,
        CubeCount::Static(tiles_j as u32, tiles_co as u32, splits as u32),
        CubeDim::new_2d(UNITS as u32, UNITS as u32),
        address,
        input.into_tensor_arg(),
        out_grad.into_tensor_arg(),
        partials.clone().into_tensor_arg(),
        shape,
        conv,
        rm,
        cols_by_row,
        grad_by_row,
        dtype_to_storage_type(dtype),
    );

    sum_splits(partials, dtype, weight_shape)
}

/// `BURN_WGRAD_VERIFY=1`: every launch of the vector kernel is followed by the gather kernel on
/// the same operands, both read back and compared bit for bit (the two must agree: same
/// fragment steps in the same order), with one line on stderr per launch that differs, naming
/// the operands' shapes, strides and buffer offsets. A diagnosis of MobileNetV4-s's replay fault
/// (vendor/README.md): it reads the device at every weight gradient, so a capture window it runs
/// in fails (the warm-up runs before it are checked).
fn verify_vectors() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("BURN_WGRAD_VERIFY").is_ok_and(|v| v.trim() == "1"))
}

/// The diagnosis' comparison of [`verify_vectors`]: the count of differing partials and the largest
/// difference, printed when any differs (and a count of the launches that agreed, every 256th).
fn compare_partials(layout: &str, vectors: CubeTensor, gathered: CubeTensor) {
    static AGREED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    // A read inside a graph's capture window fails (nothing may sync there): said, not panicked.
    let read = |t: CubeTensor| burn_std::future::block_on(crate::ops::into_data(t)).ok().and_then(|d| d.try_to_vec::<f32>().ok());
    let (Some(a), Some(b)) = (read(vectors), read(gathered)) else {
        eprintln!("[wgrad verify] not read back (inside a capture window?): {layout}");
        return;
    };
    let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
    if differ == 0 {
        let n = AGREED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if n % 256 == 1 {
            eprintln!("[wgrad verify] {n} launches agreed so far ({layout})");
        }
        return;
    }
    let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let scale = b.iter().map(|y| y.abs()).fold(0f32, f32::max);
    eprintln!("[wgrad verify] DIFFER {differ} of {} partials, max |diff| {worst:e} (max |gather| {scale:e}): {layout}", a.len());
}

/// The slices' partial tiles `[splits, c_out, J]` summed in a fixed order, in `dtype`.
fn sum_splits(partials: CubeTensor, dtype: DType, weight_shape: Shape) -> Result<CubeTensor, ConvSetupError> {
    let summed = reduce_dim(partials, None, 0, KernelReduceStrategy::default(), ReduceOperationConfig::Sum)
        .map_err(|_| ConvSetupError::Unknown)?; // [1, c_out, J]
    Ok(reshape(cast(summed, dtype), weight_shape))
}

/// Environment variable choosing the split-K kernel ([`wgrad_kernel`]): `0` the CUDA-core
/// kernel, `gather` the tensor-core kernel without vectors, unset (or anything else) the default.
pub const WGRAD_MMA_ENV: &str = "BURN_WGRAD_MMA";

/// Which split-K kernel computes a weight gradient.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum WgradKernel {
    /// `wgrad_split_k_kernel` above: f32 products on CUDA cores.
    CudaCores,
    /// `split_k_mma.rs`: tensor cores, one 2-byte gather a value.
    TensorCores,
    /// `split_k_mma_vec.rs`: tensor cores, 16-byte gathers, where both tensors' channels are
    /// contiguous multiples of 8 (else `TensorCores`).
    TensorCoresVectors,
}

/// The kernel for `dtype` on this device: the tensor-core kernels for f16 and bf16 where the
/// device has 16x16x16 fragments of that type accumulating in f32 and 32-unit warps, the
/// CUDA-core one otherwise. `BURN_WGRAD_MMA` picks one for A/B measurements: `0` the CUDA-core
/// kernel, `gather` the tensor-core kernel without vectors (any other value: the default).
fn wgrad_kernel(client: &cubecl::client::Client, dtype: DType) -> WgradKernel {
    static CHOICE: std::sync::OnceLock<Option<WgradKernel>> = std::sync::OnceLock::new();
    let forced = *CHOICE.get_or_init(|| match std::env::var(WGRAD_MMA_ENV).ok().as_deref().map(str::trim) {
        Some("0") => Some(WgradKernel::CudaCores),
        Some("gather") => Some(WgradKernel::TensorCores),
        _ => None,
    });
    if forced == Some(WgradKernel::CudaCores) || !use_tensor_cores(client, dtype) {
        return WgradKernel::CudaCores;
    }
    forced.unwrap_or(WgradKernel::TensorCoresVectors)
}

/// Whether the device multiplies `dtype` on tensor cores as the kernels need.
fn use_tensor_cores(client: &cubecl::client::Client, dtype: DType) -> bool {
    // The kernel lays its eight warps out as 32 units each.
    let hardware = &client.properties().hardware;
    if hardware.plane_size_min != 32 || hardware.plane_size_max != 32 {
        return false;
    }
    let elem = match dtype {
        DType::F16 => cubecl::ir::ElemType::Float(cubecl::ir::FloatKind::F16),
        DType::BF16 => cubecl::ir::ElemType::Float(cubecl::ir::FloatKind::BF16),
        _ => return false,
    };
    let f32_elem = cubecl::ir::ElemType::Float(cubecl::ir::FloatKind::F32);
    client.features().matmul.cmma.iter().any(|c| c.a_type == elem && c.b_type == elem && c.cd_type == f32_elem && (c.m, c.n, c.k) == (16, 16, 16))
}
