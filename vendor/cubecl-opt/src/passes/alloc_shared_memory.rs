use ::pliron::context::Context;
use cubecl_ir::{
    AddressSpace, Pure,
    attributes::IndexAttr,
    prelude::*,
    types::{BytesType, PointerType},
};
use pliron::{
    builtin::{attributes::TypeAttr, ops::FuncOp},
    irbuild::listener::DummyListener,
};

use crate::SharedLiveness;

#[cube_op(
    name = "cube.alloc_shared",
    format = "`size = ` attr($size, $IndexAttr) `, align = ` attr($alignment, $IndexAttr)"
)]
#[result_ty(fixed = PointerType::get(ctx, BytesType::get(ctx).into(), AddressSpace::Shared).to_handle())]
#[op_traits(Pure)]
pub struct AllocSharedOp {
    pub size: IndexAttr,
    pub alignment: IndexAttr,
}

#[cube_op(
    name = "cube.slice_shared",
    format = "$0 `[` attr($offset, $IndexAttr) `] : ` type($0)"
)]
#[result_ty(argument)]
#[op_traits(Pure)]
pub struct SliceSharedOp {
    pub block: Value,
    pub offset: IndexAttr,
    pub value_ty: TypeAttr,
}

/// Allocates shared memory as a single block and attaches offsets to shared memory declarations.
pub struct AllocateSharedMemoryBlockPass;

#[pass_name]
impl Pass for AllocateSharedMemoryBlockPass {
    fn run(
        &mut self,
        op: Ptr<Operation>,
        ctx: &mut Context,
        analyses: &mut AnalysisManager,
    ) -> Result<PassResult> {
        let mut res = PassResult::default();
        let analysis = analyses.get_analysis::<SharedLiveness>(op, ctx)?;
        let mut rewriter = IRRewriter::<DummyListener>::default();
        let op = op.dyn_op(ctx).downcast::<FuncOp>().unwrap();

        // In the order the analysis allocated them (their offsets grow with it), not the hash
        // map's, which differs from process to process: the slices' declarations, and so the
        // generated source, must be the same in every process for the source-keyed kernel cache
        // (libreyolo-run: vendor/README.md).
        let mut allocs = analysis.allocations.values().copied().collect::<Vec<_>>();
        allocs.sort_by_key(|it| it.offset);

        if !analysis.allocations.is_empty() {
            let size = allocs.iter().map(|it| it.end(ctx)).max().unwrap();
            let alignment = allocs.iter().map(|it| it.smem.alignment).max().unwrap();

            let entry = op.get_entry_block(ctx);
            let alloc = AllocSharedOp::new(ctx, size, alignment);
            alloc.get_operation().insert_at_front(entry, ctx);
            res.ir_changed |= IRStatus::Changed;
            let block = alloc.get_result(ctx);

            for alloc in allocs {
                let declaration = alloc.value.defining_op().expect("Should be op");
                let ptr_ty = declaration.result(ctx).get_type(ctx);
                let slice = SliceSharedOp::new(ctx, ptr_ty, block, alloc.offset, alloc.value_ty);
                slice.get_operation().insert_before(ctx, declaration);
                rewriter.replace_operation(ctx, declaration, slice.get_operation());
            }
        }

        Ok(res)
    }
}
