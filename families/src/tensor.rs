//! A float tensor of any rank: what the parameter store holds (convolution weights, linear
//! weights, embeddings, vectors) and what flows between a step's stages.

use burn::tensor::{Device, FloatDType, Tensor};

/// A device tensor of any rank.
#[derive(Debug, Clone)]
pub enum AnyTensor {
    R1(Tensor<1>),
    R2(Tensor<2>),
    R3(Tensor<3>),
    R4(Tensor<4>),
}

/// `$e` for the tensor of `$v` whatever its rank (`$t` bound to it), as an [`AnyTensor`] of the
/// same rank: for operations generic over the rank (`Tensor<D>`).
#[macro_export]
macro_rules! each_rank {
    ($v:expr, $t:ident => $e:expr) => {
        match $v {
            $crate::tensor::AnyTensor::R1($t) => $crate::tensor::AnyTensor::R1($e),
            $crate::tensor::AnyTensor::R2($t) => $crate::tensor::AnyTensor::R2($e),
            $crate::tensor::AnyTensor::R3($t) => $crate::tensor::AnyTensor::R3($e),
            $crate::tensor::AnyTensor::R4($t) => $crate::tensor::AnyTensor::R4($e),
        }
    };
}

/// `$e` for the tensor of `$v` whatever its rank (`$t` bound to it), of one type.
#[macro_export]
macro_rules! with_rank {
    ($v:expr, $t:ident => $e:expr) => {
        match $v {
            $crate::tensor::AnyTensor::R1($t) => $e,
            $crate::tensor::AnyTensor::R2($t) => $e,
            $crate::tensor::AnyTensor::R3($t) => $e,
            $crate::tensor::AnyTensor::R4($t) => $e,
        }
    };
}

/// `$e` for two tensors of one rank (`$a`, `$b` bound to them), as an [`AnyTensor`] of it.
#[macro_export]
macro_rules! each_rank2 {
    ($x:expr, $y:expr, $a:ident, $b:ident => $e:expr) => {
        match ($x, $y) {
            ($crate::tensor::AnyTensor::R1($a), $crate::tensor::AnyTensor::R1($b)) => $crate::tensor::AnyTensor::R1($e),
            ($crate::tensor::AnyTensor::R2($a), $crate::tensor::AnyTensor::R2($b)) => $crate::tensor::AnyTensor::R2($e),
            ($crate::tensor::AnyTensor::R3($a), $crate::tensor::AnyTensor::R3($b)) => $crate::tensor::AnyTensor::R3($e),
            ($crate::tensor::AnyTensor::R4($a), $crate::tensor::AnyTensor::R4($b)) => $crate::tensor::AnyTensor::R4($e),
            _ => panic!("tensors of different ranks"),
        }
    };
}

impl AnyTensor {
    pub fn dims(&self) -> Vec<usize> {
        match self {
            AnyTensor::R1(t) => t.dims().to_vec(),
            AnyTensor::R2(t) => t.dims().to_vec(),
            AnyTensor::R3(t) => t.dims().to_vec(),
            AnyTensor::R4(t) => t.dims().to_vec(),
        }
    }

    /// The tensor without its autodiff history (what a graph's output buffer holds).
    pub fn inner(&self) -> AnyTensor {
        crate::each_rank!(self, t => t.clone().inner())
    }

    /// A leaf of a new autodiff graph on the same buffer.
    pub fn leaf(&self) -> AnyTensor {
        crate::each_rank!(self, t => t.clone().inner().autodiff().require_grad())
    }

    /// The gradient of this leaf in `grads` (zeros when it did not reach the objective).
    pub fn grad(&self, grads: &burn::tensor::Gradients) -> AnyTensor {
        crate::each_rank!(self, t => t.grad(grads).unwrap_or_else(|| t.clone().inner().zeros_like()))
    }

    /// `sum(self * other)` as `[1]` in f32 (self keeps its autodiff; `other` is a constant): a
    /// part's outputs may mix dtypes (RT-DETR's boxes are f32 under bf16), and their dots are
    /// summed into one objective.
    pub fn dot(&self, other: &AnyTensor) -> Tensor<1> {
        let dot = match (self, other) {
            (AnyTensor::R1(a), AnyTensor::R1(b)) => a.clone().mul(b.clone().autodiff()).sum(),
            (AnyTensor::R2(a), AnyTensor::R2(b)) => a.clone().mul(b.clone().autodiff()).sum(),
            (AnyTensor::R3(a), AnyTensor::R3(b)) => a.clone().mul(b.clone().autodiff()).sum(),
            (AnyTensor::R4(a), AnyTensor::R4(b)) => a.clone().mul(b.clone().autodiff()).sum(),
            _ => panic!("dot of tensors of different ranks"),
        };
        dot.cast(FloatDType::F32)
    }

    /// `sum(self^2)` as `[1]`, detached.
    pub fn sum_squares(&self) -> Tensor<1> {
        match self {
            AnyTensor::R1(t) => t.clone().inner().square().sum(),
            AnyTensor::R2(t) => t.clone().inner().square().sum(),
            AnyTensor::R3(t) => t.clone().inner().square().sum(),
            AnyTensor::R4(t) => t.clone().inner().square().sum(),
        }
    }

    /// `self + other` (the same rank).
    pub fn add(&self, other: &AnyTensor) -> AnyTensor {
        match (self, other) {
            (AnyTensor::R1(a), AnyTensor::R1(b)) => AnyTensor::R1(a.clone().add(b.clone())),
            (AnyTensor::R2(a), AnyTensor::R2(b)) => AnyTensor::R2(a.clone().add(b.clone())),
            (AnyTensor::R3(a), AnyTensor::R3(b)) => AnyTensor::R3(a.clone().add(b.clone())),
            (AnyTensor::R4(a), AnyTensor::R4(b)) => AnyTensor::R4(a.clone().add(b.clone())),
            _ => panic!("sum of tensors of different ranks"),
        }
    }

    /// A copy in a fresh, uniquely owned buffer: a buffer a graph can read in place.
    pub fn fresh_copy(&self) -> AnyTensor {
        fn copy<const D: usize>(t: &Tensor<D>) -> Tensor<D> {
            let mut out = t.clone().inner().zeros_like();
            write_into(&mut out, t.clone().inner());
            out
        }
        crate::each_rank!(self, t => copy(t))
    }

    /// Writes `new` (same rank and shape) into this tensor's own buffer. Fails when the buffer
    /// is shared: the write would then land in a new buffer that a graph never reads.
    pub fn refresh(&mut self, new: &AnyTensor, require_unique: bool) -> Result<(), String> {
        fn write<const D: usize>(t: &mut Tensor<D>, new: &Tensor<D>, unique: bool) -> Result<(), String> {
            if unique && !t.can_mut() {
                return Err("a stable input buffer is shared, so an in-place refresh would not reach the graph".into());
            }
            write_into(t, new.clone().inner());
            Ok(())
        }
        match (self, new) {
            (AnyTensor::R1(t), AnyTensor::R1(n)) => write(t, n, require_unique),
            (AnyTensor::R2(t), AnyTensor::R2(n)) => write(t, n, require_unique),
            (AnyTensor::R3(t), AnyTensor::R3(n)) => write(t, n, require_unique),
            (AnyTensor::R4(t), AnyTensor::R4(n)) => write(t, n, require_unique),
            _ => Err("a refresh of another rank".into()),
        }
    }
}

impl AnyTensor {
    /// The number of elements.
    pub fn num_elements(&self) -> usize {
        self.dims().iter().product()
    }

    /// The tensor as a flat vector (a view, no copy).
    pub fn flat(&self) -> Tensor<1> {
        let n = self.num_elements();
        crate::with_rank!(self, t => t.clone().reshape([n]))
    }

    /// `flat` reshaped back to this tensor's shape.
    pub fn unflat(&self, flat: Tensor<1>) -> AnyTensor {
        crate::each_rank!(self, t => flat.clone().reshape(t.dims()))
    }

    pub fn to_device(&self, device: &Device) -> AnyTensor {
        crate::each_rank!(self, t => t.clone().to_device(device))
    }

    pub fn cast(&self, dtype: FloatDType) -> AnyTensor {
        crate::each_rank!(self, t => t.clone().cast(dtype))
    }

    /// Writes `new` (same rank and shape) into this tensor's own buffer (in place when it is
    /// uniquely owned; see [`write_into`]).
    pub fn write(&mut self, new: AnyTensor) {
        match (self, new) {
            (AnyTensor::R1(t), AnyTensor::R1(n)) => write_into(t, n),
            (AnyTensor::R2(t), AnyTensor::R2(n)) => write_into(t, n),
            (AnyTensor::R3(t), AnyTensor::R3(n)) => write_into(t, n),
            (AnyTensor::R4(t), AnyTensor::R4(n)) => write_into(t, n),
            _ => panic!("a write of another rank"),
        }
    }

    /// The rank and the backend primitive, for an operation over tensors of several ranks (the
    /// EMA's blend of every tensor of the model at once); [`AnyTensor::from_primitive`] puts them
    /// back together.
    pub fn into_primitive(self) -> (usize, burn::backend::tensor::FloatTensor<burn::backend::Dispatch>) {
        match self {
            AnyTensor::R1(t) => (1, t.into_dispatch()),
            AnyTensor::R2(t) => (2, t.into_dispatch()),
            AnyTensor::R3(t) => (3, t.into_dispatch()),
            AnyTensor::R4(t) => (4, t.into_dispatch()),
        }
    }

    /// The tensor of `rank` (1 to 4) holding `p`.
    pub fn from_primitive(rank: usize, p: burn::backend::tensor::FloatTensor<burn::backend::Dispatch>) -> AnyTensor {
        match rank {
            1 => AnyTensor::R1(Tensor::from_dispatch(p)),
            2 => AnyTensor::R2(Tensor::from_dispatch(p)),
            3 => AnyTensor::R3(Tensor::from_dispatch(p)),
            4 => AnyTensor::R4(Tensor::from_dispatch(p)),
            _ => panic!("a tensor of rank {rank}: AnyTensor holds ranks 1 to 4"),
        }
    }

    /// A copy in a buffer of its own.
    pub fn deep_copy(&self) -> AnyTensor {
        crate::each_rank!(self, t => t.clone().mul_scalar(1.0))
    }

    /// Whether this handle owns its buffer alone (an in-place write then stays in it).
    pub fn can_mut(&self) -> bool {
        crate::with_rank!(self, t => t.can_mut())
    }

    pub fn dtype(&self) -> burn::tensor::DType {
        crate::with_rank!(self, t => t.dtype())
    }

    pub fn device(&self) -> Device {
        crate::with_rank!(self, t => t.device())
    }

    /// `sum((self - other)^2)` as `[1]`.
    pub fn squared_distance(&self, other: &AnyTensor) -> Tensor<1> {
        match (self, other) {
            (AnyTensor::R1(a), AnyTensor::R1(b)) => a.clone().sub(b.clone()).square().sum(),
            (AnyTensor::R2(a), AnyTensor::R2(b)) => a.clone().sub(b.clone()).square().sum(),
            (AnyTensor::R3(a), AnyTensor::R3(b)) => a.clone().sub(b.clone()).square().sum(),
            (AnyTensor::R4(a), AnyTensor::R4(b)) => a.clone().sub(b.clone()).square().sum(),
            _ => panic!("a distance between tensors of different ranks"),
        }
    }
}

/// Writes `new` (same shape) into `t`'s own buffer: a slice assignment, which writes in place
/// when the buffer is uniquely owned (burn-0.22.md 4.5). A captured graph keeps reading and
/// writing the buffers it recorded, so its state is refreshed this way, never replaced.
pub fn write_into<const D: usize>(t: &mut Tensor<D>, new: Tensor<D>) {
    let ranges: [std::ops::Range<usize>; D] = std::array::from_fn(|i| 0..new.dims()[i]);
    t.inplace(|t| t.slice_assign(ranges, new));
}

/// `t = f(t)`. With `stable` the result is copied into `t`'s buffer ([`write_into`]); without,
/// `t` takes whichever buffer the op wrote, which the fusion backend picks (in place or not: on
/// the H200 a whole step captured this way recorded its updates into new buffers).
pub fn update_in_place<const D: usize>(t: &mut Tensor<D>, stable: bool, f: impl FnOnce(Tensor<D>) -> Tensor<D>) {
    if stable {
        let new = f(t.clone());
        write_into(t, new);
    } else {
        t.inplace(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dots of outputs in two dtypes add into one objective whose gradient reaches both.
    #[test]
    fn dots_of_mixed_dtypes_sum_in_f32() {
        let device = Device::flex();
        let wide = Tensor::<4>::ones([1, 2, 2, 2], &device).autodiff().require_grad();
        let narrow = Tensor::<4>::ones([1, 2, 2, 2], &device).cast(FloatDType::BF16).autodiff().require_grad();
        let upstream = |dtype| AnyTensor::R4(Tensor::<4>::full([1, 2, 2, 2], 0.5, &device).cast(dtype));
        let (a, b) = (AnyTensor::R4(wide.clone()).dot(&upstream(FloatDType::F32)), AnyTensor::R4(narrow.clone()).dot(&upstream(FloatDType::BF16)));
        assert_eq!((FloatDType::from(a.dtype()), FloatDType::from(b.dtype())), (FloatDType::F32, FloatDType::F32));
        let objective = a.add(b);
        assert_eq!(objective.clone().inner().into_data().try_to_vec::<f32>().unwrap(), vec![8.0]);
        let grads = objective.backward();
        for leaf in [wide, narrow] {
            let g = leaf.grad(&grads).expect("reaches the objective").cast(FloatDType::F32);
            assert_eq!(g.into_data().try_to_vec::<f32>().unwrap(), vec![0.5; 8]);
        }
    }
}
