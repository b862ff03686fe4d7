//! The eval forward (network + decode) as a burn graph, for `predict cuda_graph=...`: the
//! input lives in a stable buffer the graph borrows (refreshed in place before each replay,
//! burn-0.22.md 4.5), parameters are the store's own buffers, and the output is cloned after
//! each replay, as LibreYOLO's `GraphRunner` does.

use std::cell::RefCell;
use std::rc::Rc;

use burn::tensor::{Device, FloatDType, Graph, Tensor, s};
use libreyolo_families::{Ctx, Network, ParamStore};

use super::{GraphOps, ShapeKey};

type Closure<'a> = Box<dyn FnMut() -> Tensor<3> + 'a>;

/// A captured forward and its stable input buffer.
pub struct ForwardGraph<'a> {
    input: Rc<RefCell<Tensor<4>>>,
    graph: Graph<Tensor<3>, Closure<'a>>,
}

/// One forward of `network` on `input` (decoded predictions, f32).
pub struct Forward<'a> {
    pub network: &'a Network,
    pub params: &'a ParamStore,
    pub compute: Option<FloatDType>,
    pub device: &'a Device,
    pub input: Tensor<4>,
}

fn run(network: &Network, params: &ParamStore, compute: Option<FloatDType>, x: Tensor<4>) -> Tensor<3> {
    let (cx, x) = match compute {
        Some(d) => (Ctx::eval_in(params, d), x.cast(d)),
        None => (Ctx::eval(params), x),
    };
    network.head().decode(&network.forward(x, &cx, false).main).cast(FloatDType::F32)
}

impl Forward<'_> {
    pub fn key(&self) -> ShapeKey {
        ShapeKey { dims: self.input.dims().to_vec(), dtype: format!("{:?}", self.compute.unwrap_or(FloatDType::F32)) }
    }
}

impl<'a> GraphOps<ForwardGraph<'a>, Tensor<3>> for Forward<'a> {
    fn eager(&mut self) -> Tensor<3> {
        run(self.network, self.params, self.compute, self.input.clone())
    }

    fn capture(&mut self) -> Result<ForwardGraph<'a>, String> {
        // A buffer of our own (a fresh allocation, uniquely owned), which the closure borrows.
        let stable = Tensor::<4>::zeros(self.input.dims(), self.device);
        let input = Rc::new(RefCell::new(stable));
        input.borrow_mut().inplace(|t| t.slice_assign(s![.., .., .., ..], self.input.clone()));
        let (network, params, compute, borrowed) = (self.network, self.params, self.compute, input.clone());
        let closure: Closure<'a> = Box::new(move || run(network, params, compute, borrowed.borrow().clone()));
        let graph = burn::tensor::capture(self.device, closure);
        if !graph.is_hardware() {
            return Err("the backend recorded no hardware graph (not a CUDA device, or the capture window was refused)".into());
        }
        Ok(ForwardGraph { input, graph })
    }

    fn replay(&mut self, g: &mut ForwardGraph<'a>) -> Result<Tensor<3>, String> {
        {
            let mut x = g.input.borrow_mut();
            if !x.can_mut() {
                return Err("the graph's input buffer is shared, so an in-place refresh would not reach the graph".into());
            }
            x.inplace(|t| t.slice_assign(s![.., .., .., ..], self.input.clone()));
        }
        // Safety: the closure's buffers (the stable input, the store's parameters) outlive the
        // graph, which the manager drops before them; refresh, replay and the read of the
        // output happen on this thread, the capture stream.
        let out = unsafe { g.graph.replay() };
        Ok(out.clone().add_scalar(0.0))
    }
}
