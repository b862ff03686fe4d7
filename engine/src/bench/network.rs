//! Network forward (eval) and forward+backward (train) time at a given batch, size and dtype.

use burn::tensor::{Distribution, FloatDType, Tensor};
use libreyolo_families::{Ctx, Network, ParamStore};

use super::{Timer, Timing};

pub struct NetworkBench {
    pub batch: usize,
    pub height: usize,
    pub width: usize,
    pub dtype: FloatDType,
    /// Also time the training forward+backward.
    pub train: bool,
}

/// Times `network` as `cfg` says, on the timer's device.
pub fn run(cfg: &NetworkBench, network: &Network, params: &ParamStore, timer: &Timer) -> Vec<Timing> {
    let device = timer.device;
    let mut params = params.clone();
    params.to_device(device);
    params.cast(cfg.dtype);
    let images = Tensor::<4>::random([cfg.batch, 3, cfg.height, cfg.width], Distribution::Uniform(0.0, 1.0), device).cast(cfg.dtype);
    let tag = format!("b{} {}x{} {:?}", cfg.batch, cfg.height, cfg.width, cfg.dtype);
    let eval = Ctx::eval(&params);
    // Inference fusion (what predict runs): the folding happens in the first run.
    let fused = Ctx::eval_fused(&params, None);
    let forward = || {
        let plain = timer.time(&format!("forward (eval) {tag}"), || network.forward(images.clone(), &eval, false).main);
        let folded = timer.time(&format!("forward (eval, fused) {tag}"), || network.forward(images.clone(), &fused, false).main);
        [plain, folded]
    };
    if !cfg.train {
        return forward().to_vec();
    }
    // The training step first: its convolution forwards have the eval forward's shapes, so the
    // eval forward then finds them tuned, and a run cut short by a time limit has spent its
    // warm-up on the costlier direction (input and weight gradients).
    let train = timer.time(&format!("forward+backward (train) {tag}"), || {
        let cx = Ctx::train(&params);
        let maps = network.forward(images.clone(), &cx, false).main;
        // in f32: a head's maps may mix dtypes (RT-DETR's boxes stay f32 under bf16)
        let loss = maps.into_iter().map(|m| m.mean().cast(FloatDType::F32)).reduce(|a, b| a.add(b)).expect("three maps");
        let grads = loss.backward();
        cx.gradients(&grads)
    });
    let [plain, folded] = forward();
    vec![plain, folded, train]
}
