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
    network_in(&project_dir(), name, nc, &Device::flex()).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The network of `dir/NAME_layers.toml` (a manifest's `layers`) for `nc` classes on `device`.
pub fn network_in(dir: &Path, name: &str, nc: usize, device: &Device) -> anyhow::Result<(libreyolo_families::Network, libreyolo_families::ParamStore)> {
    #[derive(serde::Deserialize)]
    struct Topology {
        layers: Vec<libreyolo_families::LayerSpec>,
    }
    let path = dir.join(format!("{name}_layers.toml"));
    let text = std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let topology: Topology = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    libreyolo_families::Network::build(&topology.layers, nc, false, device, 0).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Every BatchNorm buffer of the fixture named `PREFIX.KEY` against the store's `KEY`: the
/// relative error of each running statistic, and whether every batch count is equal.
pub fn running_stats(io: &Fixture, params: &libreyolo_families::ParamStore, prefix: &str) -> anyhow::Result<(Vec<(String, f64)>, bool)> {
    use libreyolo_families::Value;
    use libreyolo_families::tensor::AnyTensor;
    let (mut stats, mut counts_match) = (vec![], true);
    for name in io.names() {
        let Some(key) = name.strip_prefix(prefix).and_then(|k| k.strip_prefix('.')) else { continue };
        let id = params.find(key).ok_or_else(|| anyhow::anyhow!("the fixture has `{name}`, but the network has no `{key}`"))?;
        let want = io.get(&name).to_f32();
        match &params.entry(id).value {
            Value::Float(AnyTensor::R1(t)) => stats.push((key.to_string(), rel_err(t, &want))),
            Value::Count(n) => {
                counts_match &= *n as f32 == want[0];
                stats.push((key.to_string(), 0.0));
            }
            Value::Float(_) => anyhow::bail!("`{key}` is not a vector"),
        }
    }
    Ok((stats, counts_match))
}

/// [`running_stats`] asserted: every statistic within `tol` relative error, every count equal.
/// Returns how many buffers were checked (a test asserts the number, so a fixture that lost
/// them fails).
pub fn check_running_stats(io: &Fixture, params: &libreyolo_families::ParamStore, prefix: &str, tol: f64) -> usize {
    let (stats, counts_match) = running_stats(io, params, prefix).unwrap_or_else(|e| panic!("{e:#}"));
    for (key, err) in &stats {
        assert!(*err < tol, "{key} after one train-mode forward: relative error {err:.2e}");
    }
    assert!(counts_match, "{prefix}: num_batches_tracked differs");
    stats.len()
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
