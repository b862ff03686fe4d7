//! The CubeCL kernels of the in-place updates: one f32 element a unit, read and written at the
//! same index, with the `[1]` device scalars read once per unit.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

/// Units a cube holds.
pub const CUBE_UNITS: usize = 256;

/// The element this unit updates; units past `total` end here.
#[cube]
fn position(total: usize) -> usize {
    let i = ABSOLUTE_POS;
    if i >= total {
        terminate!();
    }
    i
}

/// One SGD step of one element: the parameter and momentum buffer after it.
#[cube]
#[allow(clippy::too_many_arguments)]
fn sgd_update(p: f32, buffer: f32, grad: f32, lr: f32, momentum: f32, weight_decay: f32, #[comptime] decay: bool, #[comptime] nesterov: bool) -> (f32, f32) {
    let mut g = grad;
    if decay {
        g += p * weight_decay;
    }
    let b = buffer * momentum + g;
    let mut step = b;
    if nesterov {
        step = g + b * momentum;
    }
    (p - step * lr, b)
}

/// Declares `$name`: one SGD step in place for the first `used` of its (parameter, buffer,
/// gradient) triples, one launch laid out as `blend_pairs`'s (cube row `y` = triple `y`).
macro_rules! sgd_triples_kernel {
    ($name:ident, $triples:literal, $(($p:ident, $b:ident, $g:ident, $k:literal)),*) => {
        #[cube(launch_unchecked, address_type = "dynamic")]
        #[allow(clippy::too_many_arguments)]
        pub fn $name(
            $($p: &mut Tensor<f32>, $b: &mut Tensor<f32>, $g: &Tensor<f32>,)*
            lr: &Tensor<f32>,
            momentum: &Tensor<f32>,
            weight_decay: f32,
            #[comptime] used: usize,
            #[comptime] decay: bool,
            #[comptime] nesterov: bool,
        ) {
            let i = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
            let which = CUBE_POS_Y as usize;
            $(
                if comptime!($k < used) {
                    if which == $k && i < $p.len() {
                        let (p, b) = sgd_update($p[i], $b[i], $g[i], lr[0], momentum[0], weight_decay, decay, nesterov);
                        $b[i] = b;
                        $p[i] = p;
                    }
                }
            )*
        }

        /// Triples one launch of the kernel takes.
        pub const SGD_TRIPLES: usize = $triples;
    };
}

sgd_triples_kernel!(
    sgd_triples,
    16,
    (p0, b0, g0, 0),
    (p1, b1, g1, 1),
    (p2, b2, g2, 2),
    (p3, b3, g3, 3),
    (p4, b4, g4, 4),
    (p5, b5, g5, 5),
    (p6, b6, g6, 6),
    (p7, b7, g7, 7),
    (p8, b8, g8, 8),
    (p9, b9, g9, 9),
    (p10, b10, g10, 10),
    (p11, b11, g11, 11),
    (p12, b12, g12, 12),
    (p13, b13, g13, 13),
    (p14, b14, g14, 14),
    (p15, b15, g15, 15)
);

/// One AdamW step of one element, in the reference's order of operations: the parameter and
/// both moments after it. `s` holds `[lr, beta1, 1 - beta1, bias1, bias2]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn adamw_update(p: f32, m: f32, v: f32, g: f32, s: &Tensor<f32>, beta2: f32, one_minus_beta2: f32, eps: f32, weight_decay: f32) -> (f32, f32, f32) {
    let m = m * s[1] + g * s[2];
    let v = v * beta2 + (g * g) * one_minus_beta2;
    let step = m / s[3] / (f32::sqrt(v / s[4]) + eps) * s[0];
    let keep = s[0] * -weight_decay + 1.0;
    (p * keep - step, m, v)
}

/// Declares `$name`: one AdamW step in place for the first `used` of its (parameter, first
/// moment, second moment, gradient) quadruples, one launch laid out as `blend_pairs`'s (cube row
/// `y` = quadruple `y`).
macro_rules! adamw_quads_kernel {
    ($name:ident, $quads:literal, $(($p:ident, $m:ident, $v:ident, $g:ident, $k:literal)),*) => {
        #[cube(launch_unchecked, address_type = "dynamic")]
        #[allow(clippy::too_many_arguments)]
        pub fn $name(
            $($p: &mut Tensor<f32>, $m: &mut Tensor<f32>, $v: &mut Tensor<f32>, $g: &Tensor<f32>,)*
            scalars: &Tensor<f32>,
            beta2: f32,
            one_minus_beta2: f32,
            eps: f32,
            weight_decay: f32,
            #[comptime] used: usize,
        ) {
            let i = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
            let which = CUBE_POS_Y as usize;
            $(
                if comptime!($k < used) {
                    if which == $k && i < $p.len() {
                        let (p, m, v) = adamw_update($p[i], $m[i], $v[i], $g[i], scalars, beta2, one_minus_beta2, eps, weight_decay);
                        $m[i] = m;
                        $v[i] = v;
                        $p[i] = p;
                    }
                }
            )*
        }

        /// Quadruples one launch of the kernel takes.
        pub const ADAMW_QUADS: usize = $quads;
    };
}

adamw_quads_kernel!(
    adamw_quads,
    16,
    (p0, m0, v0, g0, 0),
    (p1, m1, v1, g1, 1),
    (p2, m2, v2, g2, 2),
    (p3, m3, v3, g3, 3),
    (p4, m4, v4, g4, 4),
    (p5, m5, v5, g5, 5),
    (p6, m6, v6, g6, 6),
    (p7, m7, v7, g7, 7),
    (p8, m8, v8, g8, 8),
    (p9, m9, v9, g9, 9),
    (p10, m10, v10, g10, 10),
    (p11, m11, v11, g11, 11),
    (p12, m12, v12, g12, 12),
    (p13, m13, v13, g13, 13),
    (p14, m14, v14, g14, 14),
    (p15, m15, v15, g15, 15)
);

/// Declares `$name`: `t_k = t_k * keep + s_k * take` in place for the first `used` of its
/// (target, source) pairs, one launch: cube row `y` updates pair `y`, the cubes along `x` its
/// elements (the grid as wide as the longest target; a shorter one's surplus units do nothing).
/// Fixed parameters rather than a list: cubecl 0.11 cannot pass a sequence of tensors (a `Tensor`
/// is unsized there), so the kernel has one parameter a tensor and the unused pairs compile away.
macro_rules! blend_pairs_kernel {
    ($name:ident, $pairs:literal, $(($t:ident, $s:ident, $k:literal)),*) => {
        #[cube(launch_unchecked, address_type = "dynamic")]
        #[allow(clippy::too_many_arguments)]
        pub fn $name($($t: &mut Tensor<f32>, $s: &Tensor<f32>,)* keep: &Tensor<f32>, take: &Tensor<f32>, #[comptime] used: usize) {
            let i = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
            let which = CUBE_POS_Y as usize;
            $(
                if comptime!($k < used) {
                    if which == $k && i < $t.len() {
                        $t[i] = $t[i] * keep[0] + $s[i] * take[0];
                    }
                }
            )*
        }

        /// Pairs one launch of the kernel takes.
        pub const BLEND_PAIRS: usize = $pairs;
    };
}

blend_pairs_kernel!(
    blend_pairs,
    16,
    (t0, s0, 0),
    (t1, s1, 1),
    (t2, s2, 2),
    (t3, s3, 3),
    (t4, s4, 4),
    (t5, s5, 5),
    (t6, s6, 6),
    (t7, s7, 7),
    (t8, s8, 8),
    (t9, s9, 9),
    (t10, s10, 10),
    (t11, s11, 11),
    (t12, s12, 12),
    (t13, s13, 13),
    (t14, s14, 14),
    (t15, s15, 15)
);

/// `target = target * keep + source * take` in place, the weights constants.
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn blend_const(target: &mut Tensor<f32>, source: &Tensor<f32>, keep: f32, take: f32, total: usize) {
    let i = position(total);
    target[i] = target[i] * keep + source[i] * take;
}

/// BatchNorm's running mean and variance in place, one channel a unit, from `stats` (`[rows,
/// C]` dense: the batch mean in row 0, the biased variance in row 1).
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn running_stats(mean: &mut Tensor<f32>, var: &mut Tensor<f32>, stats: &Tensor<f32>, keep: f32, take: f32, correction: f32, channels: usize) {
    let c = position(channels);
    mean[c] = mean[c] * keep + stats[c] * take;
    var[c] = var[c] * keep + stats[channels + c] * correction * take;
}
