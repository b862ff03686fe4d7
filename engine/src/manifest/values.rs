//! Setting values with more than one spelling (`imgsz = 640` or `[480, 640]`, `device = 0` or
//! `"0,1"`), each with an error message that says what would have been accepted.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Training image size: a square side or `[height, width]`; multiples of 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImgSize {
    Square(u32),
    Rect { height: u32, width: u32 },
}

impl ImgSize {
    pub fn height(self) -> u32 {
        match self {
            Self::Square(s) => s,
            Self::Rect { height, .. } => height,
        }
    }

    pub fn width(self) -> u32 {
        match self {
            Self::Square(s) => s,
            Self::Rect { width, .. } => width,
        }
    }
}

impl fmt::Display for ImgSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Square(s) => write!(f, "{s}"),
            Self::Rect { height, width } => write!(f, "{height}x{width}"),
        }
    }
}

impl Serialize for ImgSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Self::Square(side) => s.serialize_u32(side),
            Self::Rect { height, width } => [height, width].serialize(s),
        }
    }
}

const IMGSZ_EXPECTED: &str = "an image size: an integer like 640, [height, width] or \"HxW\"";

impl<'de> Deserialize<'de> for ImgSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ImgSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(IMGSZ_EXPECTED)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ImgSize, E> {
                u32::try_from(v).map(ImgSize::Square).map_err(|_| E::custom(format!("imgsz must be positive, got {v}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ImgSize, E> {
                self.visit_i64(v as i64)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ImgSize, E> {
                let parse = |s: &str| s.trim().parse::<u32>().ok();
                match v.split_once(['x', 'X', ',']) {
                    Some((h, w)) => match (parse(h), parse(w)) {
                        (Some(height), Some(width)) => Ok(ImgSize::Rect { height, width }),
                        _ => Err(E::custom(format!("expected {IMGSZ_EXPECTED}, got \"{v}\""))),
                    },
                    None => parse(v).map(ImgSize::Square).ok_or_else(|| E::custom(format!("expected {IMGSZ_EXPECTED}, got \"{v}\""))),
                }
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<ImgSize, A::Error> {
                let height: u32 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let width: u32 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<u32>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(ImgSize::Rect { height, width })
            }
        }
        d.deserialize_any(V)
    }
}

/// Where to train: `"auto"` (CUDA when present, else CPU), `"cpu"`, or CUDA indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRequest {
    Auto,
    Cpu,
    Cuda(Vec<usize>),
}

impl fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(ids) => {
                let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                f.write_str(&ids.join(","))
            }
        }
    }
}

impl std::str::FromStr for DeviceRequest {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        match s.to_ascii_lowercase().as_str() {
            "auto" | "" => return Ok(Self::Auto),
            "cpu" => return Ok(Self::Cpu),
            "cuda" => return Ok(Self::Cuda(vec![0])),
            _ => {}
        }
        let ids = s.strip_prefix("cuda:").unwrap_or(s);
        let mut parsed = Vec::new();
        for part in ids.split(',') {
            let id =
                part.trim().parse::<usize>().map_err(|_| format!("expected \"auto\", \"cpu\", a GPU index like \"0\" or a list like \"0,1\"; got \"{s}\""))?;
            if parsed.contains(&id) {
                return Err(format!("GPU {id} is listed twice in device \"{s}\""));
            }
            parsed.push(id);
        }
        Ok(Self::Cuda(parsed))
    }
}

impl Serialize for DeviceRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DeviceRequest;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"auto\", \"cpu\", a GPU index like 0 or a list like \"0,1\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DeviceRequest, E> {
                usize::try_from(v).map(|i| DeviceRequest::Cuda(vec![i])).map_err(|_| E::custom(format!("a GPU index cannot be negative, got {v}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DeviceRequest, E> {
                self.visit_i64(v as i64)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DeviceRequest, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Compute dtype under mixed precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AmpDtype {
    #[serde(rename = "bf16", alias = "bfloat16")]
    Bf16,
    #[serde(rename = "fp16", alias = "float16")]
    Fp16,
}

/// Image cache: none, decoded images in RAM, or sidecar files on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    #[default]
    None,
    Ram,
    Disk,
}

/// `data.label_rows`: how many target rows a training batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LabelRowsSetting {
    /// `growing` when the step is captured on one GPU, else `batch`.
    #[default]
    Auto,
    /// `max_labels` rows in every batch.
    Fixed,
    /// The batch's largest label count rounded up to a power of two (at least 8), at most
    /// `max_labels`, as LibreYOLO pads each batch to its largest count.
    Batch,
    /// The most rows a batch of the run has needed so far (at least 64): a few counts, each
    /// reached once, so a captured step settles on one graph.
    Growing,
}

impl LabelRowsSetting {
    /// The loader's rows for a run whose step is `captured` or not, on `replicas` GPUs. Captured
    /// on several, every setting gives `max_labels` rows: each replica decides at each step to
    /// replay, capture or run eager by its own batch's shape, and their captures agree through
    /// collectives, so every replica must see the same shapes at the same steps.
    pub fn resolve(self, captured: bool, replicas: usize) -> libreyolo_stages::data::LabelRows {
        use libreyolo_stages::data::LabelRows;
        match self {
            _ if captured && replicas > 1 => LabelRows::Fixed,
            LabelRowsSetting::Auto if captured => LabelRows::Growing,
            LabelRowsSetting::Auto | LabelRowsSetting::Batch => LabelRows::Batch,
            LabelRowsSetting::Fixed => LabelRows::Fixed,
            LabelRowsSetting::Growing => LabelRows::Growing,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    Sgd,
    Adamw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// Linear warm-up, then linear decay to `lr0 * min_lr_ratio` (YOLOv9).
    Linear,
    /// Linear warm-up, then cosine decay to `lr0 * min_lr_ratio`.
    #[serde(alias = "warmcos")]
    Cos,
    /// YOLOX's `yoloxwarmcos`: quadratic warm-up from `warmup_lr_start`, cosine decay to
    /// `lr0 * min_lr_ratio`, then that rate for the last `augment.no_aug_epochs` epochs.
    Yoloxwarmcos,
    /// Linear warm-up, then `lr0` throughout (LibreYOLO's `ConstantLRScheduler`, RT-DETR's).
    Constant,
}

/// `run.weight_gradient`: which of our split-K kernels computes a 16-bit convolution's weight
/// gradient on a GPU with tensor cores (vendor/README.md, burn-cubecl's `BURN_WGRAD_MMA`, which
/// wins when set): `"vectors"` (16-byte gathers, the default and fastest), `"gather"` (the same
/// products and bits, one 2-byte load a value) or `"cuda-cores"` (f32 products, no tensor cores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WeightGradientKernel {
    #[default]
    Vectors,
    Gather,
    CudaCores,
}

impl WeightGradientKernel {
    /// The value of burn-cubecl's variable that selects it (`None`: its default).
    pub fn env_value(self) -> Option<&'static str> {
        match self {
            WeightGradientKernel::Vectors => None,
            WeightGradientKernel::Gather => Some("gather"),
            WeightGradientKernel::CudaCores => Some("0"),
        }
    }
}

/// `capture.compile` (`compile=`), LibreYOLO's `train(compile=...)`: `false` (the default),
/// `true` (= `"default"`), or one of torch.compile's modes. What each means in this engine (kernel
/// selection, fusion search, capture) is `crate::compile`'s; the spellings and the error are
/// LibreYOLO's `normalize_compile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompileMode {
    #[default]
    Off,
    Default,
    ReduceOverhead,
    MaxAutotune,
    MaxAutotuneNoCudagraphs,
}

impl CompileMode {
    /// The modes besides `false`, as LibreYOLO names them.
    pub const MODES: [(&'static str, CompileMode); 4] = [
        ("default", CompileMode::Default),
        ("reduce-overhead", CompileMode::ReduceOverhead),
        ("max-autotune", CompileMode::MaxAutotune),
        ("max-autotune-no-cudagraphs", CompileMode::MaxAutotuneNoCudagraphs),
    ];

    /// LibreYOLO's spelling (`false` for off).
    pub fn name(self) -> &'static str {
        Self::MODES.iter().find(|(_, m)| *m == self).map_or("false", |(n, _)| n)
    }

    fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Some(CompileMode::Default),
            "false" | "0" | "no" | "" => Some(CompileMode::Off),
            other => Self::MODES.iter().find(|(n, _)| *n == other).map(|(_, m)| *m),
        }
    }
}

impl std::fmt::Display for CompileMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for CompileMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CompileMode::Off => s.serialize_bool(false),
            other => s.serialize_str(other.name()),
        }
    }
}

impl<'de> Deserialize<'de> for CompileMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = CompileMode;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or one of \"default\", \"reduce-overhead\", \"max-autotune\", \"max-autotune-no-cudagraphs\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<CompileMode, E> {
                Ok(if v { CompileMode::Default } else { CompileMode::Off })
            }
            // `compile=1` / `compile=0` on the command line arrive as TOML integers.
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<CompileMode, E> {
                match v {
                    1 => Ok(CompileMode::Default),
                    0 => Ok(CompileMode::Off),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<CompileMode, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<CompileMode, E> {
                CompileMode::parse(v).ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `capture.enabled` (`cuda_graph=`), as LibreYOLO reads `cuda_graph`: `true`, `false`, or
/// `"auto"` — captured where the device records CUDA graphs, eager elsewhere without a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMode {
    Off,
    On,
    #[default]
    Auto,
}

impl CaptureMode {
    /// Capture is asked for (on, or automatically).
    pub fn wanted(self) -> bool {
        self != CaptureMode::Off
    }
}

impl Serialize for CaptureMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CaptureMode::Off => s.serialize_bool(false),
            CaptureMode::On => s.serialize_bool(true),
            CaptureMode::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for CaptureMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = CaptureMode;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or \"auto\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<CaptureMode, E> {
                Ok(if v { CaptureMode::On } else { CaptureMode::Off })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<CaptureMode, E> {
                match v.trim().to_ascii_lowercase().as_str() {
                    "auto" => Ok(CaptureMode::Auto),
                    "true" | "on" | "1" => Ok(CaptureMode::On),
                    "false" | "off" | "0" => Ok(CaptureMode::Off),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::LabelRowsSetting;
    use libreyolo_stages::data::LabelRows;

    /// `auto`: rows that grow under capture on one GPU, each batch's own count when eager; any
    /// setting captured on several GPUs: the fixed rows (replicas record the same shapes at the
    /// same steps).
    #[test]
    fn auto_label_rows_follow_capture_and_replicas() {
        assert_eq!(LabelRowsSetting::Auto.resolve(true, 1), LabelRows::Growing);
        assert_eq!(LabelRowsSetting::Auto.resolve(true, 2), LabelRows::Fixed);
        assert_eq!(LabelRowsSetting::Auto.resolve(false, 2), LabelRows::Batch);
        assert_eq!(LabelRowsSetting::Batch.resolve(true, 1), LabelRows::Batch);
        assert_eq!(LabelRowsSetting::Growing.resolve(true, 1), LabelRows::Growing);
        assert_eq!(LabelRowsSetting::Growing.resolve(true, 4), LabelRows::Fixed);
        assert_eq!(LabelRowsSetting::Batch.resolve(true, 2), LabelRows::Fixed);
        assert_eq!(LabelRowsSetting::Growing.resolve(false, 4), LabelRows::Growing);
        assert_eq!(LabelRowsSetting::Fixed.resolve(false, 1), LabelRows::Fixed);
    }
}
