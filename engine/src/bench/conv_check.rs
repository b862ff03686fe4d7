//! `bench ops --check`: every convolution weight gradient of the network's training step, on the
//! bench's device, against the CPU backend in f32 on the same (dtype-rounded) random inputs. The
//! device runs whatever kernel its selection picks (on CUDA the split-K kernel of
//! vendor/burn-cubecl), so a custom kernel is checked at every shape it will see.

use burn::tensor::module::conv2d_weight_backward;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, FloatDType, Tensor};
use serde::Serialize;

use super::ops::{OpCount, OpSpec, conv_output};

/// One shape's error.
#[derive(Debug, Clone, Serialize)]
pub struct ConvCheck {
    pub spec: OpSpec,
    pub dtype: String,
    /// Largest absolute difference from the reference.
    pub max_abs_err: f32,
    /// Largest magnitude of the reference.
    pub max_ref: f32,
    pub tolerance: f32,
    pub pass: bool,
}

/// Error allowed, relative to the reference's largest magnitude: f32 differs only by the order
/// of the additions (10^5-10^6 terms); bf16 and f16 also round the result to 8 or 11 bits.
pub fn tolerance(dtype: FloatDType) -> f32 {
    match dtype {
        FloatDType::F32 => 1e-4,
        FloatDType::F16 => 2e-3,
        _ => 1e-2,
    }
}

/// Checks every `ConvWeightGrad` of `ops` in `dtype` on `device`.
pub fn run(ops: &[OpCount], dtype: FloatDType, device: &Device) -> Vec<ConvCheck> {
    let cpu = Device::flex();
    let specs: Vec<&OpSpec> = ops.iter().map(|o| &o.spec).filter(|s| matches!(s, OpSpec::ConvWeightGrad { .. })).collect();
    let mut out = vec![];
    for (i, spec) in specs.iter().enumerate() {
        let OpSpec::ConvWeightGrad { input, c_out, k, stride, padding, groups } = **spec else { unreachable!("filtered above") };
        let rand = |dims: [usize; 4]| Tensor::<4>::random(dims, Distribution::Uniform(-1.0, 1.0), device).cast(dtype);
        let x = rand(input);
        let g = rand(conv_output(input, c_out, k, stride, padding));
        let w = Tensor::<4>::zeros([c_out, input[1] / groups, k, k], device).cast(dtype);
        let o = ConvOptions::new([stride; 2], [padding; 2], [1, 1], groups);
        let on_cpu = |t: &Tensor<4>| t.clone().cast(FloatDType::F32).to_device(&cpu);
        let got = on_cpu(&conv2d_weight_backward(x.clone(), w.clone(), g.clone(), o.clone()));
        let want = conv2d_weight_backward(on_cpu(&x), on_cpu(&w), on_cpu(&g), o);
        let max_abs_err: f32 = got.sub(want.clone()).abs().max().into_scalar();
        let max_ref: f32 = want.abs().max().into_scalar();
        let tolerance = tolerance(dtype);
        let pass = max_abs_err <= tolerance * max_ref;
        eprintln!(
            "  [{}/{}] {dtype:?} {spec:?}: max error {max_abs_err:.3e} of {max_ref:.3e} ({})",
            i + 1,
            specs.len(),
            if pass { "ok" } else { "FAIL" }
        );
        out.push(ConvCheck { spec: (*spec).clone(), dtype: format!("{dtype:?}"), max_abs_err, max_ref, tolerance, pass });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the CPU the device and the reference are the same backend: the check runs end to end
    /// and finds a non-trivial gradient within f32's tolerance.
    #[test]
    fn the_cpu_passes_its_own_check() {
        let spec = OpSpec::ConvWeightGrad { input: [2, 3, 8, 8], c_out: 4, k: 3, stride: 1, padding: 1, groups: 1 };
        let rows = run(&[OpCount { spec, count: 1 }], FloatDType::F32, &Device::flex());
        assert_eq!(rows.len(), 1);
        assert!(rows[0].pass && rows[0].max_ref > 0.0, "{rows:?}");
        assert!(rows[0].max_abs_err <= 1e-4 * rows[0].max_ref);
    }
}
