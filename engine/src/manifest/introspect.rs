//! The field names of a serde struct, read from its `Deserialize` impl.
//!
//! The command line resolves `lr0=0.02` to `optim.lr0` and suggests `epochs` for `epoch`; both
//! need each section's keys. Reading them from serde keeps them in step with the schema.

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// Field names of `T`, which must deserialize as a struct.
pub fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields = None;
    let _ = T::deserialize(FieldRecorder { fields: &mut fields });
    fields.unwrap_or(&[])
}

struct FieldRecorder<'a> {
    fields: &'a mut Option<&'static [&'static str]>,
}

#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names recorded")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for FieldRecorder<'_> {
    type Error = Stop;

    fn deserialize_struct<V: Visitor<'de>>(self, _name: &'static str, fields: &'static [&'static str], _visitor: V) -> Result<V::Value, Stop> {
        *self.fields = Some(fields);
        Err(Stop)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Example {
        alpha: u32,
        #[serde(rename = "beta_key")]
        beta: String,
    }

    #[test]
    fn reads_the_serialized_names() {
        assert_eq!(fields_of::<Example>(), &["alpha", "beta_key"]);
    }
}
