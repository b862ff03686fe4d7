//! The split-K weight gradient of `split_k.rs` on tensor cores, for f16 and bf16 operands
//! (libreyolo-run's patch; vendor/README.md).
//!
//! Same tiling, gathers and split as the CUDA-core kernel: a cube owns a (16, 32 or 64) x 64
//! tile of `grad_w[co, (kh, kw, ci)]` and one slice of the contraction over `m = (n, oh, ow)`,
//! stages 32 rows of the gradient and of the never-materialised columns in shared memory, and
//! writes its partial tile in f32 for the fixed-order reduction. What differs is the product:
//! the stages hold the operands in their own 16-bit type and the cube's eight warps multiply
//! them with 16x16x16 WMMA fragments accumulating in f32, instead of each unit doing 4 x 4
//! multiply-adds a row from f32 copies. The products of two 16-bit values are exact in f32, so
//! the result differs from the CUDA-core kernel's only by the order of the f32 additions, and
//! that order is fixed: the kernel stays deterministic.

use cubecl::prelude::*;

/// Units of a cube: eight warps, the same 256 units as the CUDA-core kernel's 16 x 16, so the
/// gathers are the same.
pub const MMA_UNITS: usize = 256;
/// Columns `(kh, kw, ci)` of a cube's tile.
const TILE_J: usize = 64;
/// Contraction rows staged at a time: two 16-deep fragment steps.
const ROWS: usize = 32;
/// One WMMA fragment's side.
const FRAG: usize = 16;
/// Pad of a staged 16-bit row (elements): WMMA wants a leading dimension that is a multiple of
/// 8 elements (16 bytes), and the pad moves consecutive rows off the same banks.
const PAD16: usize = 8;
/// Pad of an f32 row of the output stage (a multiple of 4 elements, 16 bytes).
const PAD32: usize = 4;

#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn wgrad_split_k_mma_kernel<E: Float>(
    input: &Tensor<E>,          // [N, H, W, C_in], any strides
    out_grad: &Tensor<E>,       // [N, OH, OW, C_out], any strides
    partials: &mut Tensor<f32>, // [splits, C_out, J]
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
    let tile_co = comptime!(FRAG * rm);

    // The warps' layout over the tile: four across the 64 columns, and down the rows two (32
    // or 64 rows: one or two fragments each), or for a 16-row tile the two 16-deep steps of a
    // stage split between two groups of four, summed at the end.
    let warps_co = comptime!(if rm == 1 { 1usize } else { 2usize });
    let warps_k = comptime!(if rm == 1 { 2usize } else { 1usize });
    let frags_co = comptime!(if rm == 4 { 2usize } else { 1usize });

    let unit = UNIT_POS as usize;
    let warp = unit / 32;
    let warp_j = warp % 4;
    let warp_co = (warp / 4) % warps_co;
    let warp_k = warp / comptime!(4 * warps_co);
    let j0 = CUBE_POS_X as usize * TILE_J;
    let co0 = CUBE_POS_Y as usize * tile_co;
    let split = CUBE_POS_Z as usize;
    let row_begin = split * rows_per_split;
    let row_end = select(row_begin + rows_per_split < rows, row_begin + rows_per_split, rows);

    // [row][co] (the A operand, column-major: co x row) and [row][j] (B, row-major: row x j).
    let grad_pitch = comptime!(FRAG * rm + PAD16);
    let col_pitch = comptime!(TILE_J + PAD16);
    let grad_len = comptime!(ROWS * (FRAG * rm + PAD16));
    let col_len = comptime!(ROWS * (TILE_J + PAD16));
    let mut grad_stage = Shared::<[E]>::new_aligned_slice(grad_len, 32usize);
    let mut col_stage = Shared::<[E]>::new_aligned_slice(col_len, 32usize);
    let mut row_image = Shared::<[usize]>::new_slice(ROWS);
    let mut row_h = Shared::<[u32]>::new_slice(ROWS);
    let mut row_w = Shared::<[u32]>::new_slice(ROWS);
    let mut row_grad = Shared::<[usize]>::new_slice(ROWS);
    let mut row_ok = Shared::<[u32]>::new_slice(ROWS);

    // The gathers: as in the CUDA-core kernel (neighbouring units take neighbouring channels
    // where the channels are contiguous, else neighbouring rows).
    let (in_s1, in_s2, in_s3) = (input.stride(1), input.stride(2), input.stride(3));
    let col_loads = comptime!(ROWS * TILE_J / MMA_UNITS);
    let mut load_col = Array::<u32>::new(col_loads);
    let mut load_row = Array::<u32>::new(col_loads);
    let mut h_shift = Array::<u32>::new(col_loads);
    let mut w_shift = Array::<u32>::new(col_loads);
    let mut ci_offset = Array::<usize>::new(col_loads);
    let mut j_ok = Array::<u32>::new(col_loads);
    #[unroll]
    for i in 0..col_loads {
        let mut jl = unit % TILE_J;
        let mut r = unit / TILE_J + i * (MMA_UNITS / TILE_J);
        if cols_by_row {
            jl = unit / ROWS + i * (MMA_UNITS / ROWS);
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
    let grad_loads = comptime!(ROWS * FRAG * rm / MMA_UNITS);
    let g_s3 = out_grad.stride(3);

    let m0 = warp_co * comptime!(FRAG * frags_co);
    let n0 = warp_j * FRAG;
    let acc0 = cmma::Matrix::<f32>::from_value(cmma::MatrixIdent::Accumulator, FRAG, FRAG, FRAG, cmma::MatrixLayout::Undefined, 0.0f32);
    let acc1 = cmma::Matrix::<f32>::from_value(cmma::MatrixIdent::Accumulator, FRAG, FRAG, FRAG, cmma::MatrixLayout::Undefined, 0.0f32);

    let mut row0 = row_begin;
    while row0 < row_end {
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

        #[unroll]
        for i in 0..col_loads {
            let r = load_row[i] as usize;
            let ih = row_h[r] as usize + h_shift[i] as usize;
            let iw = row_w[r] as usize + w_shift[i] as usize;
            let mut v = E::from_int(0);
            if j_ok[i] == 1u32 && ih >= pad_h && iw >= pad_w && ih - pad_h < in_h && iw - pad_w < in_w {
                v = input[row_image[r] + (ih - pad_h) * in_s1 + (iw - pad_w) * in_s2 + ci_offset[i]];
            }
            col_stage[r * col_pitch + load_col[i] as usize] = v;
        }
        #[unroll]
        for i in 0..grad_loads {
            let mut col = unit % tile_co;
            let mut r = unit / tile_co + i * comptime!(MMA_UNITS / (FRAG * rm));
            if grad_by_row {
                col = unit / ROWS + i * (MMA_UNITS / ROWS);
                r = unit % ROWS;
            }
            let g_co = co0 + col;
            let mut v = E::from_int(0);
            if g_co < c_out && row_ok[r] == 1u32 {
                v = out_grad[row_grad[r] + g_co * g_s3];
            }
            grad_stage[r * grad_pitch + col] = v;
        }
        sync_cube();

        #[unroll]
        for step in 0..comptime!(ROWS / FRAG) {
            if warp_k == comptime!(step % warps_k) {
                let b_at = step * FRAG * col_pitch + n0;
                let b = cmma::Matrix::<E>::from_slice(cmma::MatrixIdent::B, FRAG, FRAG, FRAG, cmma::MatrixLayout::RowMajor, &col_stage[b_at..col_len], col_pitch as u32);
                let a_at = step * FRAG * grad_pitch + m0;
                let a = cmma::Matrix::<E>::from_slice(cmma::MatrixIdent::A, FRAG, FRAG, FRAG, cmma::MatrixLayout::ColMajor, &grad_stage[a_at..grad_len], grad_pitch as u32);
                cmma::execute(&a, &b, &acc0, &acc0);
                if comptime!(frags_co == 2) {
                    let a1 = cmma::Matrix::<E>::from_slice(
                        cmma::MatrixIdent::A,
                        FRAG,
                        FRAG,
                        FRAG,
                        cmma::MatrixLayout::ColMajor,
                        &grad_stage[a_at + FRAG..grad_len],
                        grad_pitch as u32,
                    );
                    cmma::execute(&a1, &b, &acc1, &acc1);
                }
            }
        }
        sync_cube();
        row0 += ROWS;
    }

    // Each warp's fragments into one f32 tile a k-group, then the partial tile out, the two
    // k-groups of a 16-row tile summed in a fixed order.
    let out_pitch = comptime!(TILE_J + PAD32);
    let out_len = comptime!(warps_k * FRAG * rm * (TILE_J + PAD32));
    let mut out_stage = Shared::<[f32]>::new_aligned_slice(out_len, 32usize);
    let o_at = (warp_k * tile_co + m0) * out_pitch + n0;
    cmma::store(&mut out_stage[o_at..out_len], &acc0, out_pitch as u32, cmma::MatrixLayout::RowMajor);
    if comptime!(frags_co == 2) {
        cmma::store(&mut out_stage[o_at + FRAG * out_pitch..out_len], &acc1, out_pitch as u32, cmma::MatrixLayout::RowMajor);
    }
    sync_cube();

    #[unroll]
    for i in 0..comptime!(FRAG * rm * TILE_J / MMA_UNITS) {
        let idx = unit + i * MMA_UNITS;
        let co_l = idx / TILE_J;
        let jl = idx % TILE_J;
        let mut v = out_stage[co_l * out_pitch + jl];
        if comptime!(warps_k == 2) {
            v += out_stage[(tile_co + co_l) * out_pitch + jl];
        }
        let co = co0 + co_l;
        let jj = j0 + jl;
        if co < c_out && jj < j_total {
            partials[split * p_split + co * p_co + jj * p_j] = v;
        }
    }
}
