//! `libreyolo-run bench network|loss`: GPU (or CPU) timings with warm-up reported apart.

use std::path::PathBuf;

use burn::tensor::FloatDType;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

use super::Failure;
use crate::bench::{self, Timing};
use crate::manifest::DeviceRequest;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
    #[arg(long, default_value = "auto", global = true)]
    device: DeviceRequest,
    #[arg(long, default_value_t = 16, global = true)]
    batch: usize,
    #[arg(long, default_value_t = 640, global = true)]
    imgsz: usize,
    #[arg(long, default_value_t = 3, global = true)]
    warmup: usize,
    #[arg(long, default_value_t = 20, global = true)]
    iters: usize,
    /// Also write the figures as JSON here.
    #[arg(long, value_name = "FILE", global = true)]
    json: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum BenchWhat {
    /// Network forward (eval) and forward+backward (train).
    Network {
        #[arg(long, default_value = "manifests/yolo9t.toml")]
        manifest: PathBuf,
        /// Compute dtypes to measure.
        #[arg(long, value_delimiter = ',', default_value = "f32,bf16")]
        dtype: Vec<Dtype>,
        /// Measure the eval forward only (no training forward+backward).
        #[arg(long)]
        forward_only: bool,
    },
    /// The YOLOv9 loss, eager and inside a captured CUDA graph.
    Loss {
        #[arg(long, default_value_t = 80)]
        nc: usize,
        #[arg(long, default_value_t = 10)]
        boxes: usize,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Dtype {
    F32,
    Bf16,
    F16,
}

impl From<Dtype> for FloatDType {
    fn from(d: Dtype) -> Self {
        match d {
            Dtype::F32 => FloatDType::F32,
            Dtype::Bf16 => FloatDType::BF16,
            Dtype::F16 => FloatDType::F16,
        }
    }
}

#[derive(Serialize)]
struct Report {
    device: String,
    kernel_cache: Option<String>,
    timings: Vec<Timing>,
}

pub fn run(args: &BenchArgs) -> Result<(), Failure> {
    let kernel_cache = crate::kernel_cache::configure().map(|p| p.display().to_string());
    let device = crate::device::resolve(&args.device).map_err(anyhow::Error::msg)?;
    let dev = device.devices().remove(0);
    eprintln!("bench on {}", device.describe());
    let timings = match &args.what {
        BenchWhat::Network { manifest, dtype, forward_only } => {
            let loaded = crate::manifest::load(manifest, &[])?;
            let (network, params) = crate::network::build(&loaded, 80, false, &burn::tensor::Device::flex())?;
            let mut rows = vec![];
            for d in dtype {
                let cfg = bench::network::NetworkBench {
                    batch: args.batch,
                    height: args.imgsz,
                    width: args.imgsz,
                    dtype: (*d).into(),
                    warmup: args.warmup,
                    iters: args.iters,
                    train: !forward_only,
                };
                rows.extend(bench::network::run(&cfg, &network, &params, &dev));
            }
            bench::print_table(&format!("network ({})", manifest.display()), &rows);
            rows
        }
        BenchWhat::Loss { nc, boxes } => {
            let cfg = bench::loss::LossBench {
                batch: args.batch,
                height: args.imgsz,
                width: args.imgsz,
                nc: *nc,
                boxes_per_image: *boxes,
                max_labels: 300,
                warmup: args.warmup,
                iters: args.iters,
            };
            let rows = bench::loss::run(&cfg, &dev);
            bench::print_table("YOLOv9 loss", &rows);
            rows
        }
    };
    if let Some(path) = &args.json {
        let report = Report { device: device.describe(), kernel_cache, timings };
        std::fs::write(path, serde_json::to_string_pretty(&report).expect("serializes"))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}
