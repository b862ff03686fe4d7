//! Weights in safetensors files with LibreYOLO's `state_dict` key names, and LibreYOLO's
//! PyTorch checkpoints (`.pt`, read with burn-store's pickle reader; loading only).
//!
//! Loading checks the file against the network: every key must be present with its shape, and
//! no key may be left over; otherwise the error lists the missing, unexpected and mis-shaped
//! keys. Saving writes atomically (temporary file, fsync, rename) so a crash never leaves a
//! truncated checkpoint.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use burn::tensor::{Tensor, TensorData};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::params::{ParamStore, Value};

/// Prefixes of the PGI auxiliary branch; ignored when the network has no aux branch.
const AUX_PREFIXES: &[&str] = &["aux.", "aux_head."];

#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    #[error("cannot read weights `{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{path}` is not a valid safetensors file: {message}")]
    Format { path: PathBuf, message: String },
    #[error("weights `{path}` do not match the network:\n{details}")]
    Mismatch { path: PathBuf, details: String },
}

/// Which keys a load touched.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub loaded: usize,
    /// Auxiliary-branch keys skipped because the network has none.
    pub skipped_aux: usize,
    /// Tensors sized for another class count that kept their fresh init ([`Fit::classes`]),
    /// each as `name: network [..], file [..]`.
    pub kept_init: Vec<String>,
}

/// What a load accepts of a file that does not fit the network exactly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fit {
    /// Keys missing from the file keep their current values (an overlay).
    pub partial: bool,
    /// Fine-tuning to this many classes, as LibreYOLO rebuilds a head for a new dataset: a
    /// tensor that differs from the file's in one dimension only, the network's being this
    /// class count, keeps its fresh init.
    pub classes: Option<usize>,
}

/// `partial`, without a new class count.
impl From<bool> for Fit {
    fn from(partial: bool) -> Self {
        Fit { partial, classes: None }
    }
}

/// Whether `network` differs from `file` only in one dimension, `network`'s being `classes`.
fn class_count_differs(network: &[usize], file: &[usize], classes: usize) -> bool {
    let mut differing = (0..network.len()).filter(|&d| network[d] != file[d]);
    network.len() == file.len() && matches!((differing.next(), differing.next()), (Some(d), None) if network[d] == classes)
}

/// Loads every tensor of `store` from `path`. With `partial` (`fit: true`), keys missing from
/// the file keep their current values (an overlay); unexpected and mis-shaped keys are errors
/// either way, but for those [`Fit::classes`] lets keep their init.
pub fn load_safetensors(store: &mut ParamStore, path: &Path, fit: impl Into<Fit>) -> Result<LoadReport, WeightsError> {
    load_prefixed(store, path, "", fit)
}

/// Like `load_safetensors`, for keys stored as `prefix + name` (checkpoints keep several
/// copies: `model.`, `train_model.`); keys without the prefix are ignored.
pub fn load_prefixed(store: &mut ParamStore, path: &Path, prefix: &str, fit: impl Into<Fit>) -> Result<LoadReport, WeightsError> {
    let bytes = std::fs::read(path).map_err(|source| WeightsError::Io { path: path.to_path_buf(), source })?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| WeightsError::Format { path: path.to_path_buf(), message: e.to_string() })?;
    load_from(store, path, &file, prefix, fit.into())
}

/// Loads a PyTorch checkpoint (`.pt`/`.pth`) written by LibreYOLO: the state dict under its
/// `model` key (the EMA weights), or the file itself when it is a bare state dict.
pub fn load_pytorch(store: &mut ParamStore, path: &Path, fit: impl Into<Fit>) -> Result<LoadReport, WeightsError> {
    use burn::store::pytorch_reader::PytorchReader;
    let format = |message: String| WeightsError::Format { path: path.to_path_buf(), message };
    let reader = match PytorchReader::with_top_level_key(path, "model") {
        Ok(r) if !r.is_empty() => r,
        _ => PytorchReader::new(path).map_err(|e| format(format!("not a readable PyTorch checkpoint: {e}")))?,
    };
    load_from(store, path, &reader, "", fit.into())
}

/// A file of named tensors.
trait TensorFile {
    fn names(&self) -> Vec<String>;
    fn shape(&self, name: &str) -> Option<Vec<usize>>;
    /// The tensor's element type and little-endian bytes.
    fn bytes(&self, name: &str) -> Result<(Dtype, Vec<u8>), String>;
}

impl TensorFile for SafeTensors<'_> {
    fn names(&self) -> Vec<String> {
        SafeTensors::names(self).into_iter().map(str::to_string).collect()
    }
    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.tensor(name).ok().map(|v| v.shape().to_vec())
    }
    fn bytes(&self, name: &str) -> Result<(Dtype, Vec<u8>), String> {
        let v: TensorView = self.tensor(name).map_err(|e| e.to_string())?;
        Ok((v.dtype(), v.data().to_vec()))
    }
}

impl TensorFile for burn::store::pytorch_reader::PytorchReader {
    fn names(&self) -> Vec<String> {
        self.keys()
    }
    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.get(name).map(|t| t.shape().to_vec())
    }
    fn bytes(&self, name: &str) -> Result<(Dtype, Vec<u8>), String> {
        use burn::store::pytorch_reader::DType as P;
        let t = self.get(name).ok_or_else(|| format!("no tensor `{name}`"))?;
        let dtype = match t.dtype() {
            P::F64 => Dtype::F64,
            P::F32 => Dtype::F32,
            P::F16 => Dtype::F16,
            P::BF16 => Dtype::BF16,
            P::I64 => Dtype::I64,
            P::I32 => Dtype::I32,
            other => return Err(format!("unsupported element type {other:?}")),
        };
        // The reader returns native-endian bytes; the targets here are little-endian.
        Ok((dtype, t.read().map_err(|e| e.to_string())?))
    }
}

fn load_from(store: &mut ParamStore, path: &Path, file: &dyn TensorFile, prefix: &str, fit: Fit) -> Result<LoadReport, WeightsError> {
    let has_aux = store.entries().iter().any(|e| AUX_PREFIXES.iter().any(|p| e.name.starts_with(p)));
    let key = |name: &str| format!("{prefix}{name}");

    let mut missing = vec![];
    let mut mismatched = vec![];
    let mut kept_init = vec![];
    for entry in store.entries() {
        match file.shape(&key(&entry.name)) {
            Some(shape) if shape != entry.value.shape() => {
                let line = format!("{}: network {:?}, file {:?}", entry.name, entry.value.shape(), shape);
                if fit.classes.is_some_and(|nc| class_count_differs(&entry.value.shape(), &shape, nc)) { kept_init.push(line) } else { mismatched.push(line) }
            }
            Some(_) => {}
            None if fit.partial => {}
            None => missing.push(entry.name.clone()),
        }
    }
    let mut skipped_aux = 0;
    let mut unexpected = vec![];
    let mut names = file.names();
    names.sort();
    for name in names {
        let Some(name) = name.strip_prefix(prefix) else { continue };
        if store.find(name).is_none() {
            if !has_aux && AUX_PREFIXES.iter().any(|p| name.starts_with(p)) {
                skipped_aux += 1;
            } else {
                unexpected.push(name.to_string());
            }
        }
    }
    if !missing.is_empty() || !unexpected.is_empty() || !mismatched.is_empty() {
        let mut details = String::new();
        for (what, list) in [("missing", &missing), ("unexpected", &unexpected), ("mis-shaped", &mismatched)] {
            if list.is_empty() {
                continue;
            }
            let _ = writeln!(details, "  {} {what} key(s):", list.len());
            for k in list.iter().take(20) {
                let _ = writeln!(details, "    {k}");
            }
            if list.len() > 20 {
                let _ = writeln!(details, "    ... and {} more", list.len() - 20);
            }
        }
        return Err(WeightsError::Mismatch { path: path.to_path_buf(), details: details.trim_end().to_string() });
    }

    let mut loaded = 0;
    let format_err = |message: String| WeightsError::Format { path: path.to_path_buf(), message };
    for i in 0..store.len() {
        let entry = store.entry_mut(crate::params::ParamId(i));
        let Some(shape) = file.shape(&key(&entry.name)) else { continue };
        if shape != entry.value.shape() {
            continue; // sized for another class count: keeps its init (checked above)
        }
        let (dtype, bytes) = file.bytes(&key(&entry.name)).map_err(|m| format_err(format!("{}: {m}", entry.name)))?;
        entry.value = match &entry.value {
            Value::Float(t) => {
                let data = TensorData::new(floats(dtype, &bytes).map_err(|m| format_err(format!("{}: {m}", entry.name)))?, shape);
                let device = t.device();
                Value::Float(crate::each_rank!(t, _x => Tensor::from_data(data.clone(), &device)))
            }
            Value::Count(_) => Value::Count(integer(dtype, &bytes).map_err(|m| format_err(format!("{}: {m}", entry.name)))?),
        };
        loaded += 1;
    }
    Ok(LoadReport { loaded, skipped_aux, kept_init })
}

fn floats(dtype: Dtype, d: &[u8]) -> Result<Vec<f32>, String> {
    Ok(match dtype {
        Dtype::F32 => d.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        Dtype::F64 => d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap()) as f32).collect(),
        Dtype::F16 => d.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::BF16 => d.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        other => return Err(format!("expected a float tensor, found {other:?}")),
    })
}

fn integer(dtype: Dtype, d: &[u8]) -> Result<i64, String> {
    match (dtype, d.len()) {
        (Dtype::I64, 8) => Ok(i64::from_le_bytes(d.try_into().unwrap())),
        (Dtype::I32, 4) => Ok(i32::from_le_bytes(d.try_into().unwrap()) as i64),
        (dtype, _) => Err(format!("expected an int64 scalar, found {dtype:?} of {} bytes", d.len())),
    }
}

/// A tensor ready to be written: name, dtype, shape, little-endian bytes.
pub type Owned = (String, Dtype, Vec<usize>, Vec<u8>);

/// Every tensor of `store` as `prefix + name` (floats as f32, counts as int64 scalars).
pub fn owned(store: &ParamStore, prefix: &str) -> Vec<Owned> {
    store
        .entries()
        .iter()
        .map(|e| {
            let (dtype, bytes) = match &e.value {
                Value::Float(t) => (Dtype::F32, f32_bytes(t.flat().into_data())),
                Value::Count(n) => (Dtype::I64, n.to_le_bytes().to_vec()),
            };
            (format!("{prefix}{}", e.name), dtype, e.value.shape(), bytes)
        })
        .collect()
}

/// An f32 vector tensor as an owned entry.
pub fn owned_vector(name: String, t: &Tensor<1>) -> Owned {
    (name, Dtype::F32, t.dims().to_vec(), f32_bytes(t.clone().into_data()))
}

/// Writes every tensor of `store` to `path` (f32, counts as int64 scalars), atomically.
pub fn save_safetensors(store: &ParamStore, path: &Path) -> std::io::Result<()> {
    write(path, owned(store, ""), None)
}

/// Writes `tensors` and string `metadata` as one safetensors file, atomically.
pub fn write(path: &Path, tensors: Vec<Owned>, metadata: Option<std::collections::HashMap<String, String>>) -> std::io::Result<()> {
    let views = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| TensorView::new(*dtype, shape.clone(), bytes).map(|v| (name.as_str(), v)).map_err(std::io::Error::other))
        .collect::<Result<Vec<_>, _>>()?;
    let buffer = safetensors::serialize(views, metadata).map_err(std::io::Error::other)?;
    write_atomically(path, &buffer)
}

/// The string metadata of a safetensors file.
pub fn read_metadata(path: &Path) -> Result<std::collections::HashMap<String, String>, WeightsError> {
    let bytes = std::fs::read(path).map_err(|source| WeightsError::Io { path: path.to_path_buf(), source })?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| WeightsError::Format { path: path.to_path_buf(), message: e.to_string() })?;
    Ok(meta.metadata().clone().unwrap_or_default())
}

/// The f32 vectors stored under `prefix` (optimizer state), by name without the prefix.
pub fn read_vectors(path: &Path, prefix: &str, device: &burn::tensor::Device) -> Result<Vec<(String, Tensor<1>)>, WeightsError> {
    let bytes = std::fs::read(path).map_err(|source| WeightsError::Io { path: path.to_path_buf(), source })?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| WeightsError::Format { path: path.to_path_buf(), message: e.to_string() })?;
    let mut out = vec![];
    for (name, view) in file.tensors() {
        let Some(rest) = name.strip_prefix(prefix) else { continue };
        let values = floats(view.dtype(), view.data()).map_err(|message| WeightsError::Format { path: path.to_path_buf(), message })?;
        let n = values.len();
        out.push((rest.to_string(), Tensor::from_data(TensorData::new(values, [n]), device)));
    }
    Ok(out)
}

fn f32_bytes(data: TensorData) -> Vec<u8> {
    let values: Vec<f32> = data.convert::<f32>().try_to_vec::<f32>().expect("converted to f32");
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Write to a temporary file beside `path`, fsync, then rename over `path`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("weights")));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
