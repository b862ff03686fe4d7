//! `libreyolo-run parity`: the LibreYOLO parity checks on any device (CPU or GPU).

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::manifest::DeviceRequest;

#[derive(Debug, Args)]
pub struct ParityArgs {
    /// Manifest whose topology is YOLOv9-t.
    #[arg(long, default_value = "manifests/yolo9t.toml")]
    manifest: PathBuf,
    /// Fixture folder (yolo9t_io.safetensors, yolo9t_nc80.safetensors, ...); defaults to
    /// $LIBREYOLO_PARITY_DIR or ../shared/parity, or with --classifier to tests/fixtures.
    #[arg(long)]
    fixture: Option<PathBuf>,
    /// Check a narrow classifier fixture instead (NAME.safetensors, NAME_io.safetensors and
    /// NAME_layers.toml of tests/fixtures/make_{resnet,mobilenetv4}_fixture.py), e.g.
    /// `resnet_narrow`, `mobilenetv4_narrow`, `mobilenetv4m_narrow`.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["manifest", "loss_device"])]
    classifier: Option<String>,
    #[arg(long, default_value = "auto")]
    device: DeviceRequest,
    /// Run the loss (assignment, terms, its gradient) on this device and the network on
    /// `--device`; parameter gradients follow by the chain rule. Checks the loss on a GPU
    /// without the network's kernels.
    #[arg(long)]
    loss_device: Option<DeviceRequest>,
    /// Also write the report as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

pub fn run(args: &ParityArgs) -> Result<(), Failure> {
    crate::kernel_cache::configure();
    if let Some(name) = &args.classifier {
        return classifier(args, name);
    }
    let loaded = crate::manifest::load(&args.manifest, &[])?;
    let device = crate::device::resolve(&args.device).map_err(anyhow::Error::msg)?;
    let dev = device.devices().remove(0);
    let (network, params) = crate::network::build(&loaded, 80, false, &burn::tensor::Device::flex())?;
    let dir = args.fixture.clone().unwrap_or_else(crate::parity::fixture::default_dir);
    eprintln!("parity on {} with {}", device.describe(), dir.display());
    let start = std::time::Instant::now();
    let loss_dev = match &args.loss_device {
        Some(r) => Some(crate::device::resolve(r).map_err(anyhow::Error::msg)?.devices().remove(0)),
        None => None,
    };
    let report = crate::parity::run(&dir, &network, &params, &dev, loss_dev.as_ref())?;
    conclude(args, &report, report.failures(), start)
}

/// `--classifier NAME`: the narrow classifier fixture's checks on `--device`.
fn classifier(args: &ParityArgs, name: &str) -> Result<(), Failure> {
    let device = crate::device::resolve(&args.device).map_err(anyhow::Error::msg)?;
    let dir = args.fixture.clone().unwrap_or_else(|| PathBuf::from("tests/fixtures"));
    eprintln!("parity of {name} on {} with {}", device.describe(), dir.display());
    let start = std::time::Instant::now();
    let report = crate::parity::classifier::run(&dir, name, &device.devices().remove(0))?;
    conclude(args, &report, report.failures(), start)
}

/// Prints the report (and writes it with --json); a failure lists every figure out of tolerance.
fn conclude(args: &ParityArgs, report: &impl serde::Serialize, failures: Vec<String>, start: std::time::Instant) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(report).expect("report serializes");
    println!("{json}");
    eprintln!("parity took {:.1}s", start.elapsed().as_secs_f64());
    if let Some(path) = &args.json {
        std::fs::write(path, &json).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    if failures.is_empty() {
        println!("parity: every figure within the fixture's tolerances");
        Ok(())
    } else {
        Err(Failure::Run(anyhow::anyhow!("parity failures:\n  {}", failures.join("\n  "))))
    }
}
