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
        let n = params.tensors.len();
        assert!(buffers.tensors.len() == n && grads.tensors.len() == n, "sgd_many: a buffer and a gradient for each parameter");
        let mut out: Vec<Option<(CubeTensor, CubeTensor)>> = (0..n).map(|_| None).collect();
        let mut batched = Vec::new();
        for (k, ((p, b), g)) in params.tensors.into_iter().zip(buffers.tensors).zip(grads.tensors).enumerate() {
            if all_f32(&[&p, &b, &g, &lr, &momentum]) {
                batched.push((k, [writable(p), writable(b), readable(g)]));
            } else {
                out[k] = Some(reference::sgd_step::<Self>(p, b, g, lr.clone(), momentum.clone(), weight_decay, nesterov));
            }
        }
        batched.sort_by_key(|(_, [p, _, _])| p.meta.shape().num_elements());
        let (lr, momentum) = (readable(lr), readable(momentum));
        for chunk in batched.chunks(kernels::SGD_TRIPLES) {
            sgd_chunk(chunk, &lr, &momentum, weight_decay, nesterov);
        }
        for (k, [p, b, _]) in batched {
            out[k] = Some((p, b));
        }
        let (p, b) = out.into_iter().map(|t| t.expect("every parameter updated")).unzip();
        (TensorList::new(p), TensorList::new(b))
    }

    fn blend_many(targets: TensorList<Self>, sources: TensorList<Self>, keep: CubeTensor, take: CubeTensor) -> TensorList<Self> {
        assert_eq!(targets.tensors.len(), sources.tensors.len(), "blend_many: as many sources as targets");
        let mut out: Vec<Option<CubeTensor>> = (0..targets.tensors.len()).map(|_| None).collect();
        let mut batched = Vec::new();
        for (k, (t, s)) in targets.tensors.into_iter().zip(sources.tensors).enumerate() {
            if all_f32(&[&t, &s, &keep, &take]) {
                batched.push((k, writable(t), readable(s)));
            } else {
                out[k] = Some(reference::blend::<Self>(t, s, keep.clone(), take.clone()));
            }
        }
        // Tensors of similar length share a launch, so the grid (as wide as the longest) is
        // mostly busy.
        batched.sort_by_key(|(_, t, _)| t.meta.shape().num_elements());
        let (keep, take) = (readable(keep), readable(take));
        for chunk in batched.chunks(kernels::BLEND_PAIRS) {
            blend_chunk(chunk, &keep, &take);
        }
        for (k, t, _) in batched {
            out[k] = Some(t);
        }
        TensorList::new(out.into_iter().map(|t| t.expect("every target blended")).collect())
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

// `blend_chunk` and `sgd_chunk` name the kernels' parameters one by one.
const _: () = assert!(kernels::BLEND_PAIRS == 16 && kernels::SGD_TRIPLES == 16);

/// One launch of `kernels::sgd_triples` over `chunk`'s `(index, [param, buffer, grad])` (at most
/// `kernels::SGD_TRIPLES`); the kernel's unused parameters get the first triple again, unread.
fn sgd_chunk(chunk: &[(usize, [CubeTensor; 3])], lr: &CubeTensor, momentum: &CubeTensor, weight_decay: f64, nesterov: bool) {
    assert!(!chunk.is_empty() && chunk.len() <= kernels::SGD_TRIPLES, "sgd_many: 1 to {} parameters a launch", kernels::SGD_TRIPLES);
    for (_, [p, b, g]) in chunk {
        let n = p.meta.shape().num_elements();
        assert!(b.meta.shape().num_elements() == n && g.meta.shape().num_elements() == n, "sgd_many: the buffer and gradient have the parameter's size");
    }
    let longest = chunk.iter().map(|(_, [p, _, _])| p.meta.shape().num_elements()).max().unwrap_or(1);
    let address = chunk.iter().flat_map(|(_, ts)| ts.iter().map(|t| t.required_address_type())).max().unwrap_or_default();
    let triple = |k: usize| {
        let (_, [p, b, g]) = &chunk[if k < chunk.len() { k } else { 0 }];
        (p.clone().into_tensor_arg(), b.clone().into_tensor_arg(), g.clone().into_tensor_arg())
    };
    let [t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15] = std::array::from_fn::<_, 16, _>(triple);
    let count = CubeCount::Static(longest.div_ceil(CUBE_UNITS).max(1) as u32, chunk.len() as u32, 1);
    unsafe {
        kernels::sgd_triples::launch_unchecked(
            &chunk[0].1[0].client,
            count,
            CubeDim::new_1d(CUBE_UNITS as u32),
            address,
            t0.0,
            t0.1,
            t0.2,
            t1.0,
            t1.1,
            t1.2,
            t2.0,
            t2.1,
            t2.2,
            t3.0,
            t3.1,
            t3.2,
            t4.0,
            t4.1,
            t4.2,
            t5.0,
            t5.1,
            t5.2,
            t6.0,
            t6.1,
            t6.2,
            t7.0,
            t7.1,
            t7.2,
            t8.0,
            t8.1,
            t8.2,
            t9.0,
            t9.1,
            t9.2,
            t10.0,
            t10.1,
            t10.2,
            t11.0,
            t11.1,
            t11.2,
            t12.0,
            t12.1,
            t12.2,
            t13.0,
            t13.1,
            t13.2,
            t14.0,
            t14.1,
            t14.2,
            t15.0,
            t15.1,
            t15.2,
            lr.clone().into_tensor_arg(),
            momentum.clone().into_tensor_arg(),
            weight_decay as f32,
            chunk.len(),
            weight_decay > 0.0,
            nesterov,
        );
    }
}

/// One launch of `kernels::blend_pairs` over `chunk`'s `(index, target, source)` triples (at
/// most `kernels::BLEND_PAIRS`); the kernel's unused parameters get the first pair again, unread.
fn blend_chunk(chunk: &[(usize, CubeTensor, CubeTensor)], keep: &CubeTensor, take: &CubeTensor) {
    assert!(!chunk.is_empty() && chunk.len() <= kernels::BLEND_PAIRS, "blend_many: 1 to {} pairs a launch", kernels::BLEND_PAIRS);
    for (_, t, s) in chunk {
        assert_eq!(t.meta.shape().num_elements(), s.meta.shape().num_elements(), "blend_many: a source has its target's size");
    }
    let longest = chunk.iter().map(|(_, t, _)| t.meta.shape().num_elements()).max().unwrap_or(1);
    let address = chunk.iter().flat_map(|(_, t, s)| [t.required_address_type(), s.required_address_type()]).max().unwrap_or_default();
    let pair = |k: usize| {
        let (_, t, s) = &chunk[if k < chunk.len() { k } else { 0 }];
        (t.clone().into_tensor_arg(), s.clone().into_tensor_arg())
    };
    let [p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15] = std::array::from_fn::<_, 16, _>(pair);
    let count = CubeCount::Static(longest.div_ceil(CUBE_UNITS).max(1) as u32, chunk.len() as u32, 1);
    unsafe {
        kernels::blend_pairs::launch_unchecked(
            &chunk[0].1.client,
            count,
            CubeDim::new_1d(CUBE_UNITS as u32),
            address,
            p0.0,
            p0.1,
            p1.0,
            p1.1,
            p2.0,
            p2.1,
            p3.0,
            p3.1,
            p4.0,
            p4.1,
            p5.0,
            p5.1,
            p6.0,
            p6.1,
            p7.0,
            p7.1,
            p8.0,
            p8.1,
            p9.0,
            p9.1,
            p10.0,
            p10.1,
            p11.0,
            p11.1,
            p12.0,
            p12.1,
            p13.0,
            p13.1,
            p14.0,
            p14.1,
            p15.0,
            p15.1,
            keep.clone().into_tensor_arg(),
            take.clone().into_tensor_arg(),
            chunk.len(),
        );
    }
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
