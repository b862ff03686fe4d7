//! Manifests: loading a TOML file, applying `key=value` overrides, checking every setting,
//! and reporting the first problem with its file, line and key.

mod diagnostic;
mod introspect;
mod keypath;
mod overrides;
mod resolved;
mod schema;
mod source;
mod validate;
mod values;

use std::path::{Component, Path, PathBuf};

pub use diagnostic::{Diagnostic, Location, did_you_mean, suggestion};
pub use introspect::fields_of;
pub use keypath::{KeyPath, Segment};
pub use overrides::Override;
pub use resolved::is_resolved;
pub use schema::*;
pub use source::{ManifestSource, Part};
pub use values::{AmpDtype, CacheMode, CaptureMode, CompileMode, DeviceRequest, ImgSize, LabelRowsSetting, Optimizer, Scheduler, WeightGradientKernel};

/// A manifest that parsed, passed every check, and remembers where each setting came from.
pub struct LoadedManifest {
    pub manifest: Manifest,
    pub source: ManifestSource,
}

/// Reads `path`, applies `overrides` (`key=value`), and checks the result.
pub fn load(path: &Path, overrides: &[String]) -> Result<LoadedManifest, Diagnostic> {
    let (mut source, mut table) = read(path, &mut vec![])?;

    let stage_names = stage_names(&table);
    for arg in overrides {
        let o = overrides::parse(arg, &stage_names)?;
        overrides::apply(&mut table, &o);
        source.overrides.push(o);
    }

    let mut manifest = deserialize(&mut table, &mut source)?;
    validate::settings(&manifest, &source)?;
    resolve_paths(&mut manifest, &source);
    Ok(LoadedManifest { manifest, source })
}

/// The manifest at `path` as a table, with the manifest it `extends` (a path relative to its
/// folder) merged under it: its tables merged key by key, anything else (values, arrays,
/// `[[stage]]`) replaced. `chain`: the files being read, to refuse a cycle.
fn read(path: &Path, chain: &mut Vec<PathBuf>) -> Result<(ManifestSource, toml::Table), Diagnostic> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Diagnostic::new(format!("cannot read manifest `{}`: {e}", path.display()), Location::File { path: path.to_path_buf() }))?;
    let mut source = ManifestSource::parse(path, text)?;
    let mut table: toml::Table =
        toml::from_str(&source.text).map_err(|e| source.error_at(&KeyPath::root(), Part::Key, format!("invalid TOML: {}", e.message().trim())))?;
    chain.push(normalize(path));
    let Some(extends) = table.remove("extends") else { return Ok((source, table)) };
    let at = KeyPath::root().key("extends");
    let Some(name) = extends.as_str() else {
        return Err(source.error_at(&at, Part::Value, "`extends` names a manifest file (a string)").with_label("expected a path"));
    };
    let base_path = normalize(&path.parent().unwrap_or(Path::new(".")).join(name));
    if chain.contains(&base_path) {
        return Err(source.error_at(&at, Part::Value, format!("`{name}` extends a manifest that extends this one")).with_label("a cycle"));
    }
    if !base_path.is_file() {
        return Err(source.error_at(&at, Part::Value, format!("the base manifest `{}` does not exist", base_path.display())).with_label("not found"));
    }
    let (base_source, mut merged) = read(&base_path, chain)?;
    merge(&mut merged, table);
    source.base = Some(Box::new(base_source));
    Ok((source, merged))
}

/// `over` written onto `under`: tables key by key, anything else replaced.
fn merge(under: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (under.get_mut(&key), value) {
            (Some(toml::Value::Table(u)), toml::Value::Table(o)) => merge(u, o),
            (_, value) => {
                under.insert(key, value);
            }
        }
    }
}

fn stage_names(table: &toml::Table) -> Vec<String> {
    let stages = table.get("stage").and_then(|s| s.as_array());
    stages.map(|a| a.iter().map(|s| s.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_string()).collect()).unwrap_or_default()
}

/// Deserializes the manifest; an override that failed only because it was read as a number or
/// bool where the schema wants a string (`name=2024`) is retried as a string.
fn deserialize(table: &mut toml::Table, source: &mut ManifestSource) -> Result<Manifest, Diagnostic> {
    loop {
        let value = toml::Value::Table(table.clone());
        let err = match serde_path_to_error::deserialize::<_, Manifest>(value) {
            Ok(m) => return Ok(m),
            Err(err) => err,
        };
        let path = KeyPath::from_serde(err.path());
        let message = err.inner().message().to_string();
        let retry = source.overrides.iter().rposition(|o| o.path == path && !o.raw_string);
        if let (Some(i), true) = (retry, message.contains("expected a string")) {
            let o = &mut source.overrides[i];
            o.value = toml::Value::String(o.raw_value().to_string());
            o.raw_string = true;
            overrides::apply(table, o);
            continue;
        }
        return Err(schema_error(source, path, &message));
    }
}

/// Turns a serde message into a diagnostic that names the key and suggests a fix.
fn schema_error(source: &ManifestSource, path: KeyPath, message: &str) -> Diagnostic {
    let quoted = backticked(message);
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let field = quoted.first().cloned().unwrap_or_default();
        let expected: Vec<&str> = quoted.iter().skip(1).map(String::as_str).collect();
        let table = if path.last_key() == Some(field.as_str()) { path.parent().unwrap_or_default() } else { path };
        let key_path = table.clone().key(field.clone());
        let title = format!("unknown key `{field}` in {}", table.table_name());
        let mut d = source.error_at(&key_path, Part::Key, title).with_label("unknown key");
        d = d.with_help(suggestion(&field, expected.iter().copied()));
        if d.help.is_none() {
            d = d.with_note(if rest.contains("there are no fields") {
                "this table takes no keys".to_string()
            } else {
                format!("valid keys: {}", expected.join(", "))
            });
        }
        return d;
    }
    if message.starts_with("unknown variant ") {
        let value = quoted.first().cloned().unwrap_or_default();
        let expected: Vec<&str> = quoted.iter().skip(1).map(String::as_str).collect();
        return source
            .error_at(&path, Part::Value, format!("invalid value `{value}` for `{path}`"))
            .with_label(format!("expected one of {}", expected.join(", ")))
            .with_help(suggestion(&value, expected.iter().copied()));
    }
    if message.starts_with("missing field ") {
        let field = quoted.first().cloned().unwrap_or_default();
        let title = format!("missing key `{field}` in {}", path.table_name());
        let help = format!("add `{field} = ...` to {}", path.table_name());
        let mut d = source.error_at(&path, Part::Key, title).with_help(Some(help));
        if path.0.is_empty() {
            d = d.with_label("");
        }
        return d;
    }
    let readable = readable_types(message);
    let (title, label) = match readable.strip_prefix("invalid type: ") {
        Some(rest) => {
            let (found, expected) = rest.split_once(", expected ").unwrap_or((rest, "another type"));
            (format!("wrong type for `{path}`: expected {expected}, found {found}"), format!("expected {expected}"))
        }
        None => (format!("invalid value for `{path}`: {readable}"), readable.clone()),
    };
    source.error_at(&path, Part::Value, title).with_label(label)
}

/// Every `quoted` name in a serde message.
fn backticked(message: &str) -> Vec<String> {
    message.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Rust type names in serde messages, in words.
fn readable_types(message: &str) -> String {
    let mut out = message.to_string();
    for (rust, words) in [
        ("expected u8", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected i32", "expected an integer"),
        ("expected i64", "expected an integer"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected an array"),
        ("expected struct ", "expected a table "),
        ("found sequence", "found an array"),
        ("invalid type: sequence", "invalid type: an array"),
        ("invalid type: map", "invalid type: a table"),
    ] {
        out = out.replace(rust, words);
    }
    out
}

/// Makes file paths of the manifest usable from the current directory: paths written in the
/// file are relative to the file's folder, paths given on the command line to the shell's.
fn resolve_paths(manifest: &mut Manifest, source: &ManifestSource) {
    let base = source.path.parent().unwrap_or(Path::new("."));
    let from_file = |key: &str| source.override_for(&KeyPath::dotted(key)).is_none();
    if let Some(dataset) = &manifest.data.dataset
        && from_file("data.dataset")
    {
        manifest.data.dataset = Some(normalize(&base.join(dataset)));
    }
    if let Some(weights) = &manifest.model.weights
        && from_file("model.weights")
    {
        manifest.model.weights = Some(normalize(&base.join(weights)));
    }
}

/// Removes `.` and `name/..` pairs without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.components().next_back(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    if out.as_os_str().is_empty() { PathBuf::from(".") } else { out }
}
