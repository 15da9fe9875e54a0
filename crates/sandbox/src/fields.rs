//! A reset's extra fields, kept as the JSON text a caller wrote.
//!
//! `reset(seed=..., **fields)` hands the environment a JSON object that the guest parses with
//! Python's `json.loads`. Parsing it into a `serde_json::Value` on the host first would change
//! what arrives: an integer beyond `u64` would become a float (`2**64` arrives as
//! `1.8446744073709552e19`) and one beyond `f64` (`10**400`) would be refused, where OpenEnv's
//! server passes what `json.loads` gives. So the fields stay text: each value is the caller's
//! own JSON, with only the whitespace outside strings taken out (so a recorded trajectory keeps
//! one line per call), and only the member names are read on the host.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use std::borrow::Borrow;
use std::fmt;

/// A reset's extra fields: a JSON object with its member names, in the caller's order, and
/// each value as the caller wrote it. A name given twice keeps its first place and its last
/// value, as `json.loads` and `serde_json` both do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtraFields {
    /// `(name, value as compact JSON text)` in order, names distinct.
    members: Vec<(String, String)>,
    /// The object as compact JSON text.
    json: String,
}

impl Default for ExtraFields {
    fn default() -> Self {
        ExtraFields {
            members: Vec::new(),
            json: "{}".to_owned(),
        }
    }
}

impl ExtraFields {
    /// Reads a JSON object's text. Anything but an object is an error (its message names
    /// what was found instead).
    pub fn parse(text: &str) -> Result<ExtraFields, serde_json::Error> {
        Ok(ExtraFields::from_raw(object_members(text)?))
    }

    /// Fields from members whose values are JSON text as a parser returned them (for example
    /// `Box<RawValue>`s of a larger message); whitespace outside strings is taken out.
    pub fn from_raw<V: Borrow<RawValue>>(members: impl IntoIterator<Item = (String, V)>) -> Self {
        let mut fields = ExtraFields::default();
        for (name, value) in members {
            fields.insert_text(name, compact(value.borrow().get()));
        }
        fields.render();
        fields
    }

    /// Fields from a parsed JSON object.
    pub fn from_map(map: &serde_json::Map<String, serde_json::Value>) -> Self {
        let mut fields = ExtraFields::default();
        for (name, value) in map {
            fields.insert_text(name.clone(), value.to_string());
        }
        fields.render();
        fields
    }

    /// The object as compact JSON text, as the environment's `reset` receives it.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The member names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(name, _)| name.as_str())
    }

    /// Whether a member is named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.members.iter().any(|(n, _)| n == name)
    }

    /// The JSON text of the member named `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.members
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn insert_text(&mut self, name: String, value: String) {
        match self.members.iter_mut().find(|(n, _)| *n == name) {
            Some(member) => member.1 = value,
            None => self.members.push((name, value)),
        }
    }

    fn render(&mut self) {
        let mut json = String::from("{");
        for (i, (name, value)) in self.members.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            // A `String` always serialises.
            json.push_str(&serde_json::Value::from(name.as_str()).to_string());
            json.push(':');
            json.push_str(value);
        }
        json.push('}');
        self.json = json;
    }
}

/// `text` (valid JSON) without the whitespace outside its strings.
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
    }
    out
}

/// The members of a JSON object's text, in order, each value left as its text (names given twice
/// stay twice). Anything but an object is an error.
pub fn object_members(text: &str) -> Result<Vec<(String, Box<RawValue>)>, serde_json::Error> {
    serde_json::from_str::<Members>(text).map(|members| members.0)
}

/// An object's members with their values left as text.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    members.push((name, map.next_value::<Box<RawValue>>()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// Written as the JSON object itself.
impl Serialize for ExtraFields {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw = RawValue::from_string(self.json.clone()).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// Read from the JSON object itself (only with `serde_json`'s own deserializer, which keeps
/// each value's text).
impl<'de> Deserialize<'de> for ExtraFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let members = Members::deserialize(deserializer).map_err(de::Error::custom)?;
        Ok(ExtraFields::from_raw(members.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_of_any_size_stay_as_written() {
        let big = format!("1{}", "0".repeat(400));
        let fields =
            ExtraFields::parse(&format!("{{\"a\": 18446744073709551617, \"b\": {big}}}")).unwrap();
        assert_eq!(fields.get("a"), Some("18446744073709551617"));
        assert_eq!(fields.get("b"), Some(big.as_str()));
        assert_eq!(
            fields.json(),
            format!("{{\"a\":18446744073709551617,\"b\":{big}}}")
        );
    }

    #[test]
    fn whitespace_goes_outside_strings_only() {
        let fields = ExtraFields::parse(
            "{ \"s\" :\n \"a b\\\" \\\\\" , \"l\": [1,\r\n\t2, {\"k\" : \" \"}]}",
        )
        .unwrap();
        assert_eq!(fields.json(), r#"{"s":"a b\" \\","l":[1,2,{"k":" "}]}"#);
        assert_eq!(fields.names().collect::<Vec<_>>(), ["s", "l"]);
    }

    #[test]
    fn a_name_given_twice_keeps_its_first_place_and_last_value() {
        let fields = ExtraFields::parse(r#"{"a": 1, "b": 2, "a": 3}"#).unwrap();
        assert_eq!(fields.json(), r#"{"a":3,"b":2}"#);
        assert_eq!(fields.len(), 2);
    }

    #[test]
    fn names_are_escaped_and_values_of_a_map_render_as_serde_json_does() {
        let map = serde_json::json!({"quote\"d": "x", "n": 1.5, "t": true});
        let fields = ExtraFields::from_map(map.as_object().unwrap());
        assert_eq!(fields.json(), r#"{"quote\"d":"x","n":1.5,"t":true}"#);
        assert!(fields.contains("quote\"d") && !fields.contains("quote"));
    }

    #[test]
    fn only_an_object_is_fields() {
        for text in ["[1]", "3", "\"x\"", "null", "{\"a\": }"] {
            assert!(ExtraFields::parse(text).is_err(), "{text}");
        }
        let empty = ExtraFields::parse(" { } ").unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.json(), "{}");
    }

    #[test]
    fn serialises_as_the_object_and_reads_back() {
        #[derive(Serialize, Deserialize)]
        struct Line {
            fields: ExtraFields,
        }
        let big = format!("-{}", "9".repeat(30));
        let fields = ExtraFields::parse(&format!("{{\"x\": {big}}}")).unwrap();
        let text = serde_json::to_string(&Line {
            fields: fields.clone(),
        })
        .unwrap();
        assert_eq!(text, format!("{{\"fields\":{{\"x\":{big}}}}}"));
        let back: Line = serde_json::from_str(&text).unwrap();
        assert_eq!(back.fields, fields);
    }
}
