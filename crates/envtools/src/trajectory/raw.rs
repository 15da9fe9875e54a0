//! JSON read without reinterpreting it: objects as their members in written order, every value
//! as the exact text it was written with. Numbers keep their spelling (a 400-digit integer, `1.0`
//! against `1`), strings their escapes, so comparisons and hashes see the bytes of the file.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The members of a JSON object in the order written, each value as its raw text.
#[derive(Debug)]
pub(crate) struct Members<'a>(pub(crate) Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;

        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: &'de RawValue = map.next_value()?;
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }

        deserializer.deserialize_map(MembersVisitor)
    }
}

/// The members of `text` if it is one JSON object.
pub(crate) fn members(text: &str) -> Option<Vec<(String, &RawValue)>> {
    serde_json::from_str::<Members>(text).ok().map(|m| m.0)
}

/// The elements of `text` if it is one JSON array, each as its raw text.
pub(crate) fn elements(text: &str) -> Option<Vec<&RawValue>> {
    serde_json::from_str::<Vec<&RawValue>>(text).ok()
}

/// Where `part` (a slice of `whole`, as a borrowed `RawValue` is of the text it was read from)
/// lies in `whole`, as a byte range.
fn span(whole: &str, part: &str) -> std::ops::Range<usize> {
    let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
    start..start.saturating_add(part.len())
}

/// `line` (a JSON object) with the values of the top-level members named in `fields` replaced by
/// `with(name)`; members that `with` answers `None` for are left as they are. `None` when `line`
/// is not a JSON object.
pub(crate) fn replace_members(
    line: &str,
    fields: &[&str],
    with: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let members = members(line)?;
    let mut out = String::with_capacity(line.len());
    let mut at = 0;
    for (key, value) in &members {
        if !fields.contains(&key.as_str()) {
            continue;
        }
        let Some(replacement) = with(key) else {
            continue;
        };
        let range = span(line, value.get());
        out.push_str(line.get(at..range.start)?);
        out.push_str(&replacement);
        at = range.end;
    }
    out.push_str(line.get(at..)?);
    Some(out)
}

/// The raw text of top-level member `field` of `line`, if `line` is a JSON object that has it.
pub(crate) fn member<'a>(line: &'a str, field: &str) -> Option<&'a str> {
    members(line)?
        .into_iter()
        .find(|(key, _)| key == field)
        .map(|(_, value)| value.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_keep_order_and_spelling() {
        let text = r#"{"b":1.0,"a":[1, 2],"n":123456789012345678901234567890,"s":"\u00e9"}"#;
        let got: Vec<(String, String)> = members(text)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.get().to_owned()))
            .collect();
        assert_eq!(
            got,
            [
                ("b".to_owned(), "1.0".to_owned()),
                ("a".to_owned(), "[1, 2]".to_owned()),
                ("n".to_owned(), "123456789012345678901234567890".to_owned()),
                ("s".to_owned(), r#""\u00e9""#.to_owned()),
            ]
        );
        assert!(members("[1]").is_none());
        assert!(members("{\"a\":").is_none());
        assert_eq!(
            elements("[1, {\"x\":2}]")
                .unwrap()
                .iter()
                .map(|v| v.get())
                .collect::<Vec<_>>(),
            ["1", "{\"x\":2}"]
        );
    }

    #[test]
    fn replaces_named_members_in_place() {
        let line = r#"{"a":1,"h":"xyz","é":"ü","h2":2}"#;
        let out = replace_members(line, &["h", "h2"], |k| {
            (k == "h").then(|| "\"\"".to_owned())
        });
        assert_eq!(out.as_deref(), Some(r#"{"a":1,"h":"","é":"ü","h2":2}"#));
        assert_eq!(member(line, "é"), Some("\"ü\""));
        assert_eq!(member(line, "zz"), None);
        assert_eq!(replace_members("nope", &["h"], |_| None), None);
    }
}
