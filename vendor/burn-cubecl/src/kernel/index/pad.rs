//! Padding as one kernel (libreyolo-run patch). Upstream's `float_pad` is the backend-generic
//! composition: a fill of the whole output, then a slice-assign of the input into it (and, for
//! reflect and edge padding, a slice, a flip or repeat and one more slice-assign per padded side
//! and axis). Here each output element is computed once, from its source coordinate, and the
//! output is laid out in the input's memory order: a channels-last gradient padded back to its
//! parent's shape (the backward of a slice, as `chunk` takes) stays channels-last, so it adds to
//! its sibling gradients vectorised, where the fill and the assign made it NCHW.

use crate::{
    kernel::memory_order::in_own_memory_order,
    kernel::utils::{address_type, shape_divmod},
    ops::numeric::empty_device_dtype,
    tensor::CubeTensor,
};
use burn_backend::cubecl::dtype_to_storage_type;
use burn_backend::ops::validate_padding;
use burn_backend::{Shape, TensorMetadata};
use burn_std::PadMode;
use cubecl::{
    calculate_cube_count_elemwise,
    prelude::*,
    std::{FastDivmod, tensor::layout::linear::LinearViewMut},
};

/// How a coordinate outside the input finds its value (`PadMode`, as a compile-time constant).
const CONSTANT: u32 = 0;
const REFLECT: u32 = 1;
const EDGE: u32 = 2;

#[cube(launch_unchecked, address_type = "dynamic")]
fn pad_kernel<E: Numeric>(
    input: &Tensor<E>,
    mut output: LinearViewMut<'_, E>,
    out_shape: Sequence<FastDivmod<usize>>,
    before: Sequence<usize>,
    value: InputScalar,
    #[comptime] mode: u32,
    #[define(E)] _dtype: ElemType,
) {
    if !output.is_in_bounds(ABSOLUTE_POS) {
        terminate!();
    }

    let rank = comptime![out_shape.len()];
    let mut remaining = ABSOLUTE_POS;
    let mut offset_input = 0;
    let mut inside = true;

    #[unroll]
    for i in 0..rank {
        let dim = rank - i - 1;
        let (rem, coordinate) = out_shape[dim].div_mod(remaining);
        remaining = rem;

        let start = before[dim];
        let size = input.shape(dim);
        let low = coordinate < start;
        let high = coordinate >= start + size;
        // Every subtraction below is taken only on its own side of the input, so none wraps.
        let mut source = coordinate - select(low, coordinate, start);
        if comptime!(mode == REFLECT) {
            if low {
                source = start - coordinate;
            } else if high {
                source = size * 2 + start - 2 - coordinate;
            }
        } else if comptime!(mode == EDGE) {
            if low {
                source = 0;
            } else if high {
                source = size - 1;
            }
        } else {
            inside = inside && !low && !high;
        }
        offset_input += source * input.stride(dim);
    }

    let mut result = value.get::<E>();
    if inside {
        result = input[offset_input];
    }
    output.write(ABSOLUTE_POS, result);
}

/// `tensor` padded on each axis by its `(before, after)` pair, as `mode` says (the same checks
/// and results as upstream's composition), the output laid out in the input's memory order.
pub fn pad(tensor: CubeTensor, padding: &[(usize, usize)], mode: PadMode) -> CubeTensor {
    let tensor = crate::kernel::untile(tensor);
    validate_padding(&tensor.shape(), padding, mode);
    let (mode, value) = match mode {
        PadMode::Constant(value) => (CONSTANT, value),
        PadMode::Reflect => (REFLECT, 0.0),
        PadMode::Edge => (EDGE, 0.0),
    };
    in_own_memory_order(tensor, |tensor, axes| {
        let padding: Vec<(usize, usize)> = match axes {
            Some(axes) => axes.iter().map(|&axis| padding[axis]).collect(),
            None => padding.to_vec(),
        };
        let shape = tensor.shape();
        let dims = Shape::from(
            (0..shape.num_dims())
                .map(|axis| padding[axis].0 + shape[axis] + padding[axis].1)
                .collect::<Vec<_>>(),
        );
        let output = empty_device_dtype(
            tensor.client.clone(),
            tensor.device.clone(),
            dims,
            tensor.dtype,
        );
        let mut before = SequenceArg::<usize>::new();
        for (start, _) in &padding {
            before.push(*start);
        }
        let elements = output.meta.num_elements();
        if elements == 0 {
            return output;
        }
        let client = tensor.client.clone();
        let cube_dim = CubeDim::new(&client, elements);
        let cube_count = calculate_cube_count_elemwise(&client, elements, cube_dim);
        let dtype = dtype_to_storage_type(tensor.dtype);
        unsafe {
            pad_kernel::launch_unchecked(
                &client,
                cube_count,
                cube_dim,
                address_type!(tensor, output),
                tensor.into_tensor_arg(),
                output.clone().into_linear_view(),
                shape_divmod(&output),
                before,
                InputScalar::new(value, dtype),
                mode,
                dtype,
            )
        };
        output
    })
}
