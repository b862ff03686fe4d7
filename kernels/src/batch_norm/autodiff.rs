//! The fused BatchNorm (+ SiLU) as one autodiff node: its backward is the fused backward
//! primitive, fed with the checkpointed input and the forward's statistics (no saved output).

use burn::backend::Autodiff;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::FloatTensor;
use burn::backend::{AutodiffBackend, Backend};

use super::BatchNormActBackend;

#[derive(Debug)]
struct BatchNormActNode;

impl<B: Backend + BatchNormActBackend> Backward<B, 3> for BatchNormActNode {
    /// The input's checkpoint, the statistics and whether SiLU follows.
    type State = (NodeId, FloatTensor<B>, bool);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [node_x, node_weight, node_bias] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (x_state, stats, act) = ops.state;
        let x = checkpointer.retrieve_node_output::<FloatTensor<B>>(x_state);
        let (dx, dweight, dbias) = B::batch_norm_act_backward(x, grad, stats, act);
        for (node, grad) in [(node_x, dx), (node_weight, dweight), (node_bias, dbias)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: Backend + BatchNormActBackend, C: CheckpointStrategy> BatchNormActBackend for Autodiff<B, C> {
    fn batch_norm_act_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        epsilon: f64,
        act: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let prepared = BatchNormActNode.prepare::<C>([x.node(), weight.node(), bias.node()]).compute_bound().stateful();
        match prepared {
            OpsKind::Tracked(mut prep) => {
                let x_state = prep.checkpoint(&x);
                let (y, stats) = B::batch_norm_act_forward(x.into_primitive(), weight.into_primitive(), bias.into_primitive(), epsilon, act);
                let y = prep.finish((x_state, stats.clone(), act), y);
                (y, Self::from_inner(stats))
            }
            OpsKind::UnTracked(prep) => {
                let (y, stats) = B::batch_norm_act_forward(x.into_primitive(), weight.into_primitive(), bias.into_primitive(), epsilon, act);
                (prep.finish(y), Self::from_inner(stats))
            }
        }
    }

    /// Not differentiable itself (no double backward): runs on the inner backend.
    fn batch_norm_act_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        stats: FloatTensor<Self>,
        act: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let (dx, dweight, dbias) = B::batch_norm_act_backward(Self::inner(x), Self::inner(grad), Self::inner(stats), act);
        (Self::from_inner(dx), Self::from_inner(dweight), Self::from_inner(dbias))
    }
}
