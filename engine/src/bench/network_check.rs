//! `bench network --check`: the whole network's training forward and backward on the bench's
//! device against the CPU in f32, the same weights and images on both: every output map, and
//! every parameter's gradient of a fixed random linear function of the outputs. `bench ops
//! --check` checks the custom kernels at their shapes one by one; this checks every kernel the
//! network runs (burn's and fusion's too) at the network's own shapes, together — what tells a
//! wrong device kernel when a family trains worse on the GPU than its CPU step's parity with
//! LibreYOLO says it should (RT-DETR's box losses in f32, docs/benchmarks.md).

use burn::tensor::{Device, Distribution, FloatDType, Tensor};
use libreyolo_families::{Ctx, Network, ParamStore};
use serde::Serialize;

use crate::parity::fixture::max_abs_diff;

/// One output's or one parameter's error on the device against the CPU.
#[derive(Debug, Clone, Serialize)]
pub struct NetworkCheck {
    /// `map N` (the N-th training output) or the parameter's name.
    pub name: String,
    /// Largest absolute difference from the CPU's value.
    pub max_abs_err: f32,
    /// Largest magnitude of the CPU's value.
    pub max_ref: f32,
    /// `max_abs_err` over the larger of `max_ref` and a thousandth of the largest such
    /// magnitude of its kind (maps, gradients): a near-zero gradient is not judged on its own
    /// scale.
    pub rel: f64,
}

/// The errors of every training output, then of every parameter's gradient, on `device`
/// against the CPU, for a batch of `batch` random images of `height` x `width`.
pub fn run(network: &Network, params: &ParamStore, batch: usize, height: usize, width: usize, device: &Device) -> Vec<NetworkCheck> {
    let cpu = Device::flex();
    let images = Tensor::<4>::random([batch, 3, height, width], Distribution::Uniform(0.0, 1.0), &cpu);
    let mut weights = vec![];
    let (want_maps, want_grads) = forward_backward(network, params, &images, &mut weights, &cpu);
    let (got_maps, got_grads) = forward_backward(network, params, &images, &mut weights, device);
    let maps = want_maps.iter().zip(&got_maps).enumerate().map(|(i, (w, g))| (format!("map {i}"), w, g));
    let mut rows = compared(maps.collect());
    let grads = want_grads.iter().filter_map(|(name, w)| Some((name.clone(), w, &got_grads.iter().find(|(n, _)| n == name)?.1)));
    rows.extend(compared(grads.collect()));
    rows
}

/// The training outputs and every parameter's gradient (by name), read back to the host, of
/// `sum_i <map_i, weights_i>` on `device`; `weights` are drawn on the CPU on the first call and
/// reused after it.
#[allow(clippy::type_complexity)]
fn forward_backward(
    network: &Network,
    params: &ParamStore,
    images: &Tensor<4>,
    weights: &mut Vec<Tensor<4>>,
    device: &Device,
) -> (Vec<Vec<f32>>, Vec<(String, Vec<f32>)>) {
    let mut params = params.clone();
    params.to_device(device);
    let cx = Ctx::train(&params);
    let maps = network.forward(images.clone().to_device(device), &cx, false).main;
    if weights.is_empty() {
        *weights = maps.iter().map(|m| Tensor::<4>::random(m.dims(), Distribution::Normal(0.0, 1.0), &Device::flex())).collect();
    }
    let objective = maps
        .iter()
        .zip(weights.iter())
        .map(|(m, w)| m.clone().cast(FloatDType::F32).mul(w.clone().to_device(device)).sum())
        .reduce(|a, b| a.add(b))
        .expect("a network has outputs");
    let grads = cx.gradients(&objective.backward());
    let host = |t: Tensor<1>| t.cast(FloatDType::F32).into_data().convert::<f32>().try_to_vec::<f32>().expect("f32 values");
    let maps = maps.into_iter().map(|m| host(m.reshape([-1]))).collect();
    let grads = grads.into_iter().map(|(id, g)| (params.entry(id).name.clone(), host(g))).collect();
    (maps, grads)
}

/// `(name, CPU values, device values)` as rows, each error relative to the larger of its own
/// magnitude and a thousandth of the largest.
fn compared(pairs: Vec<(String, &Vec<f32>, &Vec<f32>)>) -> Vec<NetworkCheck> {
    let magnitude = |v: &[f32]| v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let largest = pairs.iter().map(|(_, w, _)| magnitude(w)).fold(0f32, f32::max);
    pairs
        .into_iter()
        .map(|(name, want, got)| {
            let max_ref = magnitude(want);
            if want.len() != got.len() {
                return NetworkCheck { name, max_abs_err: f32::INFINITY, max_ref, rel: f64::INFINITY };
            }
            let max_abs_err = max_abs_diff(want, got);
            let rel = max_abs_err / max_ref.max(largest * 1e-3).max(f32::MIN_POSITIVE) as f64;
            NetworkCheck { name, max_abs_err: max_abs_err as f32, max_ref, rel }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the CPU the device and the reference are the same backend: every output and every
    /// gradient of a narrow RT-DETR (tests/fixtures) is compared, non-trivially, and agrees.
    #[test]
    fn the_cpu_agrees_with_itself_on_every_output_and_gradient() {
        let (network, params) = crate::parity::fixture::fixture_network("rtdetr_narrow", 5);
        let rows = run(&network, &params, 1, 64, 64, &Device::flex());
        let maps = rows.iter().filter(|r| r.name.starts_with("map ")).count();
        assert_eq!(maps, 4, "the training outputs: last layer's boxes and logits, the encoder's");
        assert!(rows.len() > 300, "every trained parameter's gradient: {} rows", rows.len());
        assert!(rows.iter().any(|r| r.max_ref > 0.0));
        for r in &rows {
            assert!(r.rel <= 1e-6, "{r:?}");
        }
    }
}
