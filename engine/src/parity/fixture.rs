//! The LibreYOLO parity fixture (`LIBREYOLO_PARITY_DIR`, default `../shared/parity` beside the
//! repository): tensors of `yolo9t_io.safetensors` and the weights files.

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor, TensorData};
use safetensors::tensor::{Dtype, SafeTensors};

/// `$LIBREYOLO_PARITY_DIR`, else `../shared/parity` beside the repository.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("LIBREYOLO_PARITY_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/parity"),
    }
}

/// One tensor of a safetensors file, as f64 values plus its shape.
pub struct Array {
    pub shape: Vec<usize>,
    pub values: Vec<f64>,
}

impl Array {
    pub fn to_f32(&self) -> Vec<f32> {
        self.values.iter().map(|v| *v as f32).collect()
    }

    pub fn scalar(&self) -> f64 {
        assert!(self.values.len() == 1, "not a scalar: shape {:?}", self.shape);
        self.values[0]
    }
}

/// One safetensors file of the fixture, read into memory.
pub struct Fixture {
    bytes: Vec<u8>,
}

impl Fixture {
    /// `yolo9t_io.safetensors` of `dir`.
    pub fn io(dir: &Path) -> anyhow::Result<Self> {
        Self::open(&dir.join("yolo9t_io.safetensors"))
    }

    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("reading fixture {}: {e}", path.display()))?;
        SafeTensors::deserialize(&bytes).map_err(|e| anyhow::anyhow!("fixture {}: {e}", path.display()))?;
        Ok(Self { bytes })
    }

    pub fn names(&self) -> Vec<String> {
        SafeTensors::deserialize(&self.bytes).unwrap().names().into_iter().map(str::to_string).collect()
    }

    /// The tensor `name`; panics if the fixture lacks it (a malformed fixture).
    pub fn get(&self, name: &str) -> Array {
        let st = SafeTensors::deserialize(&self.bytes).expect("checked when opened");
        let view = st.tensor(name).unwrap_or_else(|_| panic!("fixture tensor {name} is missing"));
        let d = view.data();
        let values: Vec<f64> = match view.dtype() {
            Dtype::F32 => d.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            Dtype::F64 => d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            Dtype::I64 => d.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            Dtype::U8 => d.iter().map(|v| *v as f64).collect(),
            other => panic!("unsupported fixture dtype {other:?}"),
        };
        Array { shape: view.shape().to_vec(), values }
    }

    /// The model input: `images_u8 / 255` in f32, on `device`.
    pub fn images(&self, device: &Device) -> Tensor<4> {
        let u8s = self.get("images_u8");
        let values: Vec<f32> = u8s.values.iter().map(|v| *v as f32 / 255.0).collect();
        let s = &u8s.shape;
        Tensor::from_data(TensorData::new(values, [s[0], s[1], s[2], s[3]]), device)
    }
}

/// Values and shape of a tensor on the device.
pub fn read<const D: usize>(t: &Tensor<D>) -> (Vec<usize>, Vec<f32>) {
    let data = t.clone().into_data().convert::<f32>();
    (t.dims().to_vec(), data.try_to_vec::<f32>().unwrap())
}

/// A keys fixture's `[[key, [dims...]], ...]` (tests/fixtures/*_keys.json) as (key, shape) pairs.
pub fn keys_and_shapes(keys: &serde_json::Value) -> Vec<(String, Vec<usize>)> {
    let pair = |k: &serde_json::Value| -> Option<(String, Vec<usize>)> {
        Some((k[0].as_str()?.to_string(), k[1].as_array()?.iter().map(|d| d.as_u64().map(|d| d as usize)).collect::<Option<_>>()?))
    };
    keys.as_array().expect("a list of [key, shape]").iter().map(|k| pair(k).expect("[key, [dims...]]")).collect()
}

/// Largest |ours - expected| over the largest |expected|: the parity tests' relative error.
pub fn rel_err<const D: usize>(ours: &Tensor<D>, expected: &[f32]) -> f64 {
    let scale = expected.iter().fold(0f64, |m, v| m.max(v.abs() as f64)).max(1e-12);
    max_abs_diff(&read(ours).1, expected) / scale
}

/// The project's own fixtures (`tests/fixtures`, written by the scripts there).
pub fn project_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// The network of a fixture topology (`tests/fixtures/NAME_layers.toml`, a manifest's `layers`)
/// for `nc` classes on the CPU.
pub fn fixture_network(name: &str, nc: usize) -> (libreyolo_families::Network, libreyolo_families::ParamStore) {
    #[derive(serde::Deserialize)]
    struct Topology {
        layers: Vec<libreyolo_families::LayerSpec>,
    }
    let path = project_dir().join(format!("{name}_layers.toml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let topology: Topology = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    libreyolo_families::Network::build(&topology.layers, nc, false, &Device::flex(), 0).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks every BatchNorm buffer of the fixture named `PREFIX.KEY` against the store's `KEY`:
/// running statistics within `tol` relative error, the batch count exactly. Returns how many
/// were checked (a test asserts the number, so a fixture that lost them fails).
pub fn check_running_stats(io: &Fixture, params: &libreyolo_families::ParamStore, prefix: &str, tol: f64) -> usize {
    use libreyolo_families::Value;
    use libreyolo_families::tensor::AnyTensor;
    let mut checked = 0;
    for name in io.names() {
        let Some(key) = name.strip_prefix(prefix).and_then(|k| k.strip_prefix('.')) else { continue };
        let id = params.find(key).unwrap_or_else(|| panic!("no parameter `{key}`"));
        let want = io.get(&name).to_f32();
        match &params.entry(id).value {
            Value::Float(AnyTensor::R1(t)) => {
                let err = rel_err(t, &want);
                assert!(err < tol, "{key} after one train-mode forward: relative error {err:.2e}");
            }
            Value::Count(n) => assert_eq!(*n as f32, want[0], "{key}"),
            Value::Float(_) => panic!("{key} is not a vector"),
        }
        checked += 1;
    }
    checked
}

/// A narrow classifier's fixture (`tests/fixtures/NAME.safetensors` and `NAME_io.safetensors`,
/// written by `write_narrow` in make_resnet_fixture.py) against our network of
/// `NAME_layers.toml` for `nc` classes: logits in eval and train mode within 1e-4 (from u8
/// pixels), the cross-entropy within 1e-5 relative on LibreYOLO's logits and 1e-4 on ours,
/// every parameter's gradient within 1e-3 of its largest value (or of a thousandth of the
/// network's largest gradient, if that is larger), the BatchNorm statistics after the
/// train-mode forward within 1e-4.
/// Returns how many gradients and BatchNorm buffers were checked (a test asserts the numbers).
pub fn check_classifier(name: &str, nc: usize) -> (usize, usize) {
    let device = Device::flex();
    let (network, mut params) = fixture_network(name, nc);
    libreyolo_families::weights::load_safetensors(&mut params, &project_dir().join(format!("{name}.safetensors")), false).unwrap();
    let io = Fixture::open(&project_dir().join(format!("{name}_io.safetensors"))).unwrap();
    let pixels = io.get("images_u8");
    let d = &pixels.shape;
    // What the loader hands a network: RGB in [0, 1].
    let images = Tensor::<4>::from_data(TensorData::new(pixels.to_f32(), [d[0], d[1], d[2], d[3]]), &device).div_scalar(255.0);
    let labels: Vec<i64> = io.get("labels").to_f32().iter().map(|&v| v as i64).collect();
    let labels = Tensor::<1, burn::tensor::Int>::from_data(TensorData::new(labels, [d[0]]), &device);
    let logits = |maps: Vec<Tensor<4>>| {
        let [b, nc, _, _] = maps[0].dims();
        maps[0].clone().reshape([b, nc])
    };

    let eval = logits(network.forward(images.clone(), &libreyolo_families::Ctx::eval(&params), false).main);
    let err = rel_err(&eval, &io.get("eval_logits").to_f32());
    assert!(err < 1e-4, "eval logits: max |ours - LibreYOLO| / max |LibreYOLO| = {err:.2e}");

    let cx = libreyolo_families::Ctx::train(&params);
    let train = logits(network.forward(images, &cx, false).main);
    let err = rel_err(&train, &io.get("train_logits").to_f32());
    assert!(err < 1e-4, "train logits: {err:.2e}");
    // The loss on LibreYOLO's own logits: the loss alone, within 1e-5.
    let want = io.get("loss").scalar();
    let theirs = io.get("train_logits");
    let theirs = Tensor::<2>::from_data(TensorData::new(theirs.to_f32(), [theirs.shape[0], theirs.shape[1]]), &device);
    let on_theirs = read(&libreyolo_stages::loss::cross_entropy(theirs, labels.clone())).1[0] as f64;
    assert!((on_theirs - want).abs() / want < 1e-5, "cross-entropy of LibreYOLO's logits {on_theirs} vs LibreYOLO's {want}");
    // On ours, within 1e-4: the logits' float rounding through the network (a train-mode
    // BatchNorm over a small batch at 1x1, as MobileNetV4's norm_head is, amplifies it) moves it
    // by up to ~2e-5.
    let loss = libreyolo_stages::loss::cross_entropy(train, labels);
    let got = read(&loss).1[0] as f64;
    assert!((got - want).abs() / want < 1e-4, "cross-entropy {got} vs LibreYOLO's {want}");

    let grads = cx.gradients(&loss.backward());
    let expected: Vec<(String, Vec<f32>)> = io.names().into_iter().filter_map(|n| Some((n.strip_prefix("grad.")?.to_string(), io.get(&n).to_f32()))).collect();
    // A gradient that is zero in exact arithmetic (the bias of a BatchNorm whose output a
    // train-mode BatchNorm re-centres after a linear layer) is rounding noise in both engines:
    // it is compared on the scale of the network's gradients (1e-3 of the largest), not its own.
    let largest = expected.iter().flat_map(|(_, v)| v.iter()).fold(0f64, |m, v| m.max(v.abs() as f64));
    for (key, want) in &expected {
        let id = params.find(key).unwrap_or_else(|| panic!("no parameter `{key}`"));
        let (_, g) = grads.iter().find(|(p, _)| *p == id).unwrap_or_else(|| panic!("no gradient for `{key}`"));
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs() as f64)).max(1e-3 * largest);
        let err = max_abs_diff(&read(g).1, want) / scale;
        assert!(err < 1e-3, "d loss / d {key}: max |ours - LibreYOLO| / max |LibreYOLO| = {err:.2e}");
    }
    let checked = expected.len();
    params.apply_batch_stats(cx.take_batch_stats());
    (checked, check_running_stats(&io, &params, "after_train", 1e-4))
}

/// Max |a - b|.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).abs()).fold(0.0, f64::max)
}

/// Rows `index` of the leading axis of a flat row-major array with `row` values per entry.
pub fn select_rows(values: &[f32], row: usize, index: &[usize]) -> Vec<f32> {
    index.iter().flat_map(|&i| values[i * row..(i + 1) * row].iter().copied()).collect()
}
