//! `libreyolo-run data preview|bench`: look at augmented batches, time the loader.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::Failure;
use crate::data::{self, Split};

#[derive(Debug, Args)]
pub struct DataArgs {
    #[command(subcommand)]
    what: DataWhat,
}

#[derive(Debug, Subcommand)]
enum DataWhat {
    /// Write a grid of augmented training images with their boxes to a PNG.
    Preview {
        manifest: PathBuf,
        #[arg(value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        #[arg(long, default_value = "preview.png")]
        out: PathBuf,
        /// Images in the grid.
        #[arg(long, default_value_t = 16)]
        n: usize,
        #[arg(long, default_value_t = 0)]
        epoch: u64,
    },
    /// Images per second of the training loader (mosaic and all augmentation) by worker count.
    Bench {
        manifest: PathBuf,
        #[arg(value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Worker counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        workers: Vec<usize>,
        /// Batches timed per worker count (after one untimed batch).
        #[arg(long, default_value_t = 16)]
        batches: usize,
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
}

#[derive(Serialize)]
struct LoaderFigure {
    workers: usize,
    batch: usize,
    imgsz: String,
    cache: String,
    images: usize,
    seconds: f64,
    images_per_s: f64,
}

pub fn run(args: &DataArgs) -> Result<(), Failure> {
    match &args.what {
        DataWhat::Preview { manifest, overrides, out, n, epoch } => {
            let loaded = crate::manifest::load(manifest, overrides)?;
            let cfg = data::config(&loaded)?;
            let ds = data::open(&loaded, &cfg, Split::Train)?;
            let loader = data::loader(&loaded, ds, *n, data::transforms(&loaded, cfg.layout).train, (0, 1));
            let batch = loader.epoch(*epoch).recv().map_err(|_| anyhow::anyhow!("the loader produced no batch"))?;
            let cols = (*n as f64).sqrt().ceil() as usize;
            let img = libreyolo_stages::data::preview::grid(&batch, cols);
            libreyolo_stages::data::preview::write_png(&img, out).map_err(anyhow::Error::msg)?;
            let boxes = batch.targets.chunks_exact(5).filter(|r| r[0] >= 0.0).count();
            println!("wrote {} ({} images, {boxes} boxes, {}x{})", out.display(), batch.size, img.width(), img.height());
            Ok(())
        }
        DataWhat::Bench { manifest, overrides, workers, batches, json } => {
            let loaded = crate::manifest::load(manifest, overrides)?;
            let cfg = data::config(&loaded)?;
            let start = Instant::now();
            let ds = data::open(&loaded, &cfg, Split::Train)?;
            eprintln!("opened {} images ({} boxes) in {:.2}s", ds.len(), ds.num_boxes(), start.elapsed().as_secs_f64());
            let m = &loaded.manifest;
            let batch = crate::train::nominal_batch(m.run.batch);
            let mut figures = vec![];
            println!("| workers | batch | imgsz | cache | images | seconds | images/s |");
            println!("|---:|---:|---|---|---:|---:|---:|");
            for &w in workers {
                let mut overrides = overrides.clone();
                overrides.push(format!("workers={w}"));
                let loaded = crate::manifest::load(manifest, &overrides)?;
                let loader = data::loader(&loaded, ds.clone(), batch, data::transforms(&loaded, cfg.layout).train, (0, 1));
                let per_epoch = loader.batches_per_epoch().max(1);
                let (mut images, mut epoch) = (0, 0u64);
                let mut rx = loader.epoch(epoch);
                let _ = rx.recv(); // the first batch includes thread start-up
                let t = Instant::now();
                let mut got = 0;
                while got < *batches {
                    match rx.recv() {
                        Ok(b) => {
                            images += b.size;
                            got += 1;
                        }
                        Err(_) => {
                            epoch += 1;
                            rx = loader.epoch(epoch);
                        }
                    }
                    if per_epoch == 0 {
                        break;
                    }
                }
                let seconds = t.elapsed().as_secs_f64();
                let fig = LoaderFigure {
                    workers: w,
                    batch,
                    imgsz: m.run.imgsz.to_string(),
                    cache: format!("{:?}", m.data.cache).to_lowercase(),
                    images,
                    seconds,
                    images_per_s: images as f64 / seconds,
                };
                println!("| {} | {} | {} | {} | {} | {:.2} | {:.1} |", fig.workers, fig.batch, fig.imgsz, fig.cache, fig.images, fig.seconds, fig.images_per_s);
                figures.push(fig);
            }
            if let Some(path) = json {
                std::fs::write(path, serde_json::to_string_pretty(&figures).expect("serializes"))
                    .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
            }
            Ok(())
        }
    }
}
