//! PNG plots of the training curves (losses and mAP per epoch), redrawn after every epoch.

use std::path::Path;

use plotters::prelude::*;

use super::run_dir::EpochRecord;

static FONT: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");

/// Registers the bundled font with plotters once (it has no system font access here).
pub fn ensure_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Draws `series` (name, points) into a PNG at `path`.
fn line_plot(path: &Path, title: &str, series: &[(&str, Vec<(f64, f64)>)]) -> anyhow::Result<()> {
    ensure_font();
    let (w, h) = (800u32, 480u32);
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE)?;
        let points = series.iter().flat_map(|s| s.1.iter());
        let (mut x_max, mut y_min, mut y_max) = (1.0f64, f64::MAX, f64::MIN);
        for &(x, y) in points {
            if y.is_finite() {
                x_max = x_max.max(x);
                y_min = y_min.min(y);
                y_max = y_max.max(y);
            }
        }
        if y_min > y_max {
            (y_min, y_max) = (0.0, 1.0);
        }
        let pad = ((y_max - y_min) * 0.05).max(1e-6);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..x_max, (y_min - pad)..(y_max + pad))?;
        chart.configure_mesh().x_desc("epoch").label_style(("sans-serif", 14)).draw()?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.iter().copied().filter(|p| p.1.is_finite()), colour.stroke_width(2)))?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).label_font(("sans-serif", 14)).draw()?;
        root.present()?;
    }
    let img = image::RgbImage::from_raw(w, h, buf).expect("sized buffer");
    let tmp = path.with_extension("png.tmp");
    img.save_with_format(&tmp, image::ImageFormat::Png)?;
    std::fs::rename(tmp, path)?;
    Ok(())
}

/// `losses.png` and `metrics.png` (the first two validation metrics, named `metrics`) in `dir`.
pub fn draw(dir: &Path, records: &[EpochRecord], metrics: &[&str]) -> anyhow::Result<()> {
    let pts = |f: &dyn Fn(&EpochRecord) -> f64| records.iter().map(|r| (r.epoch as f64 + 1.0, f(r))).collect::<Vec<_>>();
    let names: Vec<String> = records.last().map(|r| r.losses.iter().map(|(n, _)| n.clone()).collect()).unwrap_or_default();
    let series: Vec<(&str, Vec<(f64, f64)>)> =
        names.iter().enumerate().map(|(i, name)| (name.as_str(), pts(&|r: &EpochRecord| r.losses.get(i).map_or(f64::NAN, |(_, v)| *v)))).collect();
    line_plot(&dir.join("losses.png"), "training losses", &series)?;
    let validated: Vec<(f64, &Vec<f64>)> = records.iter().filter_map(|r| r.metrics.as_ref().map(|m| (r.epoch as f64 + 1.0, m))).collect();
    let series: Vec<(&str, Vec<(f64, f64)>)> = metrics
        .iter()
        .take(2)
        .enumerate()
        .map(|(i, name)| (*name, validated.iter().map(|(e, m)| (*e, m.get(i).copied().unwrap_or(f64::NAN))).collect()))
        .collect();
    line_plot(&dir.join("metrics.png"), "validation (EMA weights)", &series)?;
    Ok(())
}
