//! The resolved manifest a run keeps beside its records (`RUN/manifest.toml`): every setting as
//! the run used it — the `extends` chain merged, the command line's overrides applied, defaults
//! filled in, the dataset and weights as absolute paths — so the file alone trains the run again
//! (`libreyolo-run RUN/manifest.toml`), and `resume=true` restores the run's settings from it as
//! LibreYOLO restores a resumed run's arguments.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::LoadedManifest;

/// The first line of a resolved manifest. Runs made before it kept the manifest file as given
/// (an `extends` it names does not resolve from the run directory), so resume looks for it.
const MARK: &str = "# libreyolo-run: the resolved manifest of a run";

impl LoadedManifest {
    /// This manifest resolved, as TOML (see the module's doc), for the run in `run_dir`: its
    /// `project` and `name` are that folder's (`yolo9t2` when `yolo9t` was taken), so the file
    /// names the run it belongs to.
    pub fn resolved_text(&self, run_dir: &Path) -> anyhow::Result<String> {
        let mut m = self.manifest.clone();
        // What the run was, not how it was started: training this file again starts afresh.
        m.run.resume = false;
        if let (Some(project), Some(name)) = (run_dir.parent(), run_dir.file_name()) {
            m.run.project = absolute(project);
            m.run.name = name.to_string_lossy().into_owned();
        }
        m.data.dataset = m.data.dataset.as_deref().map(absolute);
        m.model.weights = m.model.weights.as_deref().map(absolute);
        let given: Vec<String> = self.source.overrides.iter().map(|o| o.arg.replace(['\n', '\r'], " ")).collect();
        let from = match given.is_empty() {
            true => self.source.path.display().to_string(),
            false => format!("{} with {}", self.source.path.display(), given.join(" ")),
        };
        let body = toml::to_string_pretty(&m).context("writing the resolved manifest (a path that is not UTF-8?)")?;
        Ok(format!("{MARK}\n# from {from}\n\n{body}"))
    }
}

/// Whether `text` is a resolved manifest.
pub fn is_resolved(text: &str) -> bool {
    text.starts_with(MARK)
}

/// `p` from the working directory, without resolving links (a dataset given as `data=rel.yaml`
/// is found again from anywhere).
fn absolute(p: &Path) -> PathBuf {
    super::normalize(&std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::manifest::load;

    /// Every shipped manifest, resolved, loads back to the same settings, layers and stages.
    #[test]
    fn a_resolved_manifest_loads_back_to_the_same_run() {
        let dir = tempfile::tempdir().unwrap();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
        let mut checked = 0;
        for entry in std::fs::read_dir(&shipped).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("-base.toml")) {
                continue;
            }
            let overrides = ["data=some/../some/data.yaml", "epochs=7", "stage.ema.capture=false", "resume=true"].map(String::from);
            let loaded = load(&path, &overrides).unwrap_or_else(|e| panic!("{}: {}", path.display(), e.render(false)));
            let text = loaded.resolved_text(Path::new("runs/where/it2")).unwrap();
            assert!(is_resolved(&text) && text.contains("with data=some/../some/data.yaml epochs=7 stage.ema.capture=false resume=true"), "{text}");
            let saved = dir.path().join("manifest.toml");
            std::fs::write(&saved, &text).unwrap();
            let again = load(&saved, &[]).unwrap_or_else(|e| panic!("{} resolved:\n{}\n{text}", path.display(), e.render(false)));
            let mut expected = loaded.manifest.clone();
            expected.data.dataset = Some(std::path::absolute("some/data.yaml").unwrap());
            expected.model.weights = expected.model.weights.as_deref().map(absolute);
            expected.run.resume = false;
            (expected.run.project, expected.run.name) = (absolute(Path::new("runs/where")), "it2".into());
            assert_eq!(format!("{:?}", again.manifest), format!("{expected:?}"), "{}", path.display());
            assert_eq!(again.manifest.run.epochs, 7);
            checked += 1;
        }
        assert!(checked >= 10, "{checked} manifests");
    }

    #[test]
    fn a_manifest_file_as_written_is_not_resolved() {
        let yolo9t = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/yolo9t.toml")).unwrap();
        assert!(!is_resolved(&yolo9t));
    }
}
