//! Action lists for the commands that play an environment: one action per line
//! (`--actions`), one JSON string per line (`--actions-jsonl`, for actions with newlines: a
//! pretty-printed tool call, a code answer, a multi-line plan), or typed interactively, where a
//! multi-line action goes between a `<<<` line and a `>>>` line.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::read_text;

/// A line holding only this starts a multi-line action in interactive mode.
pub const BLOCK_START: &str = "<<<";
/// A line holding only this ends it.
pub const BLOCK_END: &str = ">>>";

/// How a list of actions is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One action per line.
    Lines,
    /// One JSON string per line; blank lines are skipped.
    JsonLines,
}

impl Format {
    fn expected(self) -> &'static str {
        match self {
            Format::Lines => "one action per line",
            Format::JsonLines => "one JSON string per line",
        }
    }
}

/// Reads the actions in `format` from `source`: a file, or `-` for standard input.
pub fn read_actions(source: &str, format: Format) -> anyhow::Result<Vec<String>> {
    let (text, origin) = if source == "-" {
        (read_stdin()?, "standard input".to_owned())
    } else {
        let what = match format {
            Format::Lines => "actions file",
            Format::JsonLines => "JSONL actions file",
        };
        (
            read_text(Path::new(source), what)?,
            format!("{what} '{source}'"),
        )
    };
    if text.trim().is_empty() {
        if source == "-" {
            bail!(
                "no actions on standard input (expected {})",
                format.expected()
            );
        }
        bail!("{origin} is empty (expected {})", format.expected());
    }
    match format {
        Format::Lines => Ok(text.lines().map(str::to_owned).collect()),
        Format::JsonLines => parse_json_lines(&text, &origin),
    }
}

/// One JSON string per line; an error names the line.
pub fn parse_json_lines(text: &str, origin: &str) -> anyhow::Result<Vec<String>> {
    let mut actions = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(Value::String(action)) => actions.push(action),
            Ok(other) => bail!(
                "{origin}, line {number}: expected a JSON string (one action, e.g. \
                 \"\\\\boxed{{1}}\"), got {}",
                kind(&other)
            ),
            Err(err) => bail!(
                "{origin}, line {number}: not valid JSON ({err}); each line must be one JSON \
                 string, with newlines inside an action written as \\n"
            ),
        }
    }
    Ok(actions)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn read_stdin() -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .context("reading actions from standard input")?;
    String::from_utf8(bytes).map_err(|err| {
        anyhow::anyhow!(
            "actions on standard input are not valid UTF-8 text (invalid byte at offset {})",
            err.utf8_error().valid_up_to()
        )
    })
}

/// Actions typed on standard input: one per line, or the lines between a `<<<` line and a
/// `>>>` line as one action (joined with `\n`). On a terminal each is prompted for, with the
/// convention in the prompt.
pub struct InteractiveActions {
    prompt: bool,
    stdin: std::io::StdinLock<'static>,
    /// Lines read so far, for error messages.
    line: usize,
}

impl Default for InteractiveActions {
    fn default() -> Self {
        Self::new()
    }
}

impl InteractiveActions {
    /// Reads from standard input; on a terminal, first says how to type actions.
    pub fn new() -> Self {
        let prompt = std::io::stdin().is_terminal();
        if prompt {
            eprintln!(
                "Type one action per line; for an action of several lines, type {BLOCK_START} \
                 alone on a line, then its lines, then {BLOCK_END} alone on a line. End with \
                 Ctrl-D."
            );
        }
        InteractiveActions {
            prompt,
            stdin: std::io::stdin().lock(),
            line: 0,
        }
    }

    fn show(&self, prompt: &str) {
        if self.prompt {
            eprint!("{prompt}");
            let _ = std::io::stderr().flush();
        }
    }

    fn read_line(&mut self) -> anyhow::Result<Option<String>> {
        let mut line = String::new();
        let read = self
            .stdin
            .read_line(&mut line)
            .context("reading an action from standard input")?;
        if read == 0 {
            return Ok(None);
        }
        self.line += 1;
        Ok(Some(line.trim_end_matches(['\n', '\r']).to_owned()))
    }

    fn next_action(&mut self) -> anyhow::Result<Option<String>> {
        self.show(&format!("action ({BLOCK_START} for several lines)> "));
        let Some(line) = self.read_line()? else {
            return Ok(None);
        };
        if line.trim() != BLOCK_START {
            return Ok(Some(line));
        }
        let started = self.line;
        let mut lines = Vec::new();
        loop {
            self.show(&format!("  ... ({BLOCK_END} ends the action)> "));
            match self.read_line()? {
                Some(line) if line.trim() == BLOCK_END => return Ok(Some(lines.join("\n"))),
                Some(line) => lines.push(line),
                None => bail!(
                    "standard input ended inside the multi-line action started with \
                     {BLOCK_START} on line {started} (end it with a line holding only {BLOCK_END})"
                ),
            }
        }
    }
}

impl Iterator for InteractiveActions {
    type Item = anyhow::Result<String>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_action().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_hold_newlines_and_name_bad_lines() {
        let text =
            "\"\\\\boxed{1}\"\n\n\"<tool_call>{\\n  \\\"name\\\": \\\"f\\\"\\n}</tool_call>\"\n";
        assert_eq!(
            parse_json_lines(text, "f").unwrap(),
            vec![
                "\\boxed{1}".to_owned(),
                "<tool_call>{\n  \"name\": \"f\"\n}</tool_call>".to_owned()
            ]
        );
        let err = parse_json_lines("\"a\"\n\\boxed{1}\n", "file 'x'").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("file 'x', line 2: not valid JSON ("),
            "{err}"
        );
        let err = parse_json_lines("\"a\"\n\"b\"\n{\"action\": 1}\n", "f").unwrap_err();
        assert_eq!(
            err.to_string(),
            "f, line 3: expected a JSON string (one action, e.g. \"\\\\boxed{1}\"), got an object"
        );
    }
}
