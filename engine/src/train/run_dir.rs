//! The run directory: `project/name` (or `name2`, `name3`, ... unless `exist_ok`), holding the
//! resolved manifest, `results.csv`, `metrics.jsonl`, `train.log`, plots and `weights/`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::manifest::{Diagnostic, LoadedManifest, is_resolved};

/// The per-epoch and per-step records and their plots, which belong to one run.
const RECORDS: [&str; 6] = ["results.csv", "metrics.jsonl", "steps.csv", "losses.png", "metrics.png", "map.png"];

pub struct RunDir {
    pub path: PathBuf,
    log: File,
}

/// One epoch's figures (a row of `results.csv`, a line of `metrics.jsonl`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, Default)]
pub struct EpochRecord {
    pub epoch: usize,
    /// The mean of each named loss term over the epoch's steps, in the loss's order.
    pub losses: Vec<(String, f64)>,
    pub lr: f64,
    pub images_per_s: f64,
    pub seconds: f64,
    /// The task's validation metrics when validated this epoch (`Task::metric_names` order:
    /// COCO stats, or top-1/top-5 accuracy).
    /// (`map` in the records of runs made before classification.)
    #[serde(skip_serializing_if = "Option::is_none", default, alias = "map")]
    pub metrics: Option<Vec<f64>>,
}

/// One training step's figures (a row of `steps.csv`).
#[derive(Debug, Clone, Default)]
pub struct StepRecord {
    /// Optimizer steps taken so far, this one included.
    pub iteration: usize,
    /// The loss terms, in the loss's order (their names are the epoch's).
    pub losses: Vec<f64>,
    pub lr: f64,
}

/// With `resume=true`, the settings of the run being resumed: its resolved `manifest.toml`
/// loaded with the command line's `overrides` on top (LibreYOLO restores a resumed run's
/// arguments likewise), so `resume=true name=RUN` is enough; the manifest given on the command
/// line only names the run directory. A run directory without a resolved manifest (made before
/// runs kept one) keeps the given manifest.
pub fn resumed(loaded: LoadedManifest, overrides: &[String]) -> Result<LoadedManifest, Diagnostic> {
    let run = &loaded.manifest.run;
    if !run.resume {
        return Ok(loaded);
    }
    let (project, name) = (run.project.clone(), run.name.clone());
    let saved = project.join(&name).join("manifest.toml");
    match std::fs::read_to_string(&saved) {
        Ok(text) if is_resolved(&text) => {
            eprintln!("resume: the settings of {} (the command line's overrides on top)", saved.display());
            let mut resumed = crate::manifest::load(&saved, overrides)?;
            // The run resumed is the one whose folder held the file (moved or not), and it is
            // resumed whether `resume` came from the command line or the manifest given.
            (resumed.manifest.run.project, resumed.manifest.run.name, resumed.manifest.run.resume) = (project, name, true);
            Ok(resumed)
        }
        _ => Ok(loaded),
    }
}

/// The checkpoint `name` of the run directory `dir`.
pub fn weights_in(dir: &Path, name: &str) -> PathBuf {
    dir.join("weights").join(format!("{name}.safetensors"))
}

/// `dir/name`, or the first of `dir/name2`, `dir/name3`, ... that does not exist yet.
pub fn numbered(dir: &Path, name: &str) -> PathBuf {
    let mut path = dir.join(name);
    let mut n = 2;
    while path.exists() {
        path = dir.join(format!("{name}{n}"));
        n += 1;
    }
    path
}

impl RunDir {
    /// Creates (or, resuming / `exist_ok`, reuses) the run directory.
    pub fn create(project: &Path, name: &str, exist_ok: bool, resume: bool) -> anyhow::Result<Self> {
        let path = if exist_ok || resume { project.join(name) } else { numbered(project, name) };
        if resume && !path.join("weights/last.safetensors").exists() {
            anyhow::bail!("resume=true, but {} has no weights/last.safetensors to resume from", path.display());
        }
        std::fs::create_dir_all(path.join("weights")).with_context(|| format!("creating {}", path.display()))?;
        if !resume {
            // A fresh run reusing a directory (`exist_ok`) starts its records afresh, as
            // LibreYOLO rewrites results.csv: appending would mix two runs' epochs in one table.
            for stale in RECORDS {
                match std::fs::remove_file(path.join(stale)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("removing the previous run's {}", path.join(stale).display()));
                    }
                    _ => {}
                }
            }
        }
        let log = OpenOptions::new().create(true).append(true).open(path.join("train.log"))?;
        Ok(Self { path, log })
    }

    pub fn weights(&self, name: &str) -> PathBuf {
        weights_in(&self.path, name)
    }

    /// Appends a timestamped line to `train.log`.
    pub fn log(&mut self, line: &str) {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let _ = writeln!(self.log, "[{t}] {line}");
        let _ = self.log.flush();
    }

    /// Writes the run's resolved manifest (atomically: a resumed run's other ranks may read it).
    pub fn write_manifest(&self, loaded: &LoadedManifest) -> anyhow::Result<()> {
        libreyolo_families::weights::write_atomically(&self.path.join("manifest.toml"), loaded.resolved_text(&self.path)?.as_bytes())
            .context("writing manifest.toml")
    }

    /// Appends an epoch to `results.csv` (its validation columns named `metrics`) and
    /// `metrics.jsonl`.
    pub fn record(&self, r: &EpochRecord, metrics: &[&str]) -> anyhow::Result<()> {
        let csv = self.path.join("results.csv");
        let new = !csv.exists();
        let mut f = OpenOptions::new().create(true).append(true).open(&csv)?;
        if new {
            let mut header = "epoch".to_string();
            for (name, _) in &r.losses {
                header.push_str(&format!(",train/{name}_loss"));
            }
            header.push_str(",lr,images_per_s,seconds");
            for name in metrics {
                header.push_str(&format!(",metrics/{name}"));
            }
            writeln!(f, "{header}")?;
        }
        let mut row = r.epoch.to_string();
        for (_, v) in &r.losses {
            row.push_str(&format!(",{v:.6}"));
        }
        row.push_str(&format!(",{:.8},{:.2},{:.2}", r.lr, r.images_per_s, r.seconds));
        let values = r.metrics.clone().unwrap_or_else(|| vec![f64::NAN; metrics.len()]);
        for v in values {
            if v.is_nan() { row.push(',') } else { row.push_str(&format!(",{v:.6}")) }
        }
        writeln!(f, "{row}")?;
        f.sync_all()?;
        let mut j = OpenOptions::new().create(true).append(true).open(self.path.join("metrics.jsonl"))?;
        writeln!(j, "{}", serde_json::to_string(r)?)?;
        j.sync_all()?;
        Ok(())
    }

    /// Appends the steps of an epoch to `steps.csv`: each optimizer step's loss terms (the whole
    /// batch's, every GPU's together) and learning rate, for loss curves finer than an epoch.
    /// `names`: the loss terms' names.
    pub fn record_steps(&self, epoch: usize, names: &[&str], steps: &[StepRecord]) -> anyhow::Result<()> {
        let path = self.path.join("steps.csv");
        let new = !path.exists();
        let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
        if new {
            let columns: Vec<String> = names.iter().map(|n| format!("{n}_loss")).collect();
            writeln!(f, "epoch,step,iteration,{},lr", columns.join(","))?;
        }
        for (i, r) in steps.iter().enumerate() {
            let losses: Vec<String> = r.losses.iter().map(|v| format!("{v:.6}")).collect();
            writeln!(f, "{epoch},{i},{},{},{:.8}", r.iteration, losses.join(","), r.lr)?;
        }
        f.sync_all()?;
        Ok(())
    }

    /// Every epoch recorded so far (from `metrics.jsonl`).
    pub fn records(&self) -> Vec<EpochRecord> {
        std::fs::read_to_string(self.path.join("metrics.jsonl")).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(epoch: usize) -> EpochRecord {
        EpochRecord { epoch, losses: vec![("box".into(), 1.0)], ..Default::default() }
    }

    /// `exist_ok` reuses the directory but not the previous run's records; resuming keeps them.
    #[test]
    fn a_fresh_run_in_a_reused_directory_starts_its_records_afresh() {
        let project = tempfile::tempdir().unwrap();
        let first = RunDir::create(project.path(), "run", true, false).unwrap();
        first.record(&epoch(0), &["top1"]).unwrap();
        first.record(&epoch(1), &["top1"]).unwrap();
        first.record_steps(1, &["box"], &[StepRecord::default()]).unwrap();
        std::fs::write(first.weights("last"), b"weights").unwrap();

        let resumed = RunDir::create(project.path(), "run", true, true).unwrap();
        assert_eq!(resumed.records().len(), 2, "resuming keeps the records");

        let fresh = RunDir::create(project.path(), "run", true, false).unwrap();
        assert_eq!(fresh.path, first.path);
        assert!(fresh.records().is_empty(), "the previous run's epochs are gone");
        assert!(!fresh.path.join("steps.csv").exists() && !fresh.path.join("results.csv").exists());
        fresh.record(&epoch(0), &["top1"]).unwrap();
        let csv = std::fs::read_to_string(fresh.path.join("results.csv")).unwrap();
        assert_eq!(csv.lines().count(), 2, "a header and one row:\n{csv}");
    }
}
