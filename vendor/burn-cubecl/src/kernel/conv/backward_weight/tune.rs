use burn_backend::cubecl::dtype_to_storage_type;
use burn_backend::ops::ConvOptions;
use burn_std::Shape;
use cubecl::{
    ir::ElemType,
    tune::{LocalTuner, anchor, local_tuner},
};
use cubek::convolution::AcceleratedTileKind;

use crate::{
    CubeAutotuneKey, CubeTuneId,
    kernel::conv::{
        selection::{self, Role, candidate},
        ConvAutotuneKey,
        backward_weight::{fallback::conv_weight_backward_fallback, implicit_gemm::*, split_k::wgrad_split_k},
        im2col::{wgrad_im2col, wgrad_im2col_1x1, wgrad_im2col_1x1_split},
    },
    tensor::CubeTensor,
};

/// Executes autotune on the weight gradients pass for convolution
pub fn wgrad_autotune<const N: usize>(
    input: CubeTensor,
    out_grad: CubeTensor,
    weight_shape: Shape,
    options: ConvOptions<N>,
) -> CubeTensor {
    let client = input.client.clone();

    static TUNER: LocalTuner<CubeAutotuneKey, CubeTuneId> = local_tuner!();

    let tune_id = CubeTuneId::new(&input.client, &input.device);
    let tunables = TUNER.init(&tune_id, || {
        selection::tunable_set(
            create_key::<N>,
            create_wgrad_input::<N>,
            // The contraction of a weight gradient (batch x height x width) dwarfs its output;
            // the implicit-GEMM kernels do not split it and ran 5-150 ms per early layer on the
            // H200 (1 s per YOLOv9-t step). The split im2col matmul does, but its batched matmul
            // was still 9x cuDNN (76 ms a YOLOv9-t step at b16); the split-K kernel gathers the
            // columns itself and gives every cube a slice of the contraction.
            &["wgrad_split_k", "wgrad_im2col_1x1_split", "wgrad_im2col"],
            vec![
            candidate(
                "wgrad_split_k",
                Role::Primary,
                |(input, grad, shape, options)| wgrad_split_k::<N>(input, grad, shape, options),
            ),
            candidate(
                "wgrad_fallback",
                Role::Fallback,
                |(input, grad, shape, options)| {
                    conv_weight_backward_fallback::<N>(input, grad, shape, options)
                },
            ),
            // The dense case, which the two pointwise candidates decline and
            // the fallback computes as a convolution by the gradient.
            candidate(
                "wgrad_im2col",
                Role::Primary,
                |(input, grad, shape, options)| wgrad_im2col::<N>(input, grad, shape, options),
            ),
            // The same matmul with its contraction cut into pieces, which is
            // what a weight gradient's shape asks for — see `split_count`.
            candidate(
                "wgrad_im2col_1x1_split",
                Role::Primary,
                |(input, grad, shape, options)| {
                    wgrad_im2col_1x1_split::<N>(input, grad, shape, options)
                },
            ),
            // Declines every shape but the pointwise one. It earns its place
            // because a device with no accelerated matmul for the dtype
            // declines every candidate below, leaving the fallback unopposed.
            candidate(
                "wgrad_im2col_1x1",
                Role::Fallback,
                |(input, grad, shape, options)| wgrad_im2col_1x1::<N>(input, grad, shape, options),
            ),
            candidate(
                "simple_sync_cmma",
                Role::Primary,
                |(input, grad, shape, options)| {
                    wgrad_gemm_simple_sync(input, grad, shape, options, AcceleratedTileKind::Cmma)
                },
            ),
            candidate(
                "simple_sync_mma",
                Role::Primary,
                |(input, grad, shape, options)| {
                    wgrad_gemm_simple_sync(input, grad, shape, options, AcceleratedTileKind::Mma)
                },
            ),
            candidate(
                "simple_async_cmma",
                Role::Primary,
                |(input, grad, shape, options)| {
                    wgrad_gemm_simple_async(input, grad, shape, options, AcceleratedTileKind::Cmma)
                },
            ),
            candidate(
                "simple_async_mma",
                Role::Primary,
                |(input, grad, shape, options)| {
                    wgrad_gemm_simple_async(input, grad, shape, options, AcceleratedTileKind::Mma)
                },
            ),
            candidate(
                "simple_tma_cmma",
                Role::Primary,
                |(input, grad, shape, options)| {
                    wgrad_gemm_simple_tma(input, grad, shape, options, AcceleratedTileKind::Cmma)
                },
            ),
            candidate(
                "simple_tma_mma",
                Role::Primary,
                |(input, grad, shape, options)| {
                    wgrad_gemm_simple_tma(input, grad, shape, options, AcceleratedTileKind::Mma)
                },
            ),
            ],
        )
    });

    TUNER.execute(
        &tune_id,
        &client,
        tunables,
        (input, out_grad, weight_shape, options),
    )
}

pub fn create_wgrad_input<const N: usize>(
    _key: &CubeAutotuneKey,
    (input, out_grad, weight_shape, options): &(CubeTensor, CubeTensor, Shape, ConvOptions<N>),
) -> (CubeTensor, CubeTensor, Shape, ConvOptions<N>) {
    (
        input.clone(),
        out_grad.clone(),
        weight_shape.clone(),
        options.clone(),
    )
}

fn create_key<const N: usize>(
    (input, out_grad, weight_shape, options): &(CubeTensor, CubeTensor, Shape, ConvOptions<N>),
) -> CubeAutotuneKey {
    let dtype = input.dtype;
    let rank = input.meta.num_dims();
    let dim_c = rank - 1;

    let batch_size = input.meta.shape()[0];
    let in_channels = input.meta.shape()[dim_c];
    let out_channels = weight_shape[0];

    let kernel_size = weight_shape[1..dim_c].to_vec();
    let in_shape = input.meta.shape()[1..dim_c]
        .iter()
        .map(|shape| anchor(*shape, None, None, None))
        .collect();

    let ConvOptions {
        stride,
        padding,
        dilation,
        groups,
    } = options.clone();

    let lhs_stride_align = if out_grad.meta.strides()[dim_c] == 1 {
        stride_align(
            out_grad.meta.strides(),
            dtype_to_storage_type(out_grad.dtype),
        )
    } else {
        0
    };
    let lhs_shape_align = pow2_factor(out_channels).min(lhs_stride_align);
    let rhs_stride_align = if input.meta.strides()[dim_c] == 1 {
        stride_align(input.meta.strides(), dtype_to_storage_type(input.dtype))
    } else {
        0
    };
    let rhs_shape_align = pow2_factor(in_channels).min(rhs_stride_align);

    CubeAutotuneKey::Conv(ConvAutotuneKey::new(
        kernel_size,
        stride.to_vec(),
        padding.to_vec(),
        dilation.to_vec(),
        groups,
        in_channels,
        out_channels,
        in_shape,
        batch_size,
        false,
        dtype,
        lhs_shape_align,
        lhs_stride_align,
        rhs_shape_align,
        rhs_stride_align,
    ))
}

/// Maximum factor relevant for strides. Currently set to 2^10 because that's 128-byte swizzle's
/// repeat number, so it's the largest align that can have performance impacts.
const MAX_STRIDE_FACTOR: u32 = 10;

/// Defines the non-contiguous stride alignment in terms of powers of two
fn stride_align(strides: &[usize], elem: ElemType) -> u8 {
    let max = MAX_STRIDE_FACTOR;
    let dim_c = strides.len() - 1;
    let factor = strides[..dim_c]
        .iter()
        .map(|it| (*it * elem.size_bits()) / 8)
        .map(|it| it.trailing_zeros())
        .min()
        .unwrap_or(max);
    factor.min(max) as u8
}

/// Defines the potential vectorization.
fn pow2_factor(axis: usize) -> u8 {
    axis.trailing_zeros().min(4) as u8
}
