//! The LibreYOLO parity fixture (`LIBREYOLO_PARITY_DIR`, default `../shared/parity` beside the
//! repository): tensors of `yolo9t_io.safetensors` and the weights files.

#![allow(dead_code)]

use std::path::PathBuf;

use burn::tensor::{Device, Tensor, TensorData};
use safetensors::tensor::{Dtype, SafeTensors};

pub fn dir() -> PathBuf {
    match std::env::var_os("LIBREYOLO_PARITY_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/parity"),
    }
}

pub fn path(name: &str) -> PathBuf {
    dir().join(name)
}

/// The shipped manifest's text.
pub fn manifest_text(name: &str) -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests").join(name)).unwrap()
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

pub struct Fixture {
    bytes: Vec<u8>,
}

impl Fixture {
    pub fn io() -> Self {
        Self::open("yolo9t_io.safetensors")
    }

    pub fn open(name: &str) -> Self {
        let p = path(name);
        Self { bytes: std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display())) }
    }

    pub fn has(&self, name: &str) -> bool {
        SafeTensors::deserialize(&self.bytes).unwrap().tensor(name).is_ok()
    }

    pub fn get(&self, name: &str) -> Array {
        let st = SafeTensors::deserialize(&self.bytes).unwrap();
        let view = st.tensor(name).unwrap_or_else(|_| panic!("fixture tensor {name}"));
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

/// Max |a - b|.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).abs()).fold(0.0, f64::max)
}

/// Rows `index` of the leading axis of a flat row-major array with `row` values per entry.
pub fn select_rows(values: &[f32], row: usize, index: &[usize]) -> Vec<f32> {
    index.iter().flat_map(|&i| values[i * row..(i + 1) * row].iter().copied()).collect()
}
