//! A recorded burn graph ([`super::graph`]) written as an ONNX model: one ONNX node (or a few)
//! per burn operation, the recorded constants (the folded weights, the decode's grid) as
//! initializers.
//!
//! A batch-dynamic model (`dynamic=true`, LibreYOLO's default) is recorded at a batch size no
//! other axis of the network has ([`DYNAMIC_BATCH`]) and written with that size as the symbolic
//! `batch`: a reshape infers its first axis (`-1` in ONNX's Reshape), a slice leaves it whole.

mod nms;

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::bail;
use burn::backend::capture::{CapturedGraph, TensorId};
use burn::backend::ir::{
    ActivationOperationIr, BaseOperationIr, BinaryOpIr, BoolOperationIr, FloatOperationIr, IntOperationIr, ModuleOperationIr, NumericOperationIr, OperationIr,
    ScalarIr, ScalarOpIr, TensorIr, UnaryOpIr,
};
use burn::tensor::{DType, TensorData};
use onnx_protobuf::attribute_proto::AttributeType;
use onnx_protobuf::tensor_proto::DataType;
use onnx_protobuf::tensor_shape_proto::{Dimension, dimension};
use onnx_protobuf::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    type_proto,
};

/// The batch size a batch-dynamic model is recorded at: no channel count, kernel or map size
/// of the families is 7, so an axis of 7 on a tensor's first dimension is the batch.
pub const DYNAMIC_BATCH: usize = 7;

pub use nms::Nms;

/// The ONNX IR version written (ONNX 1.13+, read by onnxruntime >= 1.14 and tract).
const IR_VERSION: i64 = 8;

/// What the written model is called and carries, besides its graph.
#[derive(Debug, Clone)]
pub struct OnnxOptions {
    pub opset: i64,
    /// The graph was recorded at [`DYNAMIC_BATCH`] and its batch axis is written symbolic.
    pub dynamic_batch: bool,
    pub input_name: String,
    pub output_name: String,
    /// `metadata_props`, as LibreYOLO writes them.
    pub metadata: Vec<(String, String)>,
    /// LibreYOLO's embedded NMS after a detector's decode: `output_name` is then its
    /// `(1, max_det, 6)` detections and the decode is the second output, `raw`.
    pub nms: Option<Nms>,
}

/// The name of the decode when NMS follows it (LibreYOLO's).
const RAW: &str = "raw";

/// The ONNX model of `captured` (one input, one output).
pub fn model(captured: &CapturedGraph, options: &OnnxOptions) -> anyhow::Result<ModelProto> {
    let (&[input], &[output]) = (captured.graph.inputs.as_slice(), captured.graph.outputs.as_slice()) else {
        bail!("an exported graph has one input and one output")
    };
    let mut names = HashMap::new();
    names.insert(input, options.input_name.clone());
    names.insert(output, if options.nms.is_some() { RAW.to_string() } else { options.output_name.clone() });
    let mut w = Writer {
        values: &captured.values,
        names,
        nodes: vec![],
        initializers: vec![],
        written: HashSet::new(),
        dynamic: options.dynamic_batch,
        batched: HashSet::from([input]),
        fresh: 0,
        shapes: BTreeMap::new(),
    };
    for op in &captured.graph.operations {
        w.track_batch(op);
        w.operation(op)?;
    }
    let (Some(in_ir), Some(out_ir)) = (w.shapes.get(&input).cloned(), w.shapes.get(&output).cloned()) else {
        bail!("the recorded graph does not read its input or write its output")
    };
    let mut outputs = vec![];
    if let Some(n) = &options.nms {
        let (&[batch, rows, anchors], &[_, _, h, wd]) = (out_ir.0.as_slice(), in_ir.0.as_slice()) else {
            bail!("NMS follows a detector's (batch, 4 + nc, anchors) decode")
        };
        if batch != 1 || options.dynamic_batch || rows < 5 || out_ir.1 != DType::F32 {
            bail!("NMS is embedded in a batch-1, f32-output detector only");
        }
        nms::append(&mut w, RAW, rows, anchors, (h, wd), n, &options.output_name)?;
        outputs.push(value_info(&options.output_name, &(vec![1, n.max_det, 6], DType::F32), false));
        outputs.push(value_info(RAW, &out_ir, false));
    } else {
        outputs.push(value_info(&options.output_name, &out_ir, options.dynamic_batch));
    }
    let mut graph = GraphProto::new();
    graph.name = "libreyolo-run".into();
    graph.node = w.nodes;
    graph.initializer = w.initializers;
    graph.input.push(value_info(&options.input_name, &in_ir, options.dynamic_batch));
    graph.output = outputs;
    let mut m = ModelProto::new();
    m.ir_version = IR_VERSION;
    m.producer_name = "libreyolo-run".into();
    m.producer_version = env!("CARGO_PKG_VERSION").into();
    let mut opset = OperatorSetIdProto::new();
    opset.version = options.opset;
    m.opset_import.push(opset);
    m.graph = Some(graph).into();
    for (k, v) in &options.metadata {
        let mut e = StringStringEntryProto::new();
        e.key = k.clone();
        e.value = v.clone();
        m.metadata_props.push(e);
    }
    Ok(m)
}

/// A graph boundary's name, element type and shape (batch symbolic when dynamic).
fn value_info(name: &str, t: &(Vec<usize>, DType), dynamic: bool) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for (i, &d) in t.0.iter().enumerate() {
        let mut dim = Dimension::new();
        dim.value = Some(if dynamic && i == 0 { dimension::Value::DimParam("batch".into()) } else { dimension::Value::DimValue(d as i64) });
        shape.dim.push(dim);
    }
    let mut tensor = type_proto::Tensor::new();
    tensor.elem_type = elem_type(t.1).map_or(0, |d| d as i32);
    tensor.shape = Some(shape).into();
    let mut ty = TypeProto::new();
    ty.value = Some(type_proto::Value::TensorType(tensor));
    let mut v = ValueInfoProto::new();
    v.name = name.into();
    v.type_ = Some(ty).into();
    v
}

fn elem_type(dtype: DType) -> Option<DataType> {
    Some(match dtype {
        DType::F32 => DataType::FLOAT,
        DType::F16 => DataType::FLOAT16,
        DType::BF16 => DataType::BFLOAT16,
        DType::F64 => DataType::DOUBLE,
        DType::I64 => DataType::INT64,
        DType::I32 => DataType::INT32,
        DType::U8 => DataType::UINT8,
        DType::Bool(_) => DataType::BOOL,
        _ => return None,
    })
}

/// One attribute of a node.
enum Attr {
    Int(i64),
    Ints(Vec<i64>),
    Float(f32),
    Str(&'static str),
}

fn attribute(name: &str, value: Attr) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.into();
    let ty = match value {
        Attr::Int(i) => {
            a.i = i;
            AttributeType::INT
        }
        Attr::Ints(v) => {
            a.ints = v;
            AttributeType::INTS
        }
        Attr::Float(f) => {
            a.f = f;
            AttributeType::FLOAT
        }
        Attr::Str(s) => {
            a.s = s.as_bytes().to_vec();
            AttributeType::STRING
        }
    };
    a.type_ = ty.into();
    a
}

/// The model under construction.
struct Writer<'a> {
    values: &'a BTreeMap<TensorId, TensorData>,
    /// Names of the graph's boundary tensors; the others are `t<id>`.
    names: HashMap<TensorId, String>,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    /// The recorded constants already written as initializers.
    written: HashSet<TensorId>,
    dynamic: bool,
    /// The tensors that depend on the input's batch (a batch-dynamic reshape finds its axis).
    batched: HashSet<TensorId>,
    /// Counter of the constants and values the translation adds (shapes, scalars).
    fresh: usize,
    /// Shape and dtype of every tensor seen.
    shapes: BTreeMap<TensorId, (Vec<usize>, DType)>,
}

fn ints(v: impl IntoIterator<Item = usize>) -> Vec<i64> {
    v.into_iter().map(|x| x as i64).collect()
}

impl Writer<'_> {
    /// The name of `t` as a node input: a recorded constant is written as an initializer at
    /// its first use.
    fn input(&mut self, t: &TensorIr) -> anyhow::Result<String> {
        let name = self.name(t);
        if let Some(data) = self.values.get(&t.id)
            && self.written.insert(t.id)
            && !self.names.contains_key(&t.id)
        {
            self.initializers.push(tensor_proto(&name, data)?);
        }
        Ok(name)
    }

    fn name(&mut self, t: &TensorIr) -> String {
        self.shapes.entry(t.id).or_insert_with(|| (t.shape.as_slice().to_vec(), t.dtype));
        self.names.get(&t.id).cloned().unwrap_or_else(|| format!("t{}", t.id.value()))
    }

    /// A node `op(inputs) -> out`.
    fn node(&mut self, op: &str, inputs: Vec<String>, out: &TensorIr, attrs: Vec<(&str, Attr)>) {
        let output = self.name(out);
        self.node_named(op, inputs, vec![output], attrs);
    }

    fn node_named(&mut self, op: &str, inputs: Vec<String>, outputs: Vec<String>, attrs: Vec<(&str, Attr)>) {
        let mut n = NodeProto::new();
        n.name = format!("{op}_{}", self.nodes.len());
        n.op_type = op.into();
        n.input = inputs;
        n.output = outputs;
        n.attribute = attrs.into_iter().map(|(k, v)| attribute(k, v)).collect();
        self.nodes.push(n);
    }

    /// A new int64 constant (a shape, axes, pads).
    fn const_i64(&mut self, v: Vec<i64>) -> anyhow::Result<String> {
        let n = v.len();
        self.constant(TensorData::new(v, [n]))
    }

    /// A batch-dynamic reshape's target: a tensor that depends on the batch has it in the first
    /// axis of the recorded size's multiples, alone or merged with others (RT-DETR's attention
    /// folds (batch, heads) into one axis, and its queries gain a leading axis), written `-1`
    /// for ONNX to infer; a tensor that does not keeps its recorded shape. A layout whose batch
    /// follows an axis of a multiple of 7 (sequence-first attention over a 7x7 map) would take
    /// that axis instead: no family has one, and tests/export.rs runs each at batch 2.
    fn reshape_const(&mut self, input: &TensorIr, dims: &[usize]) -> anyhow::Result<String> {
        let mut shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        if self.batched.contains(&input.id) {
            let Some(axis) = dims.iter().position(|d| d % DYNAMIC_BATCH == 0) else {
                bail!("export to ONNX: the network reshapes {:?} to {dims:?}, which loses the batch axis; export with dynamic=false", input.shape.as_slice())
            };
            shape[axis] = -1;
        }
        self.const_i64(shape)
    }

    /// Marks the outputs of `op` batch-dependent when one of its inputs is.
    fn track_batch(&mut self, op: &OperationIr) {
        if op.inputs().any(|t| self.batched.contains(&t.id)) {
            self.batched.extend(op.outputs().map(|t| t.id));
        }
    }

    /// A fresh name for an intermediate value the translation adds.
    fn temp(&mut self) -> String {
        self.fresh += 1;
        format!("n{}", self.fresh)
    }

    fn constant(&mut self, data: TensorData) -> anyhow::Result<String> {
        self.fresh += 1;
        let name = format!("c{}", self.fresh);
        self.initializers.push(tensor_proto(&name, &data)?);
        Ok(name)
    }

    /// A scalar of `dtype` (a float operation's scalar operand).
    fn scalar(&mut self, s: &ScalarIr, dtype: DType) -> anyhow::Result<String> {
        let v = match *s {
            ScalarIr::Float(f) => f,
            ScalarIr::Int(i) => i as f64,
            ScalarIr::UInt(u) => u as f64,
            ScalarIr::Bool(b) => f64::from(u8::from(b)),
        };
        self.constant(TensorData::new(vec![v], [1_usize; 0]).convert_dtype(dtype))
    }

    /// A shape as recorded (a batch-dynamic reshape's is [`Self::reshape_const`]).
    fn shape_const(&mut self, dims: &[usize]) -> anyhow::Result<String> {
        self.const_i64(ints(dims.iter().copied()))
    }

    fn unary(&mut self, op: &str, u: &UnaryOpIr) -> anyhow::Result<()> {
        let x = self.input(&u.input)?;
        self.node(op, vec![x], &u.out, vec![]);
        Ok(())
    }

    fn binary(&mut self, op: &str, b: &BinaryOpIr) -> anyhow::Result<()> {
        let (l, r) = (self.input(&b.lhs)?, self.input(&b.rhs)?);
        self.node(op, vec![l, r], &b.out, vec![]);
        Ok(())
    }

    fn operation(&mut self, op: &OperationIr) -> anyhow::Result<()> {
        match op {
            // Constants are written at first use; handles' lifetimes are not the graph's.
            OperationIr::Init(_) | OperationIr::Drop(_) => Ok(()),
            OperationIr::Module(m) => self.module(m),
            OperationIr::Activation(a) => self.activation(a),
            OperationIr::NumericFloat(dtype, n) | OperationIr::NumericInt(dtype, n) => self.numeric(*dtype, n),
            OperationIr::Float(_, f) => self.float(f),
            OperationIr::BaseFloat(b) | OperationIr::BaseInt(b) | OperationIr::BaseBool(b) => self.base(b),
            OperationIr::Int(IntOperationIr::IntoFloat(c)) => self.cast(&c.input, &c.out),
            OperationIr::Bool(b) => self.boolean(b),
            other => unsupported(other),
        }
    }

    fn boolean(&mut self, b: &BoolOperationIr) -> anyhow::Result<()> {
        match b {
            BoolOperationIr::Not(u) => self.unary("Not", u),
            BoolOperationIr::And(x) => self.binary("And", x),
            BoolOperationIr::Or(x) => self.binary("Or", x),
            BoolOperationIr::IntoFloat(c) | BoolOperationIr::IntoInt(c) => self.cast(&c.input, &c.out),
            other => unsupported_named(&format!("{other:?}")),
        }
    }

    /// `op(x, c)` with the scalar `c` written in `dtype`.
    fn scalar_op(&mut self, op: &str, s: &ScalarOpIr, dtype: DType) -> anyhow::Result<()> {
        let x = self.input(&s.lhs)?;
        let c = self.scalar(&s.rhs, dtype)?;
        self.node(op, vec![x, c], &s.out, vec![]);
        Ok(())
    }

    fn cast(&mut self, input: &TensorIr, out: &TensorIr) -> anyhow::Result<()> {
        let x = self.input(input)?;
        self.cast_named(x, out)
    }

    /// `out` as the value named `x` cast to its type.
    fn cast_named(&mut self, x: String, out: &TensorIr) -> anyhow::Result<()> {
        let Some(to) = elem_type(out.dtype) else { bail!("no ONNX element type for {:?}", out.dtype) };
        self.node("Cast", vec![x], out, vec![("to", Attr::Int(to as i64))]);
        Ok(())
    }

    fn module(&mut self, m: &ModuleOperationIr) -> anyhow::Result<()> {
        match m {
            ModuleOperationIr::Conv2d(c) => {
                let mut inputs = vec![self.input(&c.x)?, self.input(&c.weight)?];
                if let Some(b) = &c.bias {
                    inputs.push(self.input(b)?);
                }
                let o = &c.options;
                let [(pt, pb), (pl, pr)] = o.padding;
                let attrs = vec![
                    ("dilations", Attr::Ints(ints(o.dilation))),
                    ("group", Attr::Int(o.groups as i64)),
                    ("kernel_shape", Attr::Ints(ints(c.weight.shape.as_slice()[2..].iter().copied()))),
                    ("pads", Attr::Ints(ints([pt, pl, pb, pr]))),
                    ("strides", Attr::Ints(ints(o.stride))),
                ];
                self.node("Conv", inputs, &c.out, attrs);
            }
            ModuleOperationIr::MaxPool2d(p) => {
                let x = self.input(&p.x)?;
                let attrs = vec![
                    ("ceil_mode", Attr::Int(p.ceil_mode as i64)),
                    ("dilations", Attr::Ints(ints(p.dilation))),
                    ("kernel_shape", Attr::Ints(ints(p.kernel_size))),
                    ("pads", Attr::Ints(ints([p.padding[0], p.padding[1], p.padding[0], p.padding[1]]))),
                    ("strides", Attr::Ints(ints(p.stride))),
                ];
                self.node("MaxPool", vec![x], &p.out, attrs);
            }
            ModuleOperationIr::AvgPool2d(p) => {
                let x = self.input(&p.x)?;
                let attrs = vec![
                    ("ceil_mode", Attr::Int(p.ceil_mode as i64)),
                    ("count_include_pad", Attr::Int(p.count_include_pad as i64)),
                    ("kernel_shape", Attr::Ints(ints(p.kernel_size))),
                    ("pads", Attr::Ints(ints([p.padding[0], p.padding[1], p.padding[0], p.padding[1]]))),
                    ("strides", Attr::Ints(ints(p.stride))),
                ];
                self.node("AveragePool", vec![x], &p.out, attrs);
            }
            ModuleOperationIr::AdaptiveAvgPool2d(p) if p.output_size == [1, 1] => {
                let x = self.input(&p.x)?;
                self.node("GlobalAveragePool", vec![x], &p.out, vec![]);
            }
            ModuleOperationIr::Interpolate(p) => self.resize(p)?,
            ModuleOperationIr::Linear(l) => {
                // burn's weight is (in, out): x @ w (+ b).
                let (x, w) = (self.input(&l.x)?, self.input(&l.weight)?);
                match &l.bias {
                    None => self.node("MatMul", vec![x, w], &l.out, vec![]),
                    Some(b) => {
                        let b = self.input(b)?;
                        let product = format!("{}_mm", self.name(&l.out));
                        self.node_named("MatMul", vec![x, w], vec![product.clone()], vec![]);
                        self.node("Add", vec![product, b], &l.out, vec![]);
                    }
                }
            }
            other => unsupported_named(&format!("{other:?}"))?,
        }
        Ok(())
    }

    /// Interpolation as ONNX Resize to the recorded output size.
    fn resize(&mut self, p: &burn::backend::ir::InterpolateOpIr) -> anyhow::Result<()> {
        use burn::backend::ir::InterpolateModeIr as Mode;
        // PyTorch's `nearest` is ONNX's asymmetric floor; its `linear`, half-pixel.
        let attrs = match (&p.options.mode, p.options.align_corners) {
            (Mode::Nearest, _) => {
                vec![("coordinate_transformation_mode", Attr::Str("asymmetric")), ("mode", Attr::Str("nearest")), ("nearest_mode", Attr::Str("floor"))]
            }
            (Mode::Bilinear, false) => vec![("coordinate_transformation_mode", Attr::Str("pytorch_half_pixel")), ("mode", Attr::Str("linear"))],
            (Mode::Bilinear, true) => vec![("coordinate_transformation_mode", Attr::Str("align_corners")), ("mode", Attr::Str("linear"))],
            (mode, _) => bail!("export to ONNX: interpolation mode {mode:?} has no ONNX translation yet"),
        };
        let x = self.input(&p.x)?;
        if self.dynamic {
            // Resize's sizes cannot keep an axis; scales can (1 on batch and channels).
            let scales = [1.0, 1.0, p.output_size[0] as f32 / p.x.shape.as_slice()[2] as f32, p.output_size[1] as f32 / p.x.shape.as_slice()[3] as f32];
            let scales = self.constant(TensorData::new(scales.to_vec(), [4]))?;
            self.node("Resize", vec![x, String::new(), scales], &p.out, attrs);
        } else {
            let sizes = self.shape_const(p.out.shape.as_slice())?;
            self.node("Resize", vec![x, String::new(), String::new(), sizes], &p.out, attrs);
        }
        Ok(())
    }

    fn activation(&mut self, a: &ActivationOperationIr) -> anyhow::Result<()> {
        match a {
            ActivationOperationIr::Relu(u) => self.unary("Relu", u),
            ActivationOperationIr::Sigmoid(u) => self.unary("Sigmoid", u),
            ActivationOperationIr::Softmax(d) | ActivationOperationIr::LogSoftmax(d) => {
                let op = if matches!(a, ActivationOperationIr::Softmax(_)) { "Softmax" } else { "LogSoftmax" };
                let x = self.input(&d.input)?;
                self.node(op, vec![x], &d.out, vec![("axis", Attr::Int(d.axis as i64))]);
                Ok(())
            }
            ActivationOperationIr::HardSigmoid(h) => {
                let x = self.input(&h.tensor)?;
                self.node("HardSigmoid", vec![x], &h.out, vec![("alpha", Attr::Float(h.alpha.elem())), ("beta", Attr::Float(h.beta.elem()))]);
                Ok(())
            }
            // Gelu is an ONNX op from opset 20 only: its erf form, as torch.onnx writes it.
            ActivationOperationIr::Gelu(u) => self.gelu(u),
            other => unsupported_named(&format!("{other:?}")),
        }
    }

    /// `x * 0.5 * (1 + erf(x / sqrt(2)))`, burn's (and torch's default) exact GELU.
    fn gelu(&mut self, u: &UnaryOpIr) -> anyhow::Result<()> {
        let x = self.input(&u.input)?;
        let dtype = u.input.dtype;
        let [sqrt2, one, half] = [std::f64::consts::SQRT_2, 1.0, 0.5].map(|v| self.scalar(&ScalarIr::Float(v), dtype));
        let (sqrt2, one, half) = (sqrt2?, one?, half?);
        let [scaled, erf, shifted, product] = [self.temp(), self.temp(), self.temp(), self.temp()];
        self.node_named("Div", vec![x.clone(), sqrt2], vec![scaled.clone()], vec![]);
        self.node_named("Erf", vec![scaled], vec![erf.clone()], vec![]);
        self.node_named("Add", vec![erf, one], vec![shifted.clone()], vec![]);
        self.node_named("Mul", vec![x, shifted], vec![product.clone()], vec![]);
        self.node("Mul", vec![product, half], &u.out, vec![]);
        Ok(())
    }

    fn numeric(&mut self, dtype: DType, n: &NumericOperationIr) -> anyhow::Result<()> {
        use NumericOperationIr as N;
        match n {
            N::Add(b) => self.binary("Add", b),
            N::Sub(b) => self.binary("Sub", b),
            N::Mul(b) => self.binary("Mul", b),
            N::Div(b) => self.binary("Div", b),
            N::AddScalar(s) | N::SubScalar(s) | N::MulScalar(s) | N::DivScalar(s) | N::PowiScalar(s) => {
                let op = match n {
                    N::AddScalar(_) => "Add",
                    N::SubScalar(_) => "Sub",
                    N::MulScalar(_) => "Mul",
                    N::DivScalar(_) => "Div",
                    _ => "Pow",
                };
                self.scalar_op(op, s, dtype)
            }
            N::SumDim(r) | N::MeanDim(r) | N::MaxDim(r) => self.reduce(n, &r.input, &[r.axis], &r.out),
            N::SumDims(r) => self.reduce(n, &r.input, &r.axes, &r.out),
            N::Greater(b) => self.binary("Greater", b),
            N::GreaterEqual(b) => self.binary("GreaterOrEqual", b),
            N::Lower(b) => self.binary("Less", b),
            N::LowerEqual(b) => self.binary("LessOrEqual", b),
            // A comparison's or clamp's scalar is written in the operand's type.
            N::GreaterElem(s) => self.scalar_op("Greater", s, s.lhs.dtype),
            N::GreaterEqualElem(s) => self.scalar_op("GreaterOrEqual", s, s.lhs.dtype),
            N::LowerElem(s) => self.scalar_op("Less", s, s.lhs.dtype),
            N::LowerEqualElem(s) => self.scalar_op("LessOrEqual", s, s.lhs.dtype),
            // clamp_min / clamp_max: the larger / smaller of x and c.
            N::ClampMin(s) => self.scalar_op("Max", s, s.lhs.dtype),
            N::ClampMax(s) => self.scalar_op("Min", s, s.lhs.dtype),
            N::Neg(u) => self.unary("Neg", u),
            N::Abs(u) => self.unary("Abs", u),
            // Descending and sorted, as burn's top-k; ONNX's indices are int64.
            N::TopKWithIndices(t) => {
                let x = self.input(&t.tensor)?;
                let k = self.const_i64(vec![t.k as i64])?;
                let values = self.name(&t.out);
                let indices = if t.out_indices.dtype == DType::I64 { self.name(&t.out_indices) } else { self.temp() };
                let attrs = vec![("axis", Attr::Int(t.dim as i64)), ("largest", Attr::Int(1)), ("sorted", Attr::Int(1))];
                self.node_named("TopK", vec![x, k], vec![values, indices.clone()], attrs);
                if t.out_indices.dtype == DType::I64 { Ok(()) } else { self.cast_named(indices, &t.out_indices) }
            }
            N::Clamp(c) => {
                let x = self.input(&c.tensor)?;
                let (lo, hi) = (self.scalar(&c.min, dtype)?, self.scalar(&c.max, dtype)?);
                self.node("Clip", vec![x, lo, hi], &c.out, vec![]);
                Ok(())
            }
            other => unsupported_named(&format!("{other:?}")),
        }
    }

    /// A reduction keeping its axes (burn's `sum_dim` and `mean_dim` keep them).
    fn reduce(&mut self, n: &NumericOperationIr, input: &TensorIr, axes: &[usize], out: &TensorIr) -> anyhow::Result<()> {
        let x = self.input(input)?;
        let axes = ints(axes.iter().copied());
        let keep = ("keepdims", Attr::Int(1));
        match n {
            // Opset 13 moved ReduceSum's axes to an input; the others follow at opset 18.
            NumericOperationIr::SumDim(_) | NumericOperationIr::SumDims(_) => {
                let a = self.const_i64(axes)?;
                self.node("ReduceSum", vec![x, a], out, vec![keep]);
            }
            NumericOperationIr::MeanDim(_) => self.node("ReduceMean", vec![x], out, vec![("axes", Attr::Ints(axes)), keep]),
            _ => self.node("ReduceMax", vec![x], out, vec![("axes", Attr::Ints(axes)), keep]),
        }
        Ok(())
    }

    fn float(&mut self, f: &FloatOperationIr) -> anyhow::Result<()> {
        use FloatOperationIr as F;
        let (op, u) = match f {
            F::Exp(u) => ("Exp", u),
            F::Log(u) => ("Log", u),
            F::Sqrt(u) => ("Sqrt", u),
            F::Tanh(u) => ("Tanh", u),
            F::Erf(u) => ("Erf", u),
            F::Recip(u) => ("Reciprocal", u),
            F::Floor(u) => ("Floor", u),
            F::Ceil(u) => ("Ceil", u),
            // Half to even, as burn rounds.
            F::Round(u) => ("Round", u),
            F::Matmul(m) => {
                let (l, r) = (self.input(&m.lhs)?, self.input(&m.rhs)?);
                self.node("MatMul", vec![l, r], &m.out, vec![]);
                return Ok(());
            }
            F::IntoInt(c) => return self.cast(&c.input, &c.out),
            other => return unsupported_named(&format!("{other:?}")),
        };
        self.unary(op, u)
    }

    fn base(&mut self, b: &BaseOperationIr) -> anyhow::Result<()> {
        use BaseOperationIr as B;
        match b {
            B::Reshape(r) => {
                let x = self.input(&r.input)?;
                let dims = r.out.shape.as_slice();
                let shape = if self.dynamic { self.reshape_const(&r.input, dims)? } else { self.shape_const(dims)? };
                self.node("Reshape", vec![x, shape], &r.out, vec![]);
            }
            B::Expand(r) => {
                let dims = r.out.shape.as_slice();
                if self.dynamic && dims.first() == Some(&DYNAMIC_BATCH) {
                    bail!("export to ONNX: a broadcast over the batch axis cannot be written batch-dynamic; export with dynamic=false");
                }
                let (x, shape) = (self.input(&r.input)?, self.shape_const(dims)?);
                self.node("Expand", vec![x, shape], &r.out, vec![]);
            }
            B::SwapDims(s) => {
                let x = self.input(&s.input)?;
                let mut perm: Vec<usize> = (0..s.input.shape.as_slice().len()).collect();
                perm.swap(s.dim1, s.dim2);
                self.node("Transpose", vec![x], &s.out, vec![("perm", Attr::Ints(ints(perm)))]);
            }
            B::Permute(p) => {
                let x = self.input(&p.input)?;
                self.node("Transpose", vec![x], &p.out, vec![("perm", Attr::Ints(ints(p.axes.iter().copied())))]);
            }
            B::Flip(f) => {
                let x = self.input(&f.input)?;
                let n = f.axes.len();
                let (starts, ends) = (self.const_i64(vec![-1; n])?, self.const_i64(vec![i64::MIN; n])?);
                let (axes, steps) = (self.const_i64(ints(f.axes.iter().copied()))?, self.const_i64(vec![-1; n])?);
                self.node("Slice", vec![x, starts, ends, axes, steps], &f.out, vec![]);
            }
            B::Slice(s) => self.slice(s)?,
            B::Cat(c) => {
                let inputs = c.tensors.iter().map(|t| self.input(t)).collect::<anyhow::Result<Vec<_>>>()?;
                self.node("Concat", inputs, &c.out, vec![("axis", Attr::Int(c.dim as i64))]);
            }
            B::Cast(c) => self.cast(&c.input, &c.out)?,
            B::Equal(e) => self.binary("Equal", e)?,
            B::EqualElem(s) => self.scalar_op("Equal", s, s.lhs.dtype)?,
            B::RepeatDim(r) => {
                if self.dynamic && r.dim == 0 {
                    bail!("export to ONNX: the network repeats the batch axis, which cannot be written batch-dynamic; export with dynamic=false");
                }
                let x = self.input(&r.tensor)?;
                let repeats = (0..r.tensor.shape.as_slice().len()).map(|d| if d == r.dim { r.times as i64 } else { 1 }).collect();
                let repeats = self.const_i64(repeats)?;
                self.node("Tile", vec![x, repeats], &r.out, vec![]);
            }
            // burn's gather is torch.gather: ONNX GatherElements.
            B::Gather(g) => {
                let (x, i) = (self.input(&g.tensor)?, self.input(&g.indices)?);
                self.node("GatherElements", vec![x, i], &g.out, vec![("axis", Attr::Int(g.dim as i64))]);
            }
            other => unsupported_named(&format!("{other:?}"))?,
        }
        Ok(())
    }

    /// A strided slice; axes taken whole are left out (so the batch stays dynamic).
    fn slice(&mut self, s: &burn::backend::ir::SliceOpIr) -> anyhow::Result<()> {
        let x = self.input(&s.tensor)?;
        let (mut starts, mut ends, mut axes, mut steps) = (vec![], vec![], vec![], vec![]);
        for (axis, (r, &len)) in s.ranges.iter().zip(s.tensor.shape.as_slice().iter()).enumerate() {
            let end = r.end.unwrap_or(len as isize);
            if r.start == 0 && end == len as isize && r.step == 1 {
                continue;
            }
            if self.dynamic && axis == 0 && len == DYNAMIC_BATCH {
                bail!("export to ONNX: the network slices the batch axis, which cannot be written batch-dynamic; export with dynamic=false");
            }
            starts.push(r.start as i64);
            ends.push(end as i64);
            axes.push(axis as i64);
            steps.push(r.step as i64);
        }
        if axes.is_empty() {
            self.node("Identity", vec![x], &s.out, vec![]);
            return Ok(());
        }
        let inputs = vec![x, self.const_i64(starts)?, self.const_i64(ends)?, self.const_i64(axes)?, self.const_i64(steps)?];
        self.node("Slice", inputs, &s.out, vec![]);
        Ok(())
    }
}

fn unsupported(op: &OperationIr) -> anyhow::Result<()> {
    unsupported_named(&format!("{op:?}"))
}

/// An error naming the burn operation the network uses that has no ONNX translation here.
fn unsupported_named(debug: &str) -> anyhow::Result<()> {
    let name: String = debug.chars().take_while(|c| c.is_alphanumeric() || *c == '(' || *c == '_').collect();
    bail!("export to ONNX: the network uses burn's `{}` operation, which has no ONNX translation yet", name.trim_end_matches('('))
}

/// A recorded tensor as an ONNX initializer (raw little-endian bytes).
fn tensor_proto(name: &str, data: &TensorData) -> anyhow::Result<TensorProto> {
    let Some(ty) = elem_type(data.dtype()) else { bail!("constant `{name}` has dtype {:?}, which ONNX cannot hold", data.dtype()) };
    let mut t = TensorProto::new();
    t.name = name.into();
    t.dims = ints(data.shape().as_slice().iter().copied());
    t.data_type = ty as i32;
    t.raw_data = data.as_bytes().to_vec();
    Ok(t)
}
