//! Manifest errors rendered like cargo's: the file, line and key, the offending text
//! underlined, and a "did you mean" when a near name exists.

use std::fmt;
use std::io::IsTerminal;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use annotate_snippets::renderer::DecorStyle;
use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};

/// Where an error points.
#[derive(Debug, Clone)]
pub enum Location {
    /// A span of a manifest file.
    Source { path: PathBuf, text: Arc<str>, span: Range<usize> },
    /// A `key=value` argument; the span is within the argument.
    CommandLine { arg: String, span: Range<usize> },
    /// A file as a whole (unreadable, or the error has no narrower place).
    File { path: PathBuf },
}

/// One manifest error: a title, where it is, and optional help and notes.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    pub title: String,
    pub location: Location,
    /// Text under the underline.
    pub label: Option<String>,
    /// Other places worth showing (e.g. the first definition of a duplicate), same file.
    pub related: Vec<(Range<usize>, String)>,
    pub help: Option<String>,
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn new(title: impl Into<String>, location: Location) -> Self {
        Self { title: title.into(), location, label: None, related: vec![], help: None, notes: vec![] }
    }

    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    pub fn with_help(mut self, help: Option<String>) -> Self {
        self.help = help;
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    pub fn with_related(mut self, span: Option<Range<usize>>, label: impl Into<String>) -> Self {
        if let Some(span) = span {
            self.related.push((span, label.into()));
        }
        self
    }

    /// The rendered report; colours only when asked for.
    pub fn render(&self, styled: bool) -> String {
        let renderer = if styled { Renderer::styled() } else { Renderer::plain() }.decor_style(DecorStyle::Ascii);
        let label = self.label.as_deref().unwrap_or("");
        let mut group = Group::with_title(Level::ERROR.primary_title(self.title.as_str()));
        match &self.location {
            Location::Source { path, text, span } => {
                let mut snippet =
                    Snippet::source(&**text).path(path.display().to_string()).fold(true).annotation(AnnotationKind::Primary.span(span.clone()).label(label));
                for (span, label) in &self.related {
                    snippet = snippet.annotation(AnnotationKind::Context.span(span.clone()).label(label.as_str()));
                }
                group = group.element(snippet);
            }
            Location::CommandLine { arg, span } => {
                group = group.element(
                    Snippet::source(arg.as_str())
                        .path("command line")
                        .line_numbering(false)
                        .annotation(AnnotationKind::Primary.span(span.clone()).label(label)),
                );
            }
            Location::File { path } => {
                group = group.element(Level::NOTE.message(format!("in {}", path.display())));
            }
        }
        for note in &self.notes {
            group = group.element(Level::NOTE.message(note.as_str()));
        }
        if let Some(help) = &self.help {
            group = group.element(Level::HELP.message(help.as_str()));
        }
        let report: [Group; 1] = [group];
        renderer.render(&report).to_string()
    }

    /// Renders for stderr, with colour when stderr is a terminal.
    pub fn render_for_stderr(&self) -> String {
        self.render(std::io::stderr().is_terminal())
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(false))
    }
}

impl std::error::Error for Diagnostic {}

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word_lc = word.to_ascii_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let c_lc = candidate.to_ascii_lowercase();
        let mut distance = strsim::damerau_levenshtein(&word_lc, &c_lc);
        let close = distance <= (word.len() / 3).max(1) || (word.len() >= 3 && (c_lc.starts_with(&word_lc) || word_lc.starts_with(&c_lc)));
        if !close {
            continue;
        }
        if c_lc.starts_with(&word_lc) {
            distance = distance.min(1);
        }
        if best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// `help: did you mean ...?` text, if there is a near candidate.
pub fn suggestion<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    did_you_mean(word, candidates).map(|c| format!("did you mean `{c}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        let keys = ["epochs", "batch", "imgsz", "device"];
        assert_eq!(did_you_mean("epoch", keys), Some("epochs"));
        assert_eq!(did_you_mean("imgsize", keys), Some("imgsz"));
        assert_eq!(did_you_mean("bacth", keys), Some("batch"));
        assert_eq!(did_you_mean("learning_rate", keys), None);
    }

    #[test]
    fn renders_file_line_and_help() {
        let text: Arc<str> = Arc::from("[run]\nepoch = 3\n");
        let d = Diagnostic::new("unknown key `epoch` in [run]", Location::Source { path: "m.toml".into(), text, span: 6..11 })
            .with_label("unknown key")
            .with_help(suggestion("epoch", ["epochs"]));
        let out = d.render(false);
        assert!(out.contains("error: unknown key `epoch` in [run]"), "{out}");
        assert!(out.contains("m.toml:2:1"), "{out}");
        assert!(out.contains("did you mean `epochs`?"), "{out}");
    }
}
