//! `libreyolo-run profile run|summary|phases|kernels`: a short profiled training, and views of
//! the `profile.json` it writes.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;

use super::Failure;
use crate::profile::analysis::Profile;
use crate::profile::artifacts;

#[derive(Debug, Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Train just long enough to fill the profile window (warm-up + steps), with mosaic on
    /// (`no_aug_epochs=0`) and validation off, and write the profile to runs/profile/prof.
    Run {
        manifest: PathBuf,
        /// Settings as `key=value` (e.g. `batch=16 profile.steps=20 profile.warmup=5`).
        #[arg(value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Profile N separate runs (prof_1 .. prof_N) and write profile_repeat.json with the
        /// mean and standard deviation.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
    },
    /// Headline figures, the verdict, the kernel mix and the top kernels.
    Summary {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The per-phase table: GPU ms, wall ms, kernels.
    Phases {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The most expensive kernels.
    Kernels {
        file: PathBuf,
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Only kernels of this phase.
        #[arg(long)]
        phase: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: &ProfileArgs) -> Result<(), Failure> {
    match &args.what {
        What::Run { manifest, overrides, repeat } => profile_run(manifest, overrides, *repeat),
        What::Summary { file, json } => {
            let p = artifacts::read(file)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&artifacts::summary(&p, None)).expect("serializes"));
            } else {
                println!("{}", crate::profile::report(&p));
                print_categories(&p);
                print_kernels(&p, 8, None);
            }
            Ok(())
        }
        What::Phases { file, json } => {
            let p = artifacts::read(file)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&p.phases).expect("serializes"));
            } else {
                println!("{:<12} {:>10} {:>10} {:>10}", "phase", "gpu_ms", "wall_ms", "kernels");
                for r in &p.phases {
                    let gpu = r.gpu_ms_per_step.map(|g| format!("{g:.3}")).unwrap_or_else(|| "-".into());
                    println!("{:<12} {:>10} {:>10.3} {:>10.0}", r.phase, gpu, r.wall_ms_per_step, r.kernels_per_step);
                }
            }
            Ok(())
        }
        What::Kernels { file, top, phase, json } => {
            let p = artifacts::read(file)?;
            if *json {
                let rows: Vec<_> = p.kernels.iter().filter(|k| phase.as_ref().is_none_or(|f| &k.phase == f)).take(*top).collect();
                println!("{}", serde_json::to_string_pretty(&rows).expect("serializes"));
            } else {
                print_kernels(&p, *top, phase.as_deref());
            }
            Ok(())
        }
    }
}

fn print_categories(p: &Profile) {
    if p.categories.is_empty() {
        return;
    }
    println!("kernel mix: {}", p.categories.iter().map(|c| format!("{} {:.0}%", c.name, c.pct)).collect::<Vec<_>>().join(", "));
}

fn print_kernels(p: &Profile, top: usize, phase: Option<&str>) {
    if p.kernel_timing.is_none() {
        println!("no kernel view: the profile was taken on a device without a kernel observer (CPU)");
        return;
    }
    println!("{:<44} {:<18} {:<10} {:>10} {:>7} {:>8}", "kernel", "category", "phase", "ms/step", "% gpu", "count");
    for k in p.kernels.iter().filter(|k| phase.is_none_or(|f| k.phase == f)).take(top) {
        let name: String = k.kernel.chars().take(44).collect();
        println!("{:<44} {:<18} {:<10} {:>10.3} {:>7.1} {:>8.1}", name, k.category, k.phase, k.ms_per_step, k.pct_of_gpu, k.count_per_step);
    }
}

/// One or more profile-only trainings.
fn profile_run(manifest: &Path, overrides: &[String], repeat: usize) -> Result<(), Failure> {
    let repeat = repeat.max(1);
    let mut profiles = vec![];
    let mut project = PathBuf::from("runs/profile");
    for trial in 1..=repeat {
        let name = if repeat == 1 { "prof".to_string() } else { format!("prof_{trial}") };
        // LibreYOLO's `profile run`: mosaic on, a profile-only run, epochs enough to fill it.
        let mut settings: Vec<String> = vec![
            "project=runs/profile".into(),
            format!("name={name}"),
            "exist_ok=true".into(),
            "epochs=1000".into(),
            "no_aug_epochs=0".into(),
            "val=false".into(),
        ];
        settings.extend(overrides.iter().cloned());
        settings.extend(["profile.enabled=true".to_string(), "profile.then_stop=true".to_string()]);
        let loaded = crate::manifest::load(manifest, &settings)?;
        crate::device::apply_kernel_settings(&loaded.manifest.run);
        let dag = crate::dag::StepDag::build(&loaded)?;
        let device = crate::device::resolve(&loaded.manifest.run.device).map_err(anyhow::Error::msg)?;
        let summary = crate::train::train(&loaded, &dag, &device)?;
        let path = summary.run_dir.join("profile.json");
        if !path.exists() {
            let p = &loaded.manifest.profile;
            return Err(anyhow::anyhow!(
                "no profile produced for run {trial}: the window (warmup {} + steps {}) never filled; the run stopped first",
                p.warmup,
                p.steps
            )
            .into());
        }
        profiles.push((path.clone(), artifacts::read(&path)?));
        project = loaded.manifest.run.project.clone();
        println!("profile {trial}/{repeat}: {}", path.display());
    }
    if repeat > 1 {
        let out = project.join("profile_repeat.json");
        let xs: Vec<f64> = profiles.iter().map(|(_, p)| p.real.img_per_s).collect();
        let (mean, std) = mean_std(&xs);
        let avg = |f: fn(&Profile) -> f64| mean_std(&profiles.iter().map(|(_, p)| f(p)).collect::<Vec<_>>()).0;
        let bounds: Vec<&str> = profiles.iter().map(|(_, p)| p.bound.as_str()).collect();
        let bound = if bounds.iter().all(|b| *b == bounds[0]) { bounds[0].to_string() } else { "mixed".into() };
        let (_, last) = profiles.last().expect("at least one trial");
        let mut value = serde_json::to_value(last).expect("serializes");
        let o = value.as_object_mut().expect("profile is an object");
        o.remove("measurements");
        for (k, v) in [
            ("img_per_s", json!(mean)),
            ("img_per_s_std", json!(std)),
            ("img_per_s_n", json!(xs.len())),
            ("img_per_s_trials", json!(xs)),
            ("step_ms", json!(avg(|p| p.real.step_ms))),
            ("dataload_ms", json!(avg(|p| p.real.dataload_ms))),
            ("dataload_frac", json!(avg(|p| p.real.dataload_frac))),
            ("gpu_util", json!(avg(|p| p.gpu_util))),
            ("gpu_util_raw", json!(avg(|p| p.gpu_util_raw))),
            ("gpu_busy_ms_per_step", json!(avg(|p| p.gpu_busy_ms_per_step))),
            ("kernels_per_step", json!(avg(|p| p.kernels_per_step))),
            ("mean_kernel_us", json!(avg(|p| p.mean_kernel_us))),
            ("host_overhead_ms_per_step", json!(avg(|p| p.host_overhead_ms_per_step))),
            ("bound", json!(bound)),
            (
                "aggregation",
                json!({"n": xs.len(), "profiles": profiles.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>(),
                       "representative_profile": profiles.last().map(|(p, _)| p.display().to_string()),
                       "note": "img_per_s is the mean over trials, img_per_s_std the population standard deviation; other scalars are means; the rest is the last trial's"}),
            ),
        ] {
            o.insert(k.into(), v);
        }
        std::fs::write(&out, serde_json::to_string_pretty(&value).expect("serializes")).map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))?;
        println!("img/s: {mean:.1} +/- {std:.1} (n={}) | {bound}", xs.len());
        println!("wrote {}", out.display());
        println!("next: libreyolo-run profile summary {}", profiles[0].0.display());
    } else {
        println!("next: libreyolo-run profile summary {}", profiles[0].0.display());
    }
    Ok(())
}

/// Mean and population standard deviation.
fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    (mean, (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt())
}
