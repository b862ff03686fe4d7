//! Inference on images. A detector: letterbox (or stretch), the network in eval mode, the head's candidates
//! and class-aware NMS (the validation path with predict's thresholds), then annotated copies
//! of the images and one JSON of every detection in original-image pixels. A classifier: the
//! evaluation centre crop, class probabilities, the top five classes of each image in the JSON.

use std::path::{Path, PathBuf};

use anyhow::Context;
use burn::tensor::{DType, Device, FloatDType, Int, Tensor, TensorData};
use image::RgbImage;
use libreyolo_families::{Network, ParamStore};
use libreyolo_stages::data::augment::Boxes;
use libreyolo_stages::data::augment::resize::Resize;
use libreyolo_stages::data::image as img;
use libreyolo_stages::val::nms::{self, Det, NmsConfig};
use serde::Serialize;

use crate::capture::CaptureManager;
use crate::capture::forward::{Forward, ForwardFn, ForwardGraph, fused_eval_forward};

/// What `predict` needs besides the network: thresholds and the input size.
#[derive(Debug, Clone)]
pub struct PredictConfig {
    pub nms: NmsConfig,
    /// Input size (height, width), multiples of 32.
    pub imgsz: (u32, u32),
    /// How an image meets it (`data.resize`): letterbox or stretch, as in training.
    pub resize: Resize,
    pub compute: Option<FloatDType>,
    /// A classifier's evaluation crop (`augment.crop_pct`, `augment.interpolation`).
    pub crop_pct: f64,
    pub interpolation: libreyolo_stages::data::image::Interpolation,
}

/// One detection as written to `predictions.json`.
#[derive(Debug, Clone, Serialize)]
pub struct JsonDetection {
    pub class: usize,
    pub name: String,
    pub score: f32,
    /// x1, y1, x2, y2 in the original image's pixels.
    pub xyxy: [f32; 4],
}

/// One of a classifier's top classes.
#[derive(Debug, Clone, Serialize)]
pub struct JsonClass {
    pub class: usize,
    pub name: String,
    pub score: f32,
}

/// Classes a classifier's prediction lists, best first (LibreYOLO's `probs.top5`).
pub const TOP_K: usize = 5;

#[derive(Debug, Clone, Serialize)]
pub struct ImagePrediction {
    pub image: PathBuf,
    pub width: u32,
    pub height: u32,
    /// A detector's detections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detections: Option<Vec<JsonDetection>>,
    /// A classifier's top classes, best first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top: Option<Vec<JsonClass>>,
}

/// The images of `source`: the file itself, or the images of a folder (sorted, not recursive).
pub fn sources(source: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if source.is_file() {
        return Ok(vec![source.to_path_buf()]);
    }
    if !source.is_dir() {
        anyhow::bail!("source={} does not exist (give an image or a folder of images)", source.display());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(source)
        .with_context(|| format!("reading {}", source.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && img::is_image(p))
        .collect();
    files.sort();
    if files.is_empty() {
        anyhow::bail!("source={} holds no images (jpg, jpeg, png, bmp)", source.display());
    }
    Ok(files)
}

/// The resized image as a (1, 3, H, W) tensor in [0, 1], and the resize's (x, y) scale.
pub fn preprocess(image: &RgbImage, device: &Device, cfg: &PredictConfig) -> (Tensor<4>, [f32; 2]) {
    let (h, w) = cfg.imgsz;
    let (resized, scale) = cfg.resize.apply(image, &mut Boxes::default(), h, w);
    (to_tensor(&resized, device), scale)
}

/// An RGB image as a (1, 3, H, W) tensor in [0, 1].
fn to_tensor(image: &RgbImage, device: &Device) -> Tensor<4> {
    let (w, h) = image.dimensions();
    let plane = (h * w) as usize;
    let mut chw = vec![0u8; 3 * plane];
    for (p, px) in image.pixels().enumerate() {
        for c in 0..3 {
            chw[c * plane + p] = px.0[c];
        }
    }
    Tensor::<4, Int>::from_data(TensorData::new(chw, [1, 3, h as usize, w as usize]), (device, DType::U8)).float().div_scalar(255.0)
}

/// A classifier's top classes of one image `(class, probability)`, best first, by `forward`
/// through `graphs`.
pub fn classify<'a>(
    forward: &ForwardFn<'a>,
    image: &RgbImage,
    device: &'a Device,
    cfg: &PredictConfig,
    graphs: &mut CaptureManager<ForwardGraph<'a>>,
) -> anyhow::Result<Vec<(usize, f32)>> {
    let crop = libreyolo_stages::data::classify::centre_crop(image, cfg.imgsz, cfg.crop_pct, cfg.interpolation);
    let mut forward = Forward { f: forward.clone(), device: device.clone(), input: to_tensor(&crop, device), dtype: cfg.compute };
    let key = forward.key();
    let probs = graphs.run(&key, &mut forward).into_data().convert::<f32>().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut ranked: Vec<(usize, f32)> = probs.into_iter().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(TOP_K);
    Ok(ranked)
}

/// Detections of one decoded image by `forward`, which goes through `graphs` (capture, replay
/// or eager).
pub fn detect<'a>(
    network: &Network,
    forward: &ForwardFn<'a>,
    image: &RgbImage,
    device: &'a Device,
    cfg: &PredictConfig,
    graphs: &mut CaptureManager<ForwardGraph<'a>>,
) -> anyhow::Result<Vec<Det>> {
    let (x, scale) = preprocess(image, device, cfg);
    let mut forward = Forward { f: forward.clone(), device: device.clone(), input: x, dtype: cfg.compute };
    let key = forward.key();
    let pred = graphs.run(&key, &mut forward);
    let [_, _, a] = pred.dims();
    let values = pred.into_data().convert::<f32>().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let labels = network.detector("`predict`")?.labels();
    Ok(nms::detect(&values, network.head().nc(), labels, a, scale, image.dimensions(), &cfg.nms))
}

/// Runs every image of `files`, writes (a detector) `<out>/<file name>` annotated and
/// `<out>/predictions.json`; unreadable images are skipped with a warning.
#[allow(clippy::too_many_arguments)]
pub fn run<'a>(
    network: &'a Network,
    params: &'a ParamStore,
    names: &[String],
    files: &[PathBuf],
    out: &Path,
    device: &'a Device,
    cfg: &PredictConfig,
    graphs: &mut CaptureManager<ForwardGraph<'a>>,
) -> anyhow::Result<Vec<ImagePrediction>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // LibreYOLO predicts with the fused model (`fuse()`): BatchNorm folded into convolutions,
    // RepConvN into one 3x3 convolution, folded once for the whole run.
    let forward = fused_eval_forward(network, params, cfg.compute);
    let bar = crate::train::progress::bar(files.len() as u64, "predict");
    let mut all = vec![];
    for file in files {
        bar.inc(1);
        let image = match img::decode(file) {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!("skipping {}: {e}", file.display());
                continue;
            }
        };
        let name_of = |c: usize| names.get(c).cloned().unwrap_or_else(|| c.to_string());
        let (detections, top) = if crate::train::validate::Task::of(network) == crate::train::validate::Task::Classify {
            let top = classify(&forward, &image, device, cfg, graphs)?;
            (None, Some(top.into_iter().map(|(class, score)| JsonClass { class, name: name_of(class), score }).collect()))
        } else {
            let dets = detect(network, &forward, &image, device, cfg, graphs)?;
            let mut annotated = image.clone();
            draw(&mut annotated, &dets, &name_of)?;
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("image");
            let target = out.join(format!("{stem}.jpg"));
            annotated.save_with_format(&target, image::ImageFormat::Jpeg).with_context(|| format!("writing {}", target.display()))?;
            (Some(dets.iter().map(|d| JsonDetection { class: d.class, name: name_of(d.class), score: d.score, xyxy: d.xyxy }).collect()), None)
        };
        all.push(ImagePrediction { image: file.clone(), width: image.width(), height: image.height(), detections, top });
    }
    bar.finish_and_clear();
    let json = out.join("predictions.json");
    let tmp = out.join("predictions.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&all)?).and_then(|_| std::fs::rename(&tmp, &json)).with_context(|| format!("writing {}", json.display()))?;
    Ok(all)
}

/// Boxes with "name score" labels in class colours, drawn with the bundled font.
fn draw(image: &mut RgbImage, dets: &[Det], name_of: &dyn Fn(usize) -> String) -> anyhow::Result<()> {
    use plotters::prelude::*;
    crate::train::plots::ensure_font();
    let (w, h) = image.dimensions();
    let thickness = ((w.max(h) as f32 / 400.0).round() as u32).max(1);
    let font_px = (w.max(h) as f64 / 40.0).clamp(10.0, 28.0);
    let root = BitMapBackend::with_buffer(image.as_mut(), (w, h)).into_drawing_area();
    for d in dets.iter().rev() {
        let [r, g, b] = libreyolo_stages::data::preview::COLOURS[d.class % libreyolo_stages::data::preview::COLOURS.len()];
        let colour = RGBColor(r, g, b);
        let [x1, y1, x2, y2] = d.xyxy.map(|v| v.round() as i32);
        root.draw(&Rectangle::new([(x1, y1), (x2, y2)], colour.stroke_width(thickness)))?;
        let label = format!("{} {:.2}", name_of(d.class), d.score);
        let style = ("sans-serif", font_px).into_font().color(&WHITE);
        let (tw, th) = root.estimate_text_size(&label, &style)?;
        let top = (y1 - th as i32 - 2).max(0);
        root.draw(&Rectangle::new([(x1, top), (x1 + tw as i32 + 4, top + th as i32 + 2)], colour.filled()))?;
        root.draw(&Text::new(label, (x1 + 2, top + 1), style))?;
    }
    root.present()?;
    Ok(())
}
