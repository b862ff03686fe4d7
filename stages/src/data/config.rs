//! Dataset YAML in the LibreYOLO / Ultralytics form:
//!
//! ```yaml
//! path: ../datasets/coco128   # root; relative paths are next to the yaml; absent: the yaml's folder
//! train: images/train2017     # folder, .txt list of images, or a list of either; relative to path
//! val: images/train2017
//! test:                       # optional
//! nc: 80                      # optional when names are given
//! names: {0: person, 1: bicycle}   # or a list
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read dataset `{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("dataset `{path}` is not valid YAML{}: {message}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Yaml { path: PathBuf, line: Option<usize>, message: String },
    #[error("dataset `{path}`: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Deserialize)]
struct RawConfig {
    path: Option<String>,
    train: Option<Split>,
    val: Option<Split>,
    test: Option<Split>,
    nc: Option<usize>,
    names: Option<Names>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Split {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Names {
    List(Vec<String>),
    Map(BTreeMap<usize, String>),
}

/// A resolved dataset description.
#[derive(Debug, Clone)]
pub struct DatasetConfig {
    pub yaml: PathBuf,
    pub root: PathBuf,
    /// Each split as folders and/or `.txt` image lists.
    pub train: Vec<PathBuf>,
    pub val: Vec<PathBuf>,
    pub test: Vec<PathBuf>,
    pub names: Vec<String>,
}

impl DatasetConfig {
    pub fn nc(&self) -> usize {
        self.names.len()
    }

    pub fn load(yaml: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(yaml).map_err(|source| ConfigError::Io { path: yaml.to_path_buf(), source })?;
        let raw: RawConfig = serde_yaml_ng::from_str(&text).map_err(|e| ConfigError::Yaml {
            path: yaml.to_path_buf(),
            line: e.location().map(|l| l.line()),
            message: e.to_string(),
        })?;
        let invalid = |message: String| ConfigError::Invalid { path: yaml.to_path_buf(), message };
        let here = yaml.parent().unwrap_or(Path::new("."));
        let root = match raw.path.as_deref() {
            None | Some("") => here.to_path_buf(),
            Some(p) if Path::new(p).is_absolute() => PathBuf::from(p),
            Some(p) => here.join(p),
        };
        let split = |s: Option<Split>| -> Vec<PathBuf> {
            let items = match s {
                None => vec![],
                Some(Split::One(p)) => vec![p],
                Some(Split::Many(v)) => v,
            };
            items.into_iter().filter(|p| !p.is_empty()).map(|p| if Path::new(&p).is_absolute() { PathBuf::from(p) } else { root.join(p) }).collect()
        };
        let names: Vec<String> = match raw.names {
            Some(Names::List(v)) => v,
            Some(Names::Map(m)) => {
                let n = m.keys().next_back().map(|k| k + 1).unwrap_or(0);
                if m.len() != n {
                    return Err(invalid(format!("`names` must number classes 0..{} without gaps", n.saturating_sub(1))));
                }
                m.into_values().collect()
            }
            None => match raw.nc {
                Some(nc) => (0..nc).map(|i| format!("class{i}")).collect(),
                None => return Err(invalid("give `names` (a list or a map) or `nc`".into())),
            },
        };
        if let Some(nc) = raw.nc
            && nc != names.len()
        {
            return Err(invalid(format!("`nc: {nc}` but `names` lists {} classes", names.len())));
        }
        if names.is_empty() {
            return Err(invalid("the dataset has no classes".into()));
        }
        let train = split(raw.train);
        if train.is_empty() {
            return Err(invalid("`train` is missing".into()));
        }
        let (val, test) = (split(raw.val), split(raw.test));
        Ok(Self { yaml: yaml.to_path_buf(), root, train, val, test, names })
    }
}
