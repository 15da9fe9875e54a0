//! Relative links from the report directory to files of the run directory.
use std::path::{Component, Path};

/// The path from directory `from` to directory `to` as a `/`-separated prefix ending in `/`
/// (empty when they are the same), from their canonical forms; `None` when either cannot be
/// canonicalised or they share no root (different drives).
pub fn relative_prefix(from: &Path, to: &Path) -> Option<String> {
    let from = from.canonicalize().ok()?;
    let to = to.canonicalize().ok()?;
    let a: Vec<Component> = from.components().collect();
    let b: Vec<Component> = to.components().collect();
    if a.first() != b.first() {
        return None;
    }
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = vec!["..".to_string(); a.len() - common];
    for c in &b[common..] {
        parts.push(c.as_os_str().to_str()?.to_string());
    }
    Some(parts.iter().map(|p| format!("{p}/")).collect())
}

/// Percent-encodes a relative URL path: everything but ASCII letters, digits, `-._~/`.
pub fn encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_climb_out_of_the_report_and_into_the_run() {
        let tmp = std::env::temp_dir().join(format!("spade-links-{}", std::process::id()));
        let run = tmp.join("run a");
        let report = run.join("report");
        let elsewhere = tmp.join("out/deep");
        for d in [&report, &elsewhere] {
            std::fs::create_dir_all(d).unwrap();
        }
        assert_eq!(relative_prefix(&report, &run).as_deref(), Some("../"));
        assert_eq!(relative_prefix(&run, &run).as_deref(), Some(""));
        assert_eq!(
            relative_prefix(&elsewhere, &run).as_deref(),
            Some("../../run a/")
        );
        assert_eq!(relative_prefix(&tmp.join("missing"), &run), None);
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn encoding_keeps_path_characters_and_escapes_the_rest() {
        assert_eq!(
            encode("../run a/trajectories/r00000/env00000-hint-00.jsonl"),
            "../run%20a/trajectories/r00000/env00000-hint-00.jsonl"
        );
        assert_eq!(encode("a#b?c%"), "a%23b%3Fc%25");
        assert_eq!(encode("é"), "%C3%A9");
    }
}
