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
//!
//! or, for classification, an ImageFolder directory as LibreYOLO's and torchvision's
//! (`DIR/train/CLASS/*.jpg`, `DIR/val/CLASS/*.jpg`; the classes are `train`'s sub-folders in
//! sorted order, as `torchvision.datasets.ImageFolder` numbers them).

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

/// How a dataset's images carry their labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A YOLO dataset YAML: a `.txt` of boxes beside each image (detection).
    Yolo,
    /// An ImageFolder directory: an image's class is its folder (classification).
    Folder,
}

/// A resolved dataset description.
#[derive(Debug, Clone)]
pub struct DatasetConfig {
    /// The dataset YAML, or the ImageFolder directory.
    pub yaml: PathBuf,
    pub layout: Layout,
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

    /// A dataset YAML, or an ImageFolder directory.
    pub fn load(yaml: &Path) -> Result<Self, ConfigError> {
        if yaml.is_dir() {
            return Self::folder(yaml);
        }
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
        Ok(Self { yaml: yaml.to_path_buf(), layout: Layout::Yolo, root, train, val, test, names })
    }

    /// An ImageFolder directory: `train/` (required) and `val/` (else `test/`), one sub-folder
    /// per class; the classes are `train/`'s sub-folders, sorted. A split folder given for the
    /// root (`DIR/train`) means its parent, as LibreYOLO reads it.
    pub fn folder(dir: &Path) -> Result<Self, ConfigError> {
        if let Some(parent) = dir.parent()
            && dir.file_name().is_some_and(|n| ["train", "val", "test"].iter().any(|s| n == *s))
            && parent.join("train").is_dir()
        {
            return Self::folder(parent);
        }
        let invalid = |message: String| ConfigError::Invalid { path: dir.to_path_buf(), message };
        let train = dir.join("train");
        if !train.is_dir() {
            return Err(invalid("an ImageFolder dataset needs a `train/` folder with one sub-folder per class (train/CLASS/*.jpg)".into()));
        }
        let names = class_folders(&train).map_err(|source| ConfigError::Io { path: train.clone(), source })?;
        if names.is_empty() {
            return Err(invalid("`train/` has no class sub-folders (expected train/CLASS/*.jpg)".into()));
        }
        let val = ["val", "test"].iter().map(|s| dir.join(s)).find(|p| p.is_dir());
        let test = dir.join("test");
        Ok(Self {
            yaml: dir.to_path_buf(),
            layout: Layout::Folder,
            root: dir.to_path_buf(),
            train: vec![train],
            val: val.into_iter().collect(),
            test: if test.is_dir() { vec![test] } else { vec![] },
            names,
        })
    }
}

/// The sub-folder names of `dir`, sorted (hidden ones left out).
fn class_folders(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = vec![];
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() && !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}
