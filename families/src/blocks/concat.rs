//! Concat: its inputs concatenated along channels (maps of one stride).

use std::rc::Rc;

use burn::tensor::Tensor;

use crate::block::{BlockKind, Layer, Out, Shape};
use crate::ctx::Ctx;
use crate::topology::TopologyError;

pub static BLOCK: BlockKind = BlockKind {
    name: "Concat",
    args: &[],
    head: false,
    build: |b| {
        let strides: Vec<usize> = b.inputs.iter().map(|s| s.stride).collect();
        if strides.windows(2).any(|w| w[0] != w[1]) {
            return Err(TopologyError::new(
                b.args.layer,
                Some("from"),
                format!("`{}` concatenates maps of different strides {strides:?}; their sizes would not match", b.name),
            ));
        }
        Ok((Rc::new(Concat), Some(Shape { channels: b.inputs.iter().map(|s| s.channels).sum(), stride: strides[0] })))
    },
};

#[derive(Debug, Clone, Copy)]
pub struct Concat;

impl Layer for Concat {
    fn forward(&self, inputs: Vec<Tensor<4>>, cx: &Ctx) -> Out {
        Out::Map(cx.cat(inputs))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
