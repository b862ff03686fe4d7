//! The manifest text as written plus the command-line overrides applied to it, so any error
//! found later (schema, validation, the step DAG) can point at the line or argument it came from.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toml_edit::{Item, Table, Value};

use super::diagnostic::{Diagnostic, Location};
use super::keypath::{KeyPath, Segment};
use super::overrides::Override;

/// Which part of a `key = value` line to underline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Key,
    Value,
}

pub struct ManifestSource {
    pub path: PathBuf,
    pub text: Arc<str>,
    doc: toml_edit::Document<String>,
    pub overrides: Vec<Override>,
    /// The manifest this one `extends`: a key written only there is reported there.
    pub base: Option<Box<ManifestSource>>,
}

impl ManifestSource {
    /// Parses the text; a syntax error becomes a diagnostic at its position.
    pub fn parse(path: &Path, text: String) -> Result<Self, Diagnostic> {
        let text_arc: Arc<str> = Arc::from(text.as_str());
        let doc = toml_edit::Document::parse(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            Diagnostic::new(format!("invalid TOML: {}", e.message().trim()), Location::Source { path: path.to_path_buf(), text: text_arc.clone(), span })
        })?;
        Ok(Self { path: path.to_path_buf(), text: text_arc, doc, overrides: vec![], base: None })
    }

    pub fn document(&self) -> &toml_edit::Document<String> {
        &self.doc
    }

    /// The override that set `path` (or a table above it), if any.
    pub fn override_for(&self, path: &KeyPath) -> Option<&Override> {
        self.overrides.iter().rev().find(|o| path.starts_with(&o.path))
    }

    /// An error about the setting at `path`: points at the command-line argument that set it,
    /// else at its line in the file, else at its line in the base manifest, else at the nearest
    /// enclosing table, else at the file.
    pub fn error_at(&self, path: &KeyPath, part: Part, title: impl Into<String>) -> Diagnostic {
        if let Some(o) = self.override_for(path) {
            let span = match part {
                Part::Key => o.key_span(),
                Part::Value => o.value_span(),
            };
            return Diagnostic::new(title, Location::CommandLine { arg: o.arg.clone(), span });
        }
        if locate(self.doc.as_table(), &path.0, part).is_none()
            && let Some(base) = self.base.as_ref().filter(|b| b.writes(path))
        {
            return base.error_at(path, part, title);
        }
        match self.span_of(path, part) {
            Some(span) => Diagnostic::new(title, Location::Source { path: self.path.clone(), text: self.text.clone(), span }),
            None => Diagnostic::new(title, Location::File { path: self.path.clone() }),
        }
    }

    /// Whether `path` is written in this file or a base of it.
    fn writes(&self, path: &KeyPath) -> bool {
        locate(self.doc.as_table(), &path.0, Part::Key).is_some() || self.base.as_ref().is_some_and(|b| b.writes(path))
    }

    /// The span of `path` in the file, or of its nearest ancestor that is written there.
    pub fn span_of(&self, path: &KeyPath, part: Part) -> Option<Range<usize>> {
        let mut path = path.clone();
        let mut part = part;
        loop {
            if let Some(span) = locate(self.doc.as_table(), &path.0, part) {
                return Some(span);
            }
            path = path.parent()?;
            part = Part::Key;
        }
    }
}

/// A node of the parsed document that may carry a span.
enum Node<'a> {
    Table(&'a Table),
    Item(&'a Item),
    Value(&'a Value),
}

fn locate(root: &Table, path: &[Segment], part: Part) -> Option<Range<usize>> {
    let mut node = Node::Table(root);
    let mut key_span = None;
    for seg in path {
        key_span = None;
        node = match (seg, node) {
            (Segment::Key(k), Node::Table(t)) => {
                key_span = t.key(k).and_then(|k| k.span());
                Node::Item(t.get(k)?)
            }
            (Segment::Key(k), Node::Item(item)) => match item {
                Item::Table(t) => {
                    key_span = t.key(k).and_then(|k| k.span());
                    Node::Item(t.get(k)?)
                }
                Item::Value(Value::InlineTable(t)) => {
                    key_span = t.key(k).and_then(|k| k.span());
                    Node::Value(t.get(k)?)
                }
                _ => return None,
            },
            (Segment::Key(k), Node::Value(Value::InlineTable(t))) => {
                key_span = t.key(k).and_then(|k| k.span());
                Node::Value(t.get(k)?)
            }
            (Segment::Index(i), Node::Item(Item::ArrayOfTables(a))) => Node::Table(a.get(*i)?),
            (Segment::Index(i), Node::Item(Item::Value(Value::Array(a)))) => Node::Value(a.get(*i)?),
            (Segment::Index(i), Node::Value(Value::Array(a))) => Node::Value(a.get(*i)?),
            _ => return None,
        };
    }
    let node_span = match node {
        Node::Table(t) => t.span(),
        Node::Item(Item::Table(t)) => t.span(),
        Node::Item(Item::Value(v)) | Node::Value(v) => v.span(),
        Node::Item(Item::ArrayOfTables(a)) => a.span(),
        Node::Item(Item::None) => None,
    };
    match part {
        Part::Key => key_span.or(node_span),
        Part::Value => node_span.or(key_span),
    }
}
