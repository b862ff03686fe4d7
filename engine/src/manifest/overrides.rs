//! `key=value` arguments that override manifest settings.
//!
//! Keys are written as LibreYOLO users write them: a bare setting name (`epochs=100`,
//! `lr0=0.02`), one of LibreYOLO's aliases (`data=`, `cuda_graph=`, `mosaic=`), a dotted path
//! (`capture.threshold=5`), or a stage field (`stage.forward.capture=false`). Values are TOML
//! (`true`, `1e-4`, `[480, 640]`); anything that is not valid TOML is taken as a string.

use std::ops::Range;

use super::diagnostic::{Diagnostic, Location, did_you_mean};
use super::introspect::fields_of;
use super::keypath::KeyPath;
use super::schema::{StageSpec, section_keys, sections};

/// One parsed `key=value` argument, resolved to the setting it changes.
#[derive(Debug, Clone)]
pub struct Override {
    /// The argument as given.
    pub arg: String,
    /// Length of the key part of `arg`.
    key_len: usize,
    pub path: KeyPath,
    pub value: toml::Value,
    /// The value was not valid TOML and was taken as a string.
    pub raw_string: bool,
}

impl Override {
    pub fn key_span(&self) -> Range<usize> {
        0..self.key_len
    }

    pub fn value_span(&self) -> Range<usize> {
        (self.key_len + 1)..self.arg.len().max(self.key_len + 1)
    }

    /// The raw text after `=`.
    pub fn raw_value(&self) -> &str {
        &self.arg[self.key_len + 1..]
    }
}

/// LibreYOLO's spellings that are not a section key themselves.
const ALIASES: &[(&str, &str)] = &[
    ("data", "data.dataset"),
    ("cuda_graph", "capture.enabled"),
    ("compile", "capture.compile"),
    ("amp_dtype", "precision.dtype"),
    ("mosaic", "augment.mosaic_prob"),
    ("mixup", "augment.mixup_prob"),
    ("fliplr", "augment.flip_prob"),
    ("ema_decay", "ema.decay"),
    ("profile_warmup", "profile.warmup"),
    ("profile_steps", "profile.steps"),
    ("profile_then_stop", "profile.then_stop"),
];

/// Parses one argument. `stage_names` are the manifest's stage names, in order.
pub fn parse(arg: &str, stage_names: &[String]) -> Result<Override, Diagnostic> {
    let Some((key, raw)) = arg.split_once('=') else {
        return Err(Diagnostic::new(format!("expected `key=value`, got `{arg}`"), Location::CommandLine { arg: arg.to_string(), span: 0..arg.len() })
            .with_help(Some("settings are overridden as `key=value`, e.g. `epochs=100` or `capture.threshold=5`".into())));
    };
    let key_len = key.len();
    let fail = |title: String, help: Option<String>| {
        Diagnostic::new(title, Location::CommandLine { arg: arg.to_string(), span: 0..key_len.max(1) }).with_label("unknown setting").with_help(help)
    };
    let path = resolve_key(key.trim(), stage_names).map_err(|(title, help)| fail(title, help))?;
    let (value, raw_string) = parse_value(raw);
    Ok(Override { arg: arg.to_string(), key_len, path, value, raw_string })
}

/// TOML when it parses as TOML, else the raw text as a string.
fn parse_value(raw: &str) -> (toml::Value, bool) {
    match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => (t.remove("v").expect("parsed table holds `v`"), false),
        Err(_) => (toml::Value::String(raw.to_string()), true),
    }
}

/// The dotted path a command-line key stands for, or an error title and help.
fn resolve_key(key: &str, stage_names: &[String]) -> Result<KeyPath, (String, Option<String>)> {
    if let Some(rest) = key.strip_prefix("stage.") {
        return resolve_stage_key(key, rest, stage_names);
    }
    if let Some((section, field)) = key.split_once('.') {
        let Some(fields) = section_keys(section) else {
            let help = did_you_mean(section, sections()).map(|s| format!("did you mean `{s}.{field}`?"));
            return Err((format!("unknown section `{section}` in `{key}`"), help));
        };
        if !fields.contains(&field) {
            let help = did_you_mean(field, fields.iter().copied()).map(|f| format!("did you mean `{section}.{f}`?"));
            return Err((format!("unknown setting `{field}` in [{section}]"), help));
        }
        return Ok(KeyPath::dotted(key));
    }
    if let Some((_, path)) = ALIASES.iter().find(|(alias, _)| *alias == key) {
        return Ok(KeyPath::dotted(path));
    }
    // `ema=false`, `profile=true`: a section name switches that section on or off.
    if section_keys(key).is_some_and(|f| f.contains(&"enabled")) {
        return Ok(KeyPath::dotted(&format!("{key}.enabled")));
    }
    let owners: Vec<&str> = sections().filter(|s| section_keys(s).is_some_and(|f| f.contains(&key))).collect();
    match owners.as_slice() {
        [section] => Ok(KeyPath::dotted(&format!("{section}.{key}"))),
        [] => {
            let mut flat: Vec<String> = ALIASES.iter().map(|(a, _)| a.to_string()).collect();
            for s in sections() {
                flat.extend(section_keys(s).unwrap_or_default().iter().map(|f| f.to_string()));
            }
            let help = did_you_mean(key, flat.iter().map(String::as_str)).map(|f| match resolve_key(f, stage_names) {
                Ok(path) if path.to_string() != f => format!("did you mean `{f}` ({path})?"),
                _ => format!("did you mean `{f}`?"),
            });
            Err((format!("unknown setting `{key}`"), help))
        }
        many => {
            let options: Vec<String> = many.iter().map(|s| format!("`{s}.{key}`")).collect();
            Err((format!("`{key}` is ambiguous: it is a setting of several sections"), Some(format!("write one of {}", options.join(", ")))))
        }
    }
}

fn resolve_stage_key(key: &str, rest: &str, stage_names: &[String]) -> Result<KeyPath, (String, Option<String>)> {
    let usage = Some("stage settings are written `stage.NAME.FIELD=value`, e.g. `stage.forward.capture=false`".into());
    let Some((name, field)) = rest.rsplit_once('.') else {
        return Err((format!("incomplete stage setting `{key}`"), usage));
    };
    let Some(index) = stage_names.iter().position(|n| n == name) else {
        let help = did_you_mean(name, stage_names.iter().map(String::as_str)).map(|n| format!("did you mean `stage.{n}.{field}`?")).or(usage);
        return Err((format!("no stage is named `{name}`"), help));
    };
    let fields = fields_of::<StageSpec>();
    if !fields.contains(&field) {
        let help = did_you_mean(field, fields.iter().copied()).map(|f| format!("did you mean `stage.{name}.{f}`?"));
        return Err((format!("unknown stage field `{field}`"), help));
    }
    Ok(KeyPath::stage(index).key(field))
}

/// Writes the override into the manifest table, creating sections as needed.
pub fn apply(table: &mut toml::Table, o: &Override) {
    use super::keypath::Segment;
    match o.path.0.as_slice() {
        // `stage.NAME.FIELD`: the stage was found by name, so the table exists. Nothing after
        // the `=` removes the field (its default: `stage.forward.until=` is no cut).
        [Segment::Key(stage), Segment::Index(i), Segment::Key(field)] if stage == "stage" => {
            if let Some(t) = table.get_mut("stage").and_then(|s| s.as_array_mut()).and_then(|a| a.get_mut(*i)).and_then(|t| t.as_table_mut()) {
                if o.raw_string && o.value.as_str() == Some("") {
                    t.remove(field);
                } else {
                    t.insert(field.clone(), o.value.clone());
                }
            }
        }
        [Segment::Key(section), Segment::Key(field)] => {
            let section = table.entry(section.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            // A section written as a non-table in the file stays as it is: the schema check
            // reports that line.
            if let Some(section) = section.as_table_mut() {
                section.insert(field.clone(), o.value.clone());
            }
        }
        other => unreachable!("override paths are section.key or stage[i].field, got {other:?}"),
    }
}
