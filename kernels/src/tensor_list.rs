//! A list of float tensors as one operand of a backend extension, so that one operation (and on
//! the GPU one kernel) can update many tensors at once: the EMA's blend over every tensor of the
//! model in a few launches instead of one a tensor.
//!
//! burn's `#[derive(ExtensionType)]` maps structs of named tensors; a list of run-time length
//! needs the two mappings written out: across the `Dispatch` boundary ([`ExtensionType`]) and
//! into burn-fusion's lazy stream ([`FusionValueAdapter`]), each tensor handled exactly as burn's
//! own float adapter handles a single one.

use burn::backend::fusion::custom::{self as fusion, FusionValueAdapter, HandleContainer, TensorId, TensorIr, TensorSpec};
use burn::backend::fusion::{FusionBackend, FusionRuntime, FusionTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, BackendTensor, Dispatch, DispatchAutodiffContext, DispatchTensor, DispatchTensorKind, ExtensionType};

/// Float tensors of one backend, in order.
pub struct TensorList<B: Backend> {
    pub tensors: Vec<FloatTensor<B>>,
}

impl<B: Backend> TensorList<B> {
    pub fn new(tensors: Vec<FloatTensor<B>>) -> Self {
        Self { tensors }
    }
}

impl<B: Backend> ExtensionType<B> for TensorList<B> {
    type Target = TensorList<Dispatch>;

    fn map_to_dispatch<F>(self, map_kind: F, autodiff: DispatchAutodiffContext) -> Self::Target
    where
        F: Fn(BackendTensor<B>) -> DispatchTensorKind,
    {
        TensorList::new(self.tensors.into_iter().map(|t| DispatchTensor { kind: map_kind(BackendTensor::Float(t)), autodiff }).collect())
    }

    fn map_from_dispatch<F>(target: Self::Target, unwrap_kind: F) -> Self
    where
        F: Fn(DispatchTensor) -> BackendTensor<B>,
    {
        TensorList::new(target.tensors.into_iter().map(|t| unwrap_kind(t).float()).collect())
    }

    fn routing_tensor(target: &Self::Target) -> Option<&DispatchTensor> {
        target.tensors.first()
    }

    fn routing_float_tensor(target: &Self::Target) -> Option<&DispatchTensor> {
        target.tensors.first()
    }

    fn autodiff_context(target: &Self::Target) -> DispatchAutodiffContext {
        target.tensors.iter().fold(DispatchAutodiffContext::Disabled, |context, t| context.merge(t.autodiff))
    }
}

/// burn's adapter for one float tensor, applied to each in turn.
type One<B> = <fusion::Float as FusionValueAdapter<B>>::Output;

impl<B: FusionBackend> FusionValueAdapter<B> for TensorList<B> {
    type Metadata = Vec<TensorSpec>;
    type Input = Vec<TensorIr>;
    type Output = Vec<One<B>>;
    type Inner = TensorList<B>;
    type Fused = TensorList<burn::backend::fusion::Fusion<B>>;

    fn to_metadata(value: &Self::Fused) -> Self::Metadata {
        value.tensors.iter().map(<fusion::Float as FusionValueAdapter<B>>::to_metadata).collect()
    }

    fn visit_fused_tensors(value: &Self::Fused, visit: &mut impl FnMut(&FusionTensor<B::FusionRuntime>)) {
        value.tensors.iter().for_each(visit);
    }

    fn tensor_count(meta: &Self::Metadata) -> usize {
        meta.len()
    }

    fn append_input_ir(value: Self::Fused, inputs: &mut Vec<TensorIr>) -> Self::Input {
        value.tensors.into_iter().map(|t| <fusion::Float as FusionValueAdapter<B>>::append_input_ir(t, inputs)).collect()
    }

    fn resolve_inputs(input: &Self::Input, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) -> Self::Inner {
        TensorList::new(input.iter().map(|ir| <fusion::Float as FusionValueAdapter<B>>::resolve_inputs(ir, handles)).collect())
    }

    fn append_output_ir(meta: &Self::Metadata, out: &mut Vec<TensorIr>, create: &mut impl FnMut() -> TensorId) -> Self::Output {
        meta.iter().map(|spec| <fusion::Float as FusionValueAdapter<B>>::append_output_ir(spec, out, create)).collect()
    }

    fn validate_outputs(value: &Self::Inner, output: &Self::Output, device: Option<&B::Device>) -> Result<(), burn::backend::ExecutionError> {
        if value.tensors.len() != output.len() {
            return Err(burn::backend::ExecutionError::generic(format!(
                "a tensor list operation returned {} tensors where its metadata said {}",
                value.tensors.len(),
                output.len()
            )));
        }
        for (t, o) in value.tensors.iter().zip(output) {
            <fusion::Float as FusionValueAdapter<B>>::validate_outputs(t, o, device)?;
        }
        Ok(())
    }

    fn register_output_handles(value: Self::Inner, output: &Self::Output, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        for (t, o) in value.tensors.into_iter().zip(output) {
            <fusion::Float as FusionValueAdapter<B>>::register_output_handles(t, o, handles);
        }
    }

    fn build_fused_output(meta: &Self::Metadata, tensors: &mut std::vec::IntoIter<FusionTensor<B::FusionRuntime>>) -> Self::Fused {
        TensorList::new(meta.iter().map(|spec| <fusion::Float as FusionValueAdapter<B>>::build_fused_output(spec, tensors)).collect())
    }
}
