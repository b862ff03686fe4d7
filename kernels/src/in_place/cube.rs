//! The in-place updates on the GPU: the state tensors are written where they are when uniquely
//! owned and contiguous (a fresh copy first otherwise, so the result is right either way), and
//! anything but f32 state takes the composed reference.

use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::kernel::{into_contiguous, untile};
use burn_cubecl::tensor::CubeTensor;

use super::kernels::{self, CUBE_UNITS};
use super::{InPlaceBackend, reference};
use crate::tensor_list::TensorList;

/// One launch of the list kernel `kernels::$kernel`: its per-item tensor arguments (`pairs`,
/// `triples` or `quads` of the named tuples, in order, as the kernel declares them) and then
/// `rest`. The kernels take a parameter a tensor (see `kernels::blend_pairs`), so each call names
/// 32 to 64 of them.
macro_rules! launch_items {
    (@call $kernel:ident, $chunk:ident, $count:ident, $address:ident, [$($arg:expr),*], $($rest:expr),*) => {
        // SAFETY: `chunk_grid` checked every item's tensors to be of one length, and the kernel
        // reads and writes item `y`'s tensors only below that length.
        unsafe { kernels::$kernel::launch_unchecked(&$chunk[0].1[0].client, $count, CubeDim::new_1d(CUBE_UNITS as u32), $address, $($arg,)* $($rest),*) }
    };
    ($kernel:ident, $chunk:ident, $count:ident, $address:ident, pairs [$($i:ident)*], $($rest:expr),*) => {
        launch_items!(@call $kernel, $chunk, $count, $address, [$($i.0, $i.1),*], $($rest),*)
    };
    ($kernel:ident, $chunk:ident, $count:ident, $address:ident, triples [$($i:ident)*], $($rest:expr),*) => {
        launch_items!(@call $kernel, $chunk, $count, $address, [$($i.0, $i.1, $i.2),*], $($rest),*)
    };
    ($kernel:ident, $chunk:ident, $count:ident, $address:ident, quads [$($i:ident)*], $($rest:expr),*) => {
        launch_items!(@call $kernel, $chunk, $count, $address, [$($i.0, $i.1, $i.2, $i.3),*], $($rest),*)
    };
}

impl InPlaceBackend for CubeBackend {
    fn sgd_many(
        params: TensorList<Self>,
        buffers: TensorList<Self>,
        grads: TensorList<Self>,
        lr: CubeTensor,
        momentum: CubeTensor,
        weight_decay: f64,
        nesterov: bool,
    ) -> (TensorList<Self>, TensorList<Self>) {
        let triples = reference::items([params, buffers, grads], "sgd_many", reference::SGD_ITEMS);
        let (lr_dense, momentum_dense) = (readable(lr.clone()), readable(momentum.clone()));
        let updated = in_launches(
            triples.collect(),
            kernels::SGD_TRIPLES,
            |[p, b, g]| match all_f32(&[&p, &b, &g, &lr, &momentum]) {
                true => Ok([writable(p), writable(b), readable(g)]),
                false => Err(reference::sgd_step::<Self>(p, b, g, lr.clone(), momentum.clone(), weight_decay, nesterov)),
            },
            |chunk| sgd_chunk(chunk, &lr_dense, &momentum_dense, weight_decay, nesterov),
            |[p, b, _]| (p, b),
        );
        let (p, b) = updated.into_iter().unzip();
        (TensorList::new(p), TensorList::new(b))
    }

    fn adamw_many(
        params: TensorList<Self>,
        exp_avgs: TensorList<Self>,
        exp_avg_sqs: TensorList<Self>,
        grads: TensorList<Self>,
        scalars: TensorList<Self>,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    ) -> (TensorList<Self>, TensorList<Self>, TensorList<Self>) {
        let s = reference::adamw_scalars::<Self>(scalars);
        let c = super::AdamWConstants { beta2, eps, weight_decay };
        let f32_scalars = all_f32(&s.iter().collect::<Vec<_>>());
        // The five scalars side by side in one dense `[5]` tensor: one kernel parameter.
        let packed = readable(reference::packed::<Self>(&s));
        let quads = reference::items([params, exp_avgs, exp_avg_sqs, grads], "adamw_many", reference::ADAMW_ITEMS);
        let updated = in_launches(
            quads.collect(),
            kernels::ADAMW_QUADS,
            |[p, m, v, g]| match f32_scalars && all_f32(&[&p, &m, &v, &g]) {
                true => Ok([writable(p), writable(m), writable(v), readable(g)]),
                false => Err(reference::adamw_step::<Self>([p, m, v, g], s.clone(), c)),
            },
            |chunk| adamw_chunk(chunk, &packed, c),
            |[p, m, v, _]| (p, m, v),
        );
        reference::three_lists::<Self>(updated.into_iter())
    }

    fn blend_many(targets: TensorList<Self>, sources: TensorList<Self>, keep: CubeTensor, take: CubeTensor) -> TensorList<Self> {
        let pairs = reference::items([targets, sources], "blend_many", reference::BLEND_ITEMS);
        let (keep_dense, take_dense) = (readable(keep.clone()), readable(take.clone()));
        let blended = in_launches(
            pairs.collect(),
            kernels::BLEND_PAIRS,
            |[t, s]| match all_f32(&[&t, &s, &keep, &take]) {
                true => Ok([writable(t), readable(s)]),
                false => Err(reference::blend::<Self>(t, s, keep.clone(), take.clone())),
            },
            |chunk| blend_chunk(chunk, &keep_dense, &take_dense),
            |[t, _]| t,
        );
        TensorList::new(blended)
    }

    fn blend_const(target: CubeTensor, source: CubeTensor, keep: f64, take: f64) -> CubeTensor {
        if !all_f32(&[&target, &source]) {
            return reference::blend_const::<Self>(target, source, keep, take);
        }
        let (target, source) = (writable(target), readable(source));
        let launch = Launch::new(target.meta.shape().num_elements(), &[&target, &source]);
        unsafe {
            kernels::blend_const::launch_unchecked(
                &target.client,
                launch.count(),
                CubeDim::new_1d(CUBE_UNITS as u32),
                launch.address,
                target.clone().into_tensor_arg(),
                source.into_tensor_arg(),
                keep as f32,
                take as f32,
                launch.total,
            );
        }
        target
    }

    fn running_stats(mean: CubeTensor, var: CubeTensor, stats: CubeTensor, momentum: f64, correction: f64) -> (CubeTensor, CubeTensor) {
        if !all_f32(&[&mean, &var, &stats]) {
            return reference::running_stats::<Self>(mean, var, stats, momentum, correction);
        }
        let (mean, var, stats) = (writable(mean), writable(var), readable(stats));
        let channels = mean.meta.shape().num_elements();
        assert_eq!(channels, var.meta.shape().num_elements(), "running_stats: mean and variance have one value a channel");
        assert!(stats.meta.shape()[0] >= 2 && stats.meta.shape()[1] == channels, "running_stats: the statistics are [rows >= 2, C]");
        let launch = Launch::new(channels, &[&mean, &var, &stats]);
        unsafe {
            kernels::running_stats::launch_unchecked(
                &mean.client,
                launch.count(),
                CubeDim::new_1d(CUBE_UNITS as u32),
                launch.address,
                mean.clone().into_tensor_arg(),
                var.clone().into_tensor_arg(),
                stats.into_tensor_arg(),
                (1.0 - momentum) as f32,
                momentum as f32,
                correction as f32,
                launch.total,
            );
        }
        (mean, var)
    }
}

// `blend_chunk`, `sgd_chunk` and `adamw_chunk` name the kernels' parameters one by one.
const _: () = assert!(kernels::BLEND_PAIRS == 16 && kernels::SGD_TRIPLES == 16 && kernels::ADAMW_QUADS == 16);

/// One launch of `kernels::adamw_quads` over `chunk`'s `(index, [param, exp_avg, exp_avg_sq,
/// grad])` (at most `kernels::ADAMW_QUADS`), `scalars` the dense `[5]` of `adamw_many`; the
/// kernel's unused parameters get the first quadruple again, unread.
fn adamw_chunk(chunk: &[(usize, [CubeTensor; 4])], scalars: &CubeTensor, c: super::AdamWConstants) {
    let (count, address) = chunk_grid(chunk, kernels::ADAMW_QUADS, "adamw_many");
    let quad = |k: usize| {
        let (_, [p, m, v, g]) = &chunk[if k < chunk.len() { k } else { 0 }];
        (p.clone().into_tensor_arg(), m.clone().into_tensor_arg(), v.clone().into_tensor_arg(), g.clone().into_tensor_arg())
    };
    let [q0, q1, q2, q3, q4, q5, q6, q7, q8, q9, q10, q11, q12, q13, q14, q15] = std::array::from_fn::<_, 16, _>(quad);
    let scalars = scalars.clone().into_tensor_arg();
    let (beta2, one_minus_beta2) = (c.beta2 as f32, (1.0 - c.beta2) as f32);
    launch_items!(adamw_quads, chunk, count, address, quads [q0 q1 q2 q3 q4 q5 q6 q7 q8 q9 q10 q11 q12 q13 q14 q15], scalars, beta2, one_minus_beta2, c.eps as f32, c.weight_decay as f32, chunk.len());
}

/// One launch of `kernels::sgd_triples` over `chunk`'s `(index, [param, buffer, grad])` (at most
/// `kernels::SGD_TRIPLES`); the kernel's unused parameters get the first triple again, unread.
fn sgd_chunk(chunk: &[(usize, [CubeTensor; 3])], lr: &CubeTensor, momentum: &CubeTensor, weight_decay: f64, nesterov: bool) {
    let (count, address) = chunk_grid(chunk, kernels::SGD_TRIPLES, "sgd_many");
    let triple = |k: usize| {
        let (_, [p, b, g]) = &chunk[if k < chunk.len() { k } else { 0 }];
        (p.clone().into_tensor_arg(), b.clone().into_tensor_arg(), g.clone().into_tensor_arg())
    };
    let [t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15] = std::array::from_fn::<_, 16, _>(triple);
    let (lr, momentum) = (lr.clone().into_tensor_arg(), momentum.clone().into_tensor_arg());
    let decay = weight_decay > 0.0;
    launch_items!(sgd_triples, chunk, count, address, triples [t0 t1 t2 t3 t4 t5 t6 t7 t8 t9 t10 t11 t12 t13 t14 t15], lr, momentum, weight_decay as f32, chunk.len(), decay, nesterov);
}

/// One launch of `kernels::blend_pairs` over `chunk`'s `(index, [target, source])` (at most
/// `kernels::BLEND_PAIRS`); the kernel's unused parameters get the first pair again, unread.
fn blend_chunk(chunk: &[(usize, [CubeTensor; 2])], keep: &CubeTensor, take: &CubeTensor) {
    let (count, address) = chunk_grid(chunk, kernels::BLEND_PAIRS, "blend_many");
    let pair = |k: usize| {
        let (_, [t, s]) = &chunk[if k < chunk.len() { k } else { 0 }];
        (t.clone().into_tensor_arg(), s.clone().into_tensor_arg())
    };
    let [p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15] = std::array::from_fn::<_, 16, _>(pair);
    let (keep, take) = (keep.clone().into_tensor_arg(), take.clone().into_tensor_arg());
    launch_items!(blend_pairs, chunk, count, address, pairs [p0 p1 p2 p3 p4 p5 p6 p7 p8 p9 p10 p11 p12 p13 p14 p15], keep, take, chunk.len());
}

/// The list operations' common course: each item `prepare`d either for a launch (`Ok`: f32,
/// dense, writable) or already done by the reference (`Err`, any other dtype); the launched ones
/// sorted by length, so tensors of similar length share a launch and its grid (as wide as the
/// longest) is mostly busy, `launch`ed `per_launch` at a time and `finish`ed; the results in the
/// items' order.
fn in_launches<I, const N: usize, R>(
    items: Vec<I>,
    per_launch: usize,
    mut prepare: impl FnMut(I) -> Result<[CubeTensor; N], R>,
    mut launch: impl FnMut(&[(usize, [CubeTensor; N])]),
    mut finish: impl FnMut([CubeTensor; N]) -> R,
) -> Vec<R> {
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    let mut batched = Vec::new();
    for (k, item) in items.into_iter().enumerate() {
        match prepare(item) {
            Ok(tensors) => batched.push((k, tensors)),
            Err(done) => out[k] = Some(done),
        }
    }
    batched.sort_by_key(|(_, tensors)| tensors[0].meta.shape().num_elements());
    for chunk in batched.chunks(per_launch) {
        launch(chunk);
    }
    for (k, tensors) in batched {
        out[k] = Some(finish(tensors));
    }
    out.into_iter().map(|r| r.expect("every item done")).collect()
}

/// The grid and address type of one list launch: a cube row an item (at most `per_launch`), the
/// cubes along `x` as many as the longest item needs; every tensor of an item has the first's
/// length.
fn chunk_grid<const N: usize>(chunk: &[(usize, [CubeTensor; N])], per_launch: usize, op: &str) -> (CubeCount, AddressType) {
    assert!(!chunk.is_empty() && chunk.len() <= per_launch, "{op}: 1 to {per_launch} items a launch");
    for (_, tensors) in chunk {
        let n = tensors[0].meta.shape().num_elements();
        assert!(tensors.iter().all(|t| t.meta.shape().num_elements() == n), "{op}: the tensors of an item have one length");
    }
    let longest = chunk.iter().map(|(_, tensors)| tensors[0].meta.shape().num_elements()).max().unwrap_or(1);
    let address = chunk.iter().flat_map(|(_, tensors)| tensors.iter().map(|t| t.required_address_type())).max().unwrap_or_default();
    (CubeCount::Static(longest.div_ceil(CUBE_UNITS).max(1) as u32, chunk.len() as u32, 1), address)
}

fn all_f32(tensors: &[&CubeTensor]) -> bool {
    tensors.iter().all(|t| t.dtype == DType::F32)
}

/// `t` as a dense tensor this kernel may write: itself when uniquely owned and contiguous (the
/// in-place case a captured step relies on), else a fresh dense copy.
fn writable(t: CubeTensor) -> CubeTensor {
    let t = untile(t);
    if !t.is_contiguous() {
        return into_contiguous(t);
    }
    if t.can_mut() { t } else { t.copy() }
}

/// `t` dense, for reading.
fn readable(t: CubeTensor) -> CubeTensor {
    into_contiguous(t)
}

/// The launch of an elementwise update over `total` elements, one a unit.
struct Launch {
    total: usize,
    address: AddressType,
}

impl Launch {
    fn new(total: usize, operands: &[&CubeTensor]) -> Self {
        let address = operands.iter().map(|t| t.required_address_type()).max().unwrap_or_default();
        Self { total, address }
    }

    fn count(&self) -> CubeCount {
        CubeCount::Static(self.total.div_ceil(CUBE_UNITS).max(1) as u32, 1, 1)
    }
}
