//! A path to a setting inside a manifest: `run.epochs`, `stage[2].inputs[0]`.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    Key(String),
    Index(usize),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KeyPath(pub Vec<Segment>);

impl KeyPath {
    pub fn root() -> Self {
        Self(vec![])
    }

    /// `run.epochs` style paths (no indices).
    pub fn dotted(path: &str) -> Self {
        Self(path.split('.').map(|k| Segment::Key(k.to_string())).collect())
    }

    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.0.push(Segment::Key(key.into()));
        self
    }

    pub fn index(mut self, index: usize) -> Self {
        self.0.push(Segment::Index(index));
        self
    }

    pub fn stage(index: usize) -> Self {
        Self::root().key("stage").index(index)
    }

    pub fn parent(&self) -> Option<KeyPath> {
        (!self.0.is_empty()).then(|| KeyPath(self.0[..self.0.len() - 1].to_vec()))
    }

    pub fn last_key(&self) -> Option<&str> {
        match self.0.last() {
            Some(Segment::Key(k)) => Some(k),
            _ => None,
        }
    }

    pub fn starts_with(&self, other: &KeyPath) -> bool {
        self.0.starts_with(&other.0)
    }

    /// How a table header for this path reads: `[run]`, `[[stage]] #3`.
    pub fn table_name(&self) -> String {
        match self.0.as_slice() {
            [] => "the top level".into(),
            [Segment::Key(k), Segment::Index(i), ..] if k == "stage" => format!("[[stage]] #{}", i + 1),
            _ => format!("[{self}]"),
        }
    }

    pub(crate) fn from_serde(path: &serde_path_to_error::Path) -> Self {
        use serde_path_to_error::Segment as S;
        Self(
            path.iter()
                .filter_map(|seg| match seg {
                    S::Map { key } => Some(Segment::Key(key.clone())),
                    S::Seq { index } => Some(Segment::Index(*index)),
                    S::Enum { .. } | S::Unknown => None,
                })
                .collect(),
        )
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Key(k) if i == 0 => write!(f, "{k}")?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}
