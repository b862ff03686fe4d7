//! Upsample: nearest-neighbour upsampling by an integer factor (`args = { scale = 2 }`).

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::module::interpolate;
use burn::tensor::ops::{InterpolateMode, InterpolateOptions};

use crate::block::{BlockKind, Layer, Out, Shape};
use crate::ctx::{Ctx, TracedOp};
use crate::topology::TopologyError;

pub static BLOCK: BlockKind = BlockKind {
    name: "Upsample",
    args: &["scale"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let scale = b.args.usize_or("scale", 2)?;
        if input.stride % scale != 0 {
            return Err(TopologyError::new(
                b.args.layer,
                Some("args.scale"),
                format!("upsampling a stride-{} map by {scale} does not give a whole stride", input.stride),
            ));
        }
        Ok((Rc::new(Upsample(scale)), Some(Shape { channels: input.channels, stride: input.stride / scale })))
    },
};

#[derive(Debug, Clone, Copy)]
pub struct Upsample(pub usize);

impl Layer for Upsample {
    fn forward(&self, mut inputs: Vec<Tensor<4>>, cx: &Ctx) -> Out {
        let x = inputs.remove(0);
        cx.trace(|| TracedOp::Upsample { input: x.dims(), scale: self.0 });
        let s = self.0 as f32;
        Out::Map(interpolate(x, InterpolateOptions::new(InterpolateMode::Nearest).with_scale_factor([s, s])))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
