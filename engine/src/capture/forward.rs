//! The eval forward (network + decode) as a burn graph, for `predict cuda_graph=...` and for
//! validation during a captured training run: the input lives in a stable buffer the graph
//! borrows (refreshed in place before each replay, burn-0.22.md 4.5), parameters are read where
//! they live (updated in place between replays), and the output is copied after each replay, as
//! LibreYOLO's `GraphRunner` clones its static outputs.

use std::cell::RefCell;
use std::rc::Rc;

use burn::tensor::{Device, FloatDType, Graph, Tensor};
use libreyolo_families::{Ctx, Network, ParamStore};

use super::{Attempt, CaptureError, GraphOps, ShapeKey, Verdict, refresh, stable_copy};

/// The forward to run or capture: images `(B, 3, H, W)` in [0, 1] to the head's eval output in
/// f32 (a detector's decoded predictions `(B, 4 + nc, A)`, a classifier's probabilities
/// `(B, nc, 1)`).
pub type ForwardFn<'a> = Rc<dyn Fn(Tensor<4>) -> Tensor<3> + 'a>;

type Closure<'a> = Box<dyn FnMut() -> Tensor<3> + 'a>;

/// A captured forward and its stable input buffer.
pub struct ForwardGraph<'a> {
    input: Rc<RefCell<Tensor<4>>>,
    graph: Graph<Tensor<3>, Closure<'a>>,
}

/// One forward on `input`.
pub struct Forward<'a> {
    pub f: ForwardFn<'a>,
    pub device: Device,
    pub input: Tensor<4>,
    /// The compute dtype, part of the graph's key.
    pub dtype: Option<FloatDType>,
}

/// The eval forward of `network` with `params`, computing in `compute`.
pub fn run(network: &Network, params: &ParamStore, compute: Option<FloatDType>, x: Tensor<4>) -> Tensor<3> {
    let cx = match compute {
        Some(d) => Ctx::eval_in(params, d),
        None => Ctx::eval(params),
    };
    decoded(network, &cx, x)
}

/// The eval forward with inference fusion (LibreYOLO's `fuse()`, [`Ctx::eval_fused`]): the
/// folded convolutions are made at the first call and reused, so `params` must not change
/// while the returned function is in use (predict; not validation during training).
pub fn fused_eval_forward<'a>(network: &'a Network, params: &'a ParamStore, compute: Option<FloatDType>) -> ForwardFn<'a> {
    let cx = Ctx::eval_fused(params, compute);
    Rc::new(move |x| decoded(network, &cx, x))
}

/// `network`'s forward in `cx` (which casts the images to its compute dtype), as its head's
/// eval output ([`Head::eval`](libreyolo_families::block::Head::eval)), in f32.
fn decoded(network: &Network, cx: &Ctx, x: Tensor<4>) -> Tensor<3> {
    let [_, _, h, w] = x.dims();
    network.head().eval(&network.forward(x, cx, false).main, [h, w]).cast(FloatDType::F32)
}

impl Forward<'_> {
    pub fn key(&self) -> ShapeKey {
        ShapeKey { dims: self.input.dims().to_vec(), dtype: format!("{:?}", self.dtype.unwrap_or(FloatDType::F32)), others: vec![] }
    }
}

impl<'a> GraphOps<ForwardGraph<'a>, Tensor<3>> for Forward<'a> {
    fn eager(&mut self) -> Tensor<3> {
        (self.f)(self.input.clone())
    }

    fn capture(&mut self, _: Attempt, _: &dyn Fn(Verdict) -> Verdict) -> Result<(ForwardGraph<'a>, Option<Tensor<3>>), CaptureError> {
        let input = stable_copy(&self.input);
        let (f, borrowed) = (self.f.clone(), input.clone());
        let closure: Closure<'a> = Box::new(move || f(borrowed.borrow().clone()));
        let graph = burn::tensor::capture(&self.device, closure);
        if !graph.is_hardware() && std::env::var_os(crate::capture::one_graph::SOFTWARE_ENV).is_none() {
            return Err(CaptureError::Failed(super::NO_HARDWARE_GRAPH.into()));
        }
        Ok((ForwardGraph { input, graph }, None))
    }

    fn replay(&mut self, g: &mut ForwardGraph<'a>) -> Result<Tensor<3>, String> {
        refresh(&g.input, &self.input, g.graph.is_hardware())?;
        // Safety: the closure's buffers (the stable input, the parameters) outlive the graph,
        // which its manager drops first; refresh, replay and the read of the output happen on
        // this thread, the capture stream.
        let out = unsafe { g.graph.replay() };
        Ok(out.clone().add_scalar(0.0))
    }
}
