//! Checks that need more than a type: ranges, multiples of the stride, known families.

use super::diagnostic::{Diagnostic, suggestion};
use super::keypath::KeyPath;
use super::schema::Manifest;
use super::source::{ManifestSource, Part};
use super::values::ImgSize;

/// The network's largest stride; image sides must be multiples of it.
const MAX_STRIDE: u32 = 32;

/// The first setting that is out of its range, as a diagnostic.
pub fn settings(m: &Manifest, source: &ManifestSource) -> Result<(), Diagnostic> {
    let bad = |key: &str, title: String, label: String| Err(source.error_at(&KeyPath::dotted(key), Part::Value, title).with_label(label));

    if m.run.epochs == 0 {
        return bad("run.epochs", "`run.epochs` must be at least 1".into(), "no epochs to train".into());
    }
    if m.run.batch == 0 || m.run.batch < -1 {
        return bad("run.batch", format!("`run.batch` must be a positive number of images, or -1 for AutoBatch; got {}", m.run.batch), "invalid batch".into());
    }
    if let super::values::DeviceRequest::Cuda(ids) = &m.run.device
        && ids.len() > 1
        && m.run.batch > 0
        && let Err(msg) = crate::distributed::per_rank_batch(m.run.batch as usize, ids.len())
    {
        return bad("run.batch", msg, format!("not divisible by {} GPUs", ids.len()));
    }
    for (side, name) in [(m.run.imgsz.height(), "height"), (m.run.imgsz.width(), "width")] {
        if side < MAX_STRIDE || side % MAX_STRIDE != 0 {
            let lower = (side / MAX_STRIDE).max(1) * MAX_STRIDE;
            let upper = lower + if side > lower { MAX_STRIDE } else { 0 };
            let what = match m.run.imgsz {
                ImgSize::Square(_) => "imgsz".to_string(),
                ImgSize::Rect { .. } => format!("the imgsz {name}"),
            };
            return Err(source
                .error_at(
                    &KeyPath::dotted("run.imgsz"),
                    Part::Value,
                    format!("{what} must be a multiple of {MAX_STRIDE} (the network's largest stride); got {side}"),
                )
                .with_label(format!("not a multiple of {MAX_STRIDE}"))
                .with_help(Some(if lower == upper { format!("use {lower}") } else { format!("use {lower} or {upper}") })));
        }
    }

    let unit = [
        ("augment.mosaic_prob", m.augment.mosaic_prob),
        ("augment.mixup_prob", m.augment.mixup_prob),
        ("augment.hsv_prob", m.augment.hsv_prob),
        ("augment.flip_prob", m.augment.flip_prob),
        ("augment.flipud", m.augment.flipud),
        ("augment.translate", m.augment.translate),
        ("schedule.min_lr_ratio", m.schedule.min_lr_ratio),
        ("val.conf", m.val.conf),
        ("val.iou", m.val.iou),
    ];
    for (key, value) in unit {
        if !(0.0..=1.0).contains(&value) {
            return bad(key, format!("`{key}` must be between 0 and 1; got {value}"), "out of range".into());
        }
    }
    let below_one = [("optim.momentum", m.optim.momentum), ("ema.decay", m.ema.decay), ("schedule.warmup_momentum", m.schedule.warmup_momentum)];
    for (key, value) in below_one {
        if !(0.0..1.0).contains(&value) {
            return bad(key, format!("`{key}` must be in [0, 1); got {value}"), "out of range".into());
        }
    }
    let positive = [("optim.lr0", m.optim.lr0), ("ema.tau", m.ema.tau)];
    for (key, value) in positive {
        if !(value > 0.0 && value.is_finite()) {
            return bad(key, format!("`{key}` must be positive; got {value}"), "must be > 0".into());
        }
    }
    let non_negative = [
        ("optim.weight_decay", m.optim.weight_decay),
        ("optim.clip_max_norm", m.optim.clip_max_norm),
        ("schedule.warmup_epochs", m.schedule.warmup_epochs),
        ("schedule.warmup_lr_start", m.schedule.warmup_lr_start),
        ("model.aux_weight", m.model.aux_weight),
        ("augment.degrees", m.augment.degrees),
        ("augment.shear", m.augment.shear),
        ("augment.perspective", m.augment.perspective),
    ];
    for (key, value) in non_negative {
        if !(value >= 0.0 && value.is_finite()) {
            return bad(key, format!("`{key}` must not be negative; got {value}"), "must be >= 0".into());
        }
    }
    // Accepted for LibreYOLO compatibility at its defaults (0); not implemented, so a non-zero
    // value is an error rather than a setting that silently does nothing.
    for (key, value, what) in [("augment.perspective", m.augment.perspective, "perspective warping")] {
        if value != 0.0 {
            return Err(source
                .error_at(&KeyPath::dotted(key), Part::Value, format!("`{key}` = {value}: {what} is not implemented in libreyolo-run yet"))
                .with_label("only 0 is supported".to_string())
                .with_help(Some("LibreYOLO's YOLOv9 default is 0; remove the setting or set it to 0".into())));
        }
    }
    for (key, [lo, hi]) in [("augment.mosaic_scale", m.augment.mosaic_scale), ("augment.mixup_scale", m.augment.mixup_scale)] {
        if !(lo > 0.0 && lo <= hi) {
            return bad(key, format!("`{key}` must be [low, high] with 0 < low <= high; got [{lo}, {hi}]"), "invalid range".into());
        }
    }
    let [lo, hi] = m.augment.crop_scale;
    if !(lo > 0.0 && lo <= hi && hi <= 1.0) {
        return bad(
            "augment.crop_scale",
            format!("`augment.crop_scale` must be [low, high] with 0 < low <= high <= 1; got [{lo}, {hi}]"),
            "invalid range".into(),
        );
    }
    if !(m.augment.crop_pct > 0.0 && m.augment.crop_pct <= 1.0) {
        return bad("augment.crop_pct", format!("`augment.crop_pct` must be in (0, 1]; got {}", m.augment.crop_pct), "out of range".into());
    }
    if let Some(err) = m.model.freeze.iter().find_map(|n| regex::Regex::new(n).err()) {
        return bad("model.freeze", format!("`model.freeze`: {err}"), "not a regular expression".into());
    }
    for (i, g) in m.optim.groups.iter().enumerate() {
        let what = format!("`optim.groups` entry {}", i + 1);
        if g.names.is_empty() {
            return bad("optim.groups", format!("{what} has no `names`"), "a group names its parameters".into());
        }
        if let Some(err) = g.names.iter().find_map(|n| regex::Regex::new(n).err()) {
            return bad("optim.groups", format!("{what}: {err}"), "not a regular expression".into());
        }
        if !(g.lr_scale >= 0.0 && g.lr_scale.is_finite()) || g.weight_decay.is_some_and(|w| !(w >= 0.0 && w.is_finite())) {
            return bad("optim.groups", format!("{what}: `lr_scale` and `weight_decay` must not be negative"), "out of range".into());
        }
    }
    if m.capture.threshold == 0 {
        return bad("capture.threshold", "`capture.threshold` must be at least 1".into(), "must be >= 1".into());
    }
    if m.capture.max_graphs == 0 {
        return bad("capture.max_graphs", "`capture.max_graphs` must be at least 1".into(), "must be >= 1".into());
    }
    if m.profile.steps < 2 {
        return bad("profile.steps", "`profile.steps` must be at least 2 (one unsynchronised and one synced step)".into(), "must be >= 2".into());
    }
    if m.model.nc == Some(0) {
        return bad("model.nc", "`model.nc` must be at least 1".into(), "no classes".into());
    }
    if m.data.max_labels == 0 {
        return bad("data.max_labels", "`data.max_labels` must be at least 1".into(), "must be >= 1".into());
    }
    let families = libreyolo_families::FAMILIES;
    if !families.contains(&m.model.family.as_str()) {
        return Err(source
            .error_at(&KeyPath::dotted("model.family"), Part::Value, format!("unknown model family `{}`", m.model.family))
            .with_label(format!("known families: {}", families.join(", ")))
            .with_help(suggestion(&m.model.family, families.iter().copied())));
    }
    Ok(())
}
