//! The tensor-core split-K weight gradient of `split_k_mma.rs` with 16-byte gathers, 64-row
//! stages and the next stage's loads in flight during the current stage's products
//! (libreyolo-run's patch; vendor/README.md).
//!
//! `split_k_mma.rs` moved the product onto tensor cores and gained only 1.3x (YOLOv9-t's weight
//! gradients 37.4 -> 28.0 ms a step at b16 on the H200): the time is in the gathers, not the
//! product. Each of its units loads eight column values and 2 x rm gradient values a stage as
//! 2-byte loads, each with its own address arithmetic and bounds check, and waits for them
//! before the cube can multiply. Where both tensors keep their channels contiguous and both
//! channel counts are multiples of 8 (most layers; not a convolution of an NCHW input such as the
//! image or YOLOX's Focus output, nor one with 1, 4 or another count of output channels not a
//! multiple of 8), eight neighbouring channels of one row share their tap, their bounds check
//! and their address: here a unit moves them as one 16-byte vector, and issues the next stage's
//! vectors into registers before the products of the current one, so their latency hides behind
//! the tensor cores.
//!
//! The arithmetic is `split_k_mma.rs`'s: the same tile, the same 16-row fragment steps in the
//! same order into the same accumulators (a stage holds four steps instead of two), so with the
//! same split of the rows the partial tiles are bit for bit those of that kernel, and the sum
//! over the splits is the same fixed-order reduction.

use cubecl::prelude::*;

use super::split_k_mma::MMA_UNITS;

/// Elements of one gather: eight 16-bit values.
pub const VEC: usize = 8;
/// Columns `(kh, kw, ci)` of a cube's tile.
const TILE_J: usize = 64;
/// Contraction rows staged at a time: four 16-deep fragment steps.
pub const ROWS: usize = 64;
/// One WMMA fragment's side.
const FRAG: usize = 16;
/// Pad of a staged 16-bit row (one vector): keeps the WMMA leading dimension a multiple of 8
/// elements and moves consecutive rows off the same banks.
const PAD16: usize = VEC;
/// Pad of an f32 row of the output stage (a multiple of 4 elements, 16 bytes).
const PAD32: usize = 4;

#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn wgrad_split_k_mma_vec_kernel<E: Float, N: Size>(
    input: &Tensor<Vector<E, N>>,    // [N, H, W, C_in], channels contiguous, C_in % VEC == 0
    out_grad: &Tensor<Vector<E, N>>, // [N, OH, OW, C_out], likewise
    partials: &mut Tensor<f32>,      // [splits, C_out, J]
    shape: Sequence<u32>,            // in_h, in_w, c_in, out_h, out_w, c_out, k_w, rows, rows_per_split
    conv: Sequence<u32>,             // stride_h, stride_w, pad_h, pad_w, dil_h, dil_w
    #[comptime] rm: usize,
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

    // The warps over the tile, as in split_k_mma.rs.
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

    // Stages in vectors; their pitches in elements are what WMMA is given.
    let col_vecs = comptime!((TILE_J + PAD16) / VEC); // a staged row of columns
    let grad_vecs = comptime!((FRAG * rm + PAD16) / VEC); // a staged row of the gradient
    let col_len = comptime!(ROWS * (TILE_J + PAD16) / VEC);
    let grad_len = comptime!(ROWS * (FRAG * rm + PAD16) / VEC);
    let col_pitch = comptime!(TILE_J + PAD16);
    let grad_pitch = comptime!(FRAG * rm + PAD16);
    let mut col_stage = Shared::<[Vector<E, N>]>::new_aligned_slice(col_len, 32usize);
    let mut grad_stage = Shared::<[Vector<E, N>]>::new_aligned_slice(grad_len, 32usize);
    // Each row's decomposition, for two stages: the one being gathered and the next. (The two
    // barriers of a turn would also keep one buffer safe; two keep the turn's order free.)
    let mut row_image = Shared::<[usize]>::new_slice(comptime!(2 * ROWS));
    let mut row_h = Shared::<[u32]>::new_slice(comptime!(2 * ROWS));
    let mut row_w = Shared::<[u32]>::new_slice(comptime!(2 * ROWS));
    let mut row_grad = Shared::<[usize]>::new_slice(comptime!(2 * ROWS));
    let mut row_ok = Shared::<[u32]>::new_slice(comptime!(2 * ROWS));

    // A unit's column vector is the same every stage: eight channels of one tap (C_in % 8 == 0,
    // so a vector never straddles two taps, and J % 8 == 0, so it is all in range or all out).
    let tile_vecs_j = comptime!(TILE_J / VEC);
    let col_loads = comptime!(ROWS * TILE_J / VEC / MMA_UNITS);
    let col_row_step = comptime!(MMA_UNITS / (TILE_J / VEC));
    let jv = unit % tile_vecs_j;
    let col_row0 = unit / tile_vecs_j;
    let j = j0 + jv * VEC;
    let tap = j / c_in;
    let h_shift = (tap / k_w) * dil_h;
    let w_shift = (tap % k_w) * dil_w;
    let ci = j % c_in;
    let j_ok = j < j_total;
    let (in_s1, in_s2) = (input.stride(1), input.stride(2));
    // Likewise the gradient's: vector `gv` of the tile's channels; a 16-row tile needs only half
    // the units.
    let tile_vecs_co = comptime!(FRAG * rm / VEC);
    let grad_total = comptime!(ROWS * FRAG * rm / VEC);
    let grad_loads = comptime!(grad_total.div_ceil(MMA_UNITS));
    let grad_row_step = comptime!(MMA_UNITS / (FRAG * rm / VEC));
    let gv = unit % tile_vecs_co;
    let grad_row0 = unit / tile_vecs_co;
    let g_co = co0 + gv * VEC;
    let g_ok = g_co < c_out;

    let mut col_regs = Array::<Vector<E, N>>::new(col_loads);
    let mut grad_regs = Array::<Vector<E, N>>::new(grad_loads);

    let m0 = warp_co * comptime!(FRAG * frags_co);
    let n0 = warp_j * FRAG;
    let acc0 = cmma::Matrix::<f32>::from_value(cmma::MatrixIdent::Accumulator, FRAG, FRAG, FRAG, cmma::MatrixLayout::Undefined, 0.0f32);
    let acc1 = cmma::Matrix::<f32>::from_value(cmma::MatrixIdent::Accumulator, FRAG, FRAG, FRAG, cmma::MatrixLayout::Undefined, 0.0f32);

    // The first stage's rows.
    if unit < ROWS {
        let m = row_begin + unit;
        let ok = m < row_end;
        let ow = m % out_w;
        let rest = m / out_w;
        let oh = rest % out_h;
        let n = rest / out_h;
        row_image[unit] = n * input.stride(0);
        row_h[unit] = select(ok, oh * stride_h, in_h + pad_h) as u32;
        row_w[unit] = (ow * stride_w) as u32;
        row_grad[unit] = select(ok, n * out_grad.stride(0) + oh * out_grad.stride(1) + ow * out_grad.stride(2), 0);
        row_ok[unit] = select(ok, 1u32, 0u32);
    }
    sync_cube();

    // One turn a stage plus one: a turn gathers its stage into registers (from the rows of
    // buffer `b`), multiplies the stage the previous turn staged, then stages its registers and
    // decomposes the next stage's rows into the other buffer. The loads are in flight during the
    // products; every condition below is the same for the whole cube.
    let mut row0 = row_begin;
    let mut b = 0usize;
    while row0 < row_end + ROWS {
        let gathering = row0 < row_end;
        if gathering {
            #[unroll]
            for i in 0..col_loads {
                let r = b * ROWS + col_row0 + i * col_row_step;
                let ih = row_h[r] as usize + h_shift;
                let iw = row_w[r] as usize + w_shift;
                let mut v = Vector::<E, N>::broadcast(E::from_int(0));
                if j_ok && ih >= pad_h && iw >= pad_w && ih - pad_h < in_h && iw - pad_w < in_w {
                    v = input[(row_image[r] + (ih - pad_h) * in_s1 + (iw - pad_w) * in_s2 + ci) / VEC];
                }
                col_regs[i] = v;
            }
            #[unroll]
            for i in 0..grad_loads {
                let mut v = Vector::<E, N>::broadcast(E::from_int(0));
                if unit + i * MMA_UNITS < grad_total {
                    let r = b * ROWS + grad_row0 + i * grad_row_step;
                    if g_ok && row_ok[r] == 1u32 {
                        v = out_grad[(row_grad[r] + g_co) / VEC];
                    }
                }
                grad_regs[i] = v;
            }
        }
        if row0 > row_begin {
            #[unroll]
            for step in 0..comptime!(ROWS / FRAG) {
                if warp_k == comptime!(step % warps_k) {
                    let mut bm = unsafe { cmma::Matrix::<E>::uninitialized(cmma::MatrixIdent::B, FRAG, FRAG, FRAG, cmma::MatrixLayout::RowMajor) };
                    cmma::load(&mut bm, &col_stage[(step * FRAG * col_pitch + n0) / VEC..col_len], col_pitch as u32);
                    let a_at = (step * FRAG * grad_pitch + m0) / VEC;
                    let mut am = unsafe { cmma::Matrix::<E>::uninitialized(cmma::MatrixIdent::A, FRAG, FRAG, FRAG, cmma::MatrixLayout::ColMajor) };
                    cmma::load(&mut am, &grad_stage[a_at..grad_len], grad_pitch as u32);
                    cmma::execute(&am, &bm, &acc0, &acc0);
                    if comptime!(frags_co == 2) {
                        let mut a1 = unsafe { cmma::Matrix::<E>::uninitialized(cmma::MatrixIdent::A, FRAG, FRAG, FRAG, cmma::MatrixLayout::ColMajor) };
                        cmma::load(&mut a1, &grad_stage[a_at + FRAG / VEC..grad_len], grad_pitch as u32);
                        cmma::execute(&a1, &bm, &acc1, &acc1);
                    }
                }
            }
        }
        sync_cube();
        if gathering {
            #[unroll]
            for i in 0..col_loads {
                col_stage[(col_row0 + i * col_row_step) * col_vecs + jv] = col_regs[i];
            }
            #[unroll]
            for i in 0..grad_loads {
                if unit + i * MMA_UNITS < grad_total {
                    grad_stage[(grad_row0 + i * grad_row_step) * grad_vecs + gv] = grad_regs[i];
                }
            }
            let next = row0 + ROWS;
            if unit < ROWS {
                let at = (1 - b) * ROWS + unit;
                let m = next + unit;
                let ok = m < row_end;
                let ow = m % out_w;
                let rest = m / out_w;
                let oh = rest % out_h;
                let n = rest / out_h;
                row_image[at] = n * input.stride(0);
                row_h[at] = select(ok, oh * stride_h, in_h + pad_h) as u32;
                row_w[at] = (ow * stride_w) as u32;
                row_grad[at] = select(ok, n * out_grad.stride(0) + oh * out_grad.stride(1) + ow * out_grad.stride(2), 0);
                row_ok[at] = select(ok, 1u32, 0u32);
            }
        }
        sync_cube();
        b = 1 - b;
        row0 += ROWS;
    }

    // Each warp's fragments into one f32 tile a k-group, then the partial tile out, the two
    // k-groups of a 16-row tile summed in a fixed order (as split_k_mma.rs).
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
