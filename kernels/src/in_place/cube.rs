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

impl InPlaceBackend for CubeBackend {
    fn sgd_step(
        param: CubeTensor,
        buffer: CubeTensor,
        grad: CubeTensor,
        lr: CubeTensor,
        momentum: CubeTensor,
        weight_decay: f64,
        nesterov: bool,
    ) -> (CubeTensor, CubeTensor) {
        if !all_f32(&[&param, &buffer, &grad, &lr, &momentum]) {
            return reference::sgd_step::<Self>(param, buffer, grad, lr, momentum, weight_decay, nesterov);
        }
        let (param, buffer, grad) = (writable(param), writable(buffer), readable(grad));
        let total = param.meta.shape().num_elements();
        assert_eq!(total, buffer.meta.shape().num_elements(), "sgd_step: the momentum buffer has the parameter's size");
        assert_eq!(total, grad.meta.shape().num_elements(), "sgd_step: the gradient has the parameter's size");
        let launch = Launch::new(total, &[&param, &buffer, &grad]);
        unsafe {
            kernels::sgd_step::launch_unchecked(
                &param.client,
                launch.count(),
                CubeDim::new_1d(CUBE_UNITS as u32),
                launch.address,
                param.clone().into_tensor_arg(),
                buffer.clone().into_tensor_arg(),
                grad.into_tensor_arg(),
                readable(lr).into_tensor_arg(),
                readable(momentum).into_tensor_arg(),
                weight_decay as f32,
                launch.total,
                weight_decay > 0.0,
                nesterov,
            );
        }
        (param, buffer)
    }

    fn blend(target: CubeTensor, source: CubeTensor, keep: CubeTensor, take: CubeTensor) -> CubeTensor {
        if !all_f32(&[&target, &source, &keep, &take]) {
            return reference::blend::<Self>(target, source, keep, take);
        }
        let (target, source) = (writable(target), readable(source));
        let launch = Launch::new(target.meta.shape().num_elements(), &[&target, &source]);
        unsafe {
            kernels::blend::launch_unchecked(
                &target.client,
                launch.count(),
                CubeDim::new_1d(CUBE_UNITS as u32),
                launch.address,
                target.clone().into_tensor_arg(),
                source.into_tensor_arg(),
                readable(keep).into_tensor_arg(),
                readable(take).into_tensor_arg(),
                launch.total,
            );
        }
        target
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
