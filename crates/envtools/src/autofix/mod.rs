//! Automatic fixes of a generated environment before validation, as the SPADE reference
//! applies them: f-string brace mistakes that make a `SyntaxError`, and standard-library names
//! used but never imported. [`autofix`] is a pure function of the source.
//!
//! Conservative by construction:
//! - brace fixes run only on a source that a PEP 701 tokenizer ([`lexer`]) proves Python
//!   rejects (a lone `}`, an empty field `{}`, a field of plain words `{your answer}`, a `{`
//!   whose field never closes), and only if the fixed source then tokenizes completely;
//!   otherwise nothing is changed. A source that parses therefore never gets a brace fix;
//! - an import is added only for a name of [`imports`]' tables that the module never binds:
//!   every occurrence of it is a use (`name.attr`, `name(...)`, `@name`), none is in an import
//!   statement, and the module has no `import *`, `exec`, `globals` or `builtins`. A name the
//!   sandbox's loader already provides (`random`, `re`, `math`, `collections`, ... and the
//!   `typing` names) is never missing, so its use without import is left as it is.
//!
//! - braces of a string literal given straight to `.format(...)` are doubled only where the
//!   call fails every time it runs ([`format`]): a field naming an argument the call does not
//!   pass, a single `}`, a `{` that never closes.
//!
//! What it does not fix (each would need a guess about meaning, or a parser): a field that is
//! a valid expression but names nothing (`f"\\boxed{N}"` is a `NameError`, not a
//! `SyntaxError`), numbered or auto-numbered `.format` fields with too few arguments (which
//! brace was meant literally is a guess), a format string held in a variable, any other
//! syntax error, and names used in a way that may bind them.

mod format;
pub mod imports;
mod lexer;

use serde::Serialize;

use lexer::{BraceError, LexError, Token};

/// What kind of mistake a fix repaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FixKind {
    /// A literal brace of an f-string doubled (`{` → `{{`, `}` → `}}`).
    FStringBrace,
    /// A brace of a string given to `.format` doubled, where the call fails for certain.
    FormatBrace,
    /// An import added for a standard-library name used but never imported.
    MissingImport,
}

/// One fix applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fix {
    pub kind: FixKind,
    /// The line (1-based) of the mistake in the source as given.
    pub line: usize,
    /// What was changed and why, in one sentence.
    pub description: String,
}

/// A source after the automatic fixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    /// The fixed source; byte-identical to the input when `fixes` is empty.
    pub source: String,
    /// The fixes applied, in the order they were applied.
    pub fixes: Vec<Fix>,
}

/// At most this many brace fixes in one source: past it, the source is left alone.
const MAX_BRACE_FIXES: usize = 64;

/// Applies every automatic fix to `source` (see the module doc for what is fixed and what is
/// not).
pub fn autofix(source: &str) -> Fixed {
    let Some((text, mut fixes, tokens)) = fix_braces(source) else {
        return Fixed {
            source: source.to_owned(),
            fixes: Vec::new(),
        };
    };
    let (text, format_fixes) = format::fix_format_calls(&text, &tokens);
    let tokens = if format_fixes.is_empty() {
        tokens
    } else {
        match lexer::lex(&text) {
            Ok(tokens) => tokens,
            // Doubling braces inside a plain string keeps it one token; never reached.
            Err(_) => {
                return Fixed {
                    source: source.to_owned(),
                    fixes: Vec::new(),
                };
            }
        }
    };
    fixes.extend(format_fixes);
    let (text, import_fixes) = imports::add_missing(&text, &tokens);
    fixes.extend(import_fixes);
    Fixed {
        source: text,
        fixes,
    }
}

/// The line (1-based) of byte offset `at`.
pub(crate) fn line_of(src: &str, at: usize) -> usize {
    let before = &src.as_bytes()[..at.min(src.len())];
    let crlf = before.windows(2).filter(|w| w == b"\r\n").count();
    1 + before.iter().filter(|&&c| c == b'\n' || c == b'\r').count() - crlf
}

/// `text` shortened to `n` characters, with `...` when cut.
fn clip(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}

/// The source with its f-string brace mistakes fixed, the fixes, and its tokens; `None` when
/// it does not tokenize even after them.
fn fix_braces(source: &str) -> Option<(String, Vec<Fix>, Vec<Token>)> {
    let mut text = source.to_owned();
    let mut fixes = Vec::new();
    loop {
        let error = match lexer::lex(&text) {
            Ok(tokens) => return Some((text, fixes, tokens)),
            Err(LexError::Brace(error)) if fixes.len() < MAX_BRACE_FIXES => error,
            Err(_) => return None,
        };
        let (inserts, at, what) = match error {
            BraceError::LoneClose { at } => (
                vec![(at, '}')],
                at,
                "doubled a single `}` in an f-string's text (Python allows only `}}` there)"
                    .to_owned(),
            ),
            BraceError::Empty { open, close } => (
                vec![(close, '}'), (open, '{')],
                open,
                format!(
                    "doubled the braces of `{}` in an f-string (an empty field is a syntax \
                     error; it was meant literally)",
                    clip(&text[open..=close], 40)
                ),
            ),
            BraceError::Words { open, close } => (
                vec![(close, '}'), (open, '{')],
                open,
                format!(
                    "doubled the braces of `{}` in an f-string (words are not an expression; \
                     they were meant literally)",
                    clip(&text[open..=close], 40)
                ),
            ),
            BraceError::Unclosed { open } => (
                vec![(open, '{')],
                open,
                "doubled a `{` in an f-string whose field never closes (it was meant \
                 literally)"
                    .to_owned(),
            ),
        };
        let line = line_of(&text, at);
        for (offset, brace) in inserts {
            text.insert(offset, brace);
        }
        fixes.push(Fix {
            kind: FixKind::FStringBrace,
            line,
            description: format!("line {line}: {what}"),
        });
    }
}

#[cfg(test)]
mod tests;
