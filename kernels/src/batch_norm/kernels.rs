//! The CubeCL kernels of the fused BatchNorm (+ SiLU). Every activation is seen as `rows x C`
//! (rows = N * H * W, channels contiguous: a convolution's own output layout), read in vectors
//! of `N` channels; per-channel values are f32 `[k, C]` tensors read as vectors at the same
//! channel offset. A training step runs, per BatchNorm:
//!
//! forward:  `forward_sums` (one read of x) -> `finalize_forward` -> `apply_forward` (read x,
//!           write y);
//! backward: `backward_sums` (read x and dy) -> `finalize_backward` -> `apply_backward` (read x
//!           and dy, write dx).
//!
//! The sums split the rows over cubes and write per-split partials, which the finalize kernels
//! add in a fixed order: results do not depend on scheduling.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

/// Units a cube of the sums and finalize kernels holds (the shared-memory size).
pub const CUBE_UNITS: usize = 256;

/// `1 / (1 + exp(-y))`.
#[cube]
fn sigmoid<N: Size>(y: Vector<f32, N>) -> Vector<f32, N> {
    let one = Vector::<f32, N>::new(1.0f32);
    one / (one + Vector::exp(-y))
}

/// Adds the `rl` row lanes of each channel lane in shared memory (`rl` need not be a power of
/// two); lane `ty == 0` ends up holding the cube's sum.
#[cube]
fn reduce_row_lanes<N: Size>(values: &mut Shared<[Vector<f32, N>]>, tx: usize, ty: usize, cu: usize, rl: usize) {
    let mut half = 1usize;
    while half < rl {
        half *= 2;
    }
    half /= 2;
    while half > 0 {
        if ty < half && ty + half < rl {
            let other = values[(ty + half) * cu + tx];
            values[ty * cu + tx] += other;
        }
        sync_cube();
        half /= 2;
    }
}

/// Where a unit of a sums cube works. The cube is 1-D (`CUBE_UNITS` units) and split into `cu`
/// channel lanes by `rl = CUBE_UNITS / cu` row lanes at run time, so one compiled kernel serves
/// every channel count (a 2-D cube shaped by the channel count compiled once per shape); units
/// past `cu * rl` only take part in the reduction. Cube x = channel block, cube y = split.
#[derive(CubeType, Clone)]
struct SumsUnit {
    /// Channel lane, row lane, and how many of each.
    tx: usize,
    ty: usize,
    cu: usize,
    rl: usize,
    /// The unit's channel vector and split, and the split's rows `begin..end`.
    v: usize,
    split: usize,
    begin: usize,
    end: usize,
}

#[cube]
impl SumsUnit {
    fn new(channel_lanes: usize, rows: usize, rows_per_split: usize) -> SumsUnit {
        let cu = channel_lanes;
        let unit = UNIT_POS as usize;
        let tx = unit % cu;
        let split = CUBE_POS_Y as usize;
        let begin = split * rows_per_split;
        SumsUnit {
            tx,
            ty: unit / cu,
            cu,
            rl: CUBE_UNITS / cu,
            v: CUBE_POS_X as usize * cu + tx,
            split,
            begin,
            end: select(begin + rows_per_split < rows, begin + rows_per_split, rows),
        }
    }

    /// Whether the unit walks rows: a channel vector of the layer, a row lane in use.
    fn walks(&self, channel_vectors: usize) -> bool {
        self.v < channel_vectors && self.ty < self.rl
    }

    /// Adds the cube's row lanes of `a` and `b` and stores them as the split's two partial
    /// rows: `partials[split, 0, v] = sum a`, `partials[split, 1, v] = sum b`.
    fn store_partials<N: Size>(&self, a: Vector<f32, N>, b: Vector<f32, N>, partials: &mut Tensor<Vector<f32, N>>, channel_vectors: usize) {
        let mut first = Shared::<[Vector<f32, N>]>::new_slice(CUBE_UNITS);
        let mut second = Shared::<[Vector<f32, N>]>::new_slice(CUBE_UNITS);
        let slot = UNIT_POS as usize;
        first[slot] = a;
        second[slot] = b;
        sync_cube();
        reduce_row_lanes::<N>(&mut first, self.tx, self.ty, self.cu, self.rl);
        reduce_row_lanes::<N>(&mut second, self.tx, self.ty, self.cu, self.rl);
        if self.ty == 0 && self.v < channel_vectors {
            partials[self.split * 2 * channel_vectors + self.v] = first[self.tx];
            partials[(self.split * 2 + 1) * channel_vectors + self.v] = second[self.tx];
        }
    }
}

/// Per split and channel, `sum(x - k)` and `sum((x - k)^2)` with `k` the channel's first value
/// (a shift that keeps the one-pass variance accurate). `partials` is `[splits, 2, C]`.
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn forward_sums<E: Float, N: Size>(
    x: &Tensor<Vector<E, N>>,
    partials: &mut Tensor<Vector<f32, N>>,
    rows: usize,
    rows_per_split: usize,
    x_row: usize,
    channel_vectors: usize,
    channel_lanes: usize,
    #[define(E)] _dtype: ElemType,
) {
    let unit = SumsUnit::new(channel_lanes, rows, rows_per_split);
    let mut s = Vector::<f32, N>::new(0.0f32);
    let mut q = Vector::<f32, N>::new(0.0f32);
    if unit.walks(channel_vectors) {
        let v = unit.v;
        let k = Vector::<f32, N>::cast_from(x[v]);
        let mut r = unit.begin + unit.ty;
        while r < unit.end {
            let d = Vector::<f32, N>::cast_from(x[r * x_row + v]) - k;
            s += d;
            q += d * d;
            r += unit.rl;
        }
    }
    unit.store_partials::<N>(s, q, partials, channel_vectors);
}

/// Per split and channel, `sum(gy)` and `sum(gy * (x - mean))`, `gy` the gradient before the
/// SiLU (recomputed from x and the statistics). Same grid as [`forward_sums`].
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn backward_sums<E: Float, N: Size>(
    x: &Tensor<Vector<E, N>>,
    grad: &Tensor<Vector<E, N>>,
    stats: &Tensor<Vector<f32, N>>,
    partials: &mut Tensor<Vector<f32, N>>,
    rows: usize,
    rows_per_split: usize,
    x_row: usize,
    grad_row: usize,
    channel_vectors: usize,
    channel_lanes: usize,
    #[comptime] act: bool,
    #[define(E)] _dtype: ElemType,
) {
    let unit = SumsUnit::new(channel_lanes, rows, rows_per_split);
    let mut s1 = Vector::<f32, N>::new(0.0f32);
    let mut s2 = Vector::<f32, N>::new(0.0f32);
    if unit.walks(channel_vectors) {
        let v = unit.v;
        let mean = stats[v];
        let scale = stats[3 * channel_vectors + v];
        let shift = stats[4 * channel_vectors + v];
        let mut r = unit.begin + unit.ty;
        while r < unit.end {
            let xv = Vector::<f32, N>::cast_from(x[r * x_row + v]);
            let gy = pre_activation_grad::<N>(Vector::<f32, N>::cast_from(grad[r * grad_row + v]), xv, scale, shift, act);
            s1 += gy;
            s2 += gy * (xv - mean);
            r += unit.rl;
        }
    }
    unit.store_partials::<N>(s1, s2, partials, channel_vectors);
}

/// The gradient before the activation: `g * silu'(y)` with `y = x * scale + shift`, or `g`.
#[cube]
fn pre_activation_grad<N: Size>(g: Vector<f32, N>, x: Vector<f32, N>, scale: Vector<f32, N>, shift: Vector<f32, N>, #[comptime] act: bool) -> Vector<f32, N> {
    let mut gy = g;
    if act {
        let y = x * scale + shift;
        let s = sigmoid::<N>(y);
        let one = Vector::<f32, N>::new(1.0f32);
        gy = g * s * (one + y * (one - s));
    }
    gy
}

/// Adds one channel's two partial rows over the splits (cube = one channel, units stride over
/// the splits, then a fixed-order tree): returns both sums in unit 0.
#[cube]
fn sum_splits(partials: &Tensor<f32>, c: usize, channels: usize, splits: usize) -> (f32, f32) {
    let unit = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let mut a = 0.0f32;
    let mut b = 0.0f32;
    let mut p = unit;
    while p < splits {
        a += partials[p * 2 * channels + c];
        b += partials[(p * 2 + 1) * channels + c];
        p += units;
    }
    let mut first = Shared::<[f32]>::new_slice(CUBE_UNITS);
    let mut second = Shared::<[f32]>::new_slice(CUBE_UNITS);
    first[unit] = a;
    second[unit] = b;
    sync_cube();
    let mut half = units / 2;
    while half > 0 {
        if unit < half {
            let (fa, fb) = (first[unit + half], second[unit + half]);
            first[unit] += fa;
            second[unit] += fb;
        }
        sync_cube();
        half /= 2;
    }
    (first[0], second[0])
}

/// The statistics `[5, C]` (mean, biased variance, rstd, scale, shift) of one channel per cube.
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn finalize_forward<E: Float>(
    x: &Tensor<E>,
    partials: &Tensor<f32>,
    weight: &Tensor<f32>,
    bias: &Tensor<f32>,
    stats: &mut Tensor<f32>,
    splits: usize,
    count: f32,
    epsilon: f32,
    #[define(E)] _dtype: ElemType,
) {
    let c = CUBE_POS_X as usize;
    let channels = stats.shape(1);
    let (s, q) = sum_splits(partials, c, channels, splits);
    if UNIT_POS == 0 {
        let dm = s / count;
        let mean = f32::cast_from(x[c]) + dm;
        let var = f32::max(q / count - dm * dm, 0.0f32);
        let rstd = 1.0f32 / f32::sqrt(var + epsilon);
        let scale = weight[c * weight.stride(0)] * rstd;
        stats[c] = mean;
        stats[channels + c] = var;
        stats[2 * channels + c] = rstd;
        stats[3 * channels + c] = scale;
        stats[4 * channels + c] = bias[c * bias.stride(0)] - mean * scale;
    }
}

/// From the backward sums of one channel per cube: `coef` `[2, C]` = (A, B) of
/// `dx = scale * gy + A * (x - mean) + B`, and the affine parameters' gradients (`[C]` each).
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn finalize_backward(
    partials: &Tensor<f32>,
    stats: &Tensor<f32>,
    coef: &mut Tensor<f32>,
    dweight: &mut Tensor<f32>,
    dbias: &mut Tensor<f32>,
    splits: usize,
    count: f32,
) {
    let c = CUBE_POS_X as usize;
    let channels = stats.shape(1);
    let (sum_gy, sum_gy_xc) = sum_splits(partials, c, channels, splits);
    if UNIT_POS == 0 {
        let rstd = stats[2 * channels + c];
        let scale = stats[3 * channels + c];
        coef[c] = -scale * rstd * rstd * sum_gy_xc / count;
        coef[channels + c] = -scale * sum_gy / count;
        dweight[c] = rstd * sum_gy_xc;
        dbias[c] = sum_gy;
    }
}

/// The vector an elementwise unit handles: its index `i` in the dense output and its row and
/// channel vector `(r, v)`; units past `total` end here.
#[cube]
fn element_position(total: usize, channel_vectors: usize) -> (usize, usize, usize) {
    let i = ABSOLUTE_POS;
    if i >= total {
        terminate!();
    }
    (i, i / channel_vectors, i % channel_vectors)
}

/// `y = act(x * scale + shift)`, one vector a unit; `y` is dense `rows x C`.
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn apply_forward<E: Float, N: Size>(
    x: &Tensor<Vector<E, N>>,
    stats: &Tensor<Vector<f32, N>>,
    y: &mut Tensor<Vector<E, N>>,
    total: usize,
    x_row: usize,
    channel_vectors: usize,
    #[comptime] act: bool,
    #[define(E)] _dtype: ElemType,
) {
    let (i, r, v) = element_position(total, channel_vectors);
    let mut out = Vector::<f32, N>::cast_from(x[r * x_row + v]) * stats[3 * channel_vectors + v] + stats[4 * channel_vectors + v];
    if act {
        out = out * sigmoid::<N>(out);
    }
    y[i] = Vector::<E, N>::cast_from(out);
}

/// `dx = scale * gy + A * (x - mean) + B`, one vector a unit; `dx` is dense `rows x C`.
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn apply_backward<E: Float, N: Size>(
    x: &Tensor<Vector<E, N>>,
    grad: &Tensor<Vector<E, N>>,
    stats: &Tensor<Vector<f32, N>>,
    coef: &Tensor<Vector<f32, N>>,
    dx: &mut Tensor<Vector<E, N>>,
    total: usize,
    x_row: usize,
    grad_row: usize,
    channel_vectors: usize,
    #[comptime] act: bool,
    #[define(E)] _dtype: ElemType,
) {
    let (i, r, v) = element_position(total, channel_vectors);
    let cv = channel_vectors;
    let xv = Vector::<f32, N>::cast_from(x[r * x_row + v]);
    let scale = stats[3 * cv + v];
    let gy = pre_activation_grad::<N>(Vector::<f32, N>::cast_from(grad[r * grad_row + v]), xv, scale, stats[4 * cv + v], act);
    let out = scale * gy + coef[v] * (xv - stats[v]) + coef[cv + v];
    dx[i] = Vector::<E, N>::cast_from(out);
}
