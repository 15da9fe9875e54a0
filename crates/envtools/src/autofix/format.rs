//! Braces in a string literal given straight to `.format(...)` that make the call fail every
//! time it runs: a field naming an argument the call does not pass (`"\\boxed{answer} in {n}"`
//! `.format(n=3)` is a `KeyError: 'answer'`), a single `}` or a `{` that never closes (a
//! `ValueError`). Their braces are doubled, so that they print as written. Only where the
//! failure is certain: one literal (not an implicit concatenation), not bytes, without numeric
//! or named escapes that could make a brace, and a call without `*args` or `**kwargs`. A field
//! of the auto-numbered (`{}`) or numbered (`{0}`) kind is never touched: whether there are too
//! few arguments, or which brace was meant literally, is a guess.

use super::lexer::{Kind, Token};
use super::{Fix, FixKind, clip, line_of};

/// `text` with the `.format` brace mistakes fixed, and the fixes.
pub(super) fn fix_format_calls(text: &str, tokens: &[Token]) -> (String, Vec<Fix>) {
    let mut inserts: Vec<(usize, char)> = Vec::new();
    let mut fixes = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if t.kind != Kind::Str || t.nested || !format_call(text, tokens, i) {
            continue;
        }
        let prev = i.checked_sub(1).map(|p| tokens[p].kind);
        if matches!(prev, Some(Kind::Str | Kind::FStr)) {
            continue;
        }
        let Some(keywords) = keywords(text, tokens, i + 4) else {
            continue;
        };
        let Some((body, raw)) = body(text, t) else {
            continue;
        };
        for mistake in mistakes(text, body, raw, &keywords) {
            let (at, what) = match mistake {
                Mistake::LoneClose(at) => {
                    inserts.push((at, '}'));
                    (
                        at,
                        "doubled a single `}` in a string given to .format (a ValueError)"
                            .to_owned(),
                    )
                }
                Mistake::Unclosed(at) => {
                    inserts.push((at, '{'));
                    (
                        at,
                        "doubled a `{` that never closes in a string given to .format (a \
                         ValueError)"
                            .to_owned(),
                    )
                }
                Mistake::Unknown { open, close } => {
                    inserts.push((open, '{'));
                    inserts.push((close, '}'));
                    (
                        open,
                        format!(
                            "doubled the braces of `{}` in a string given to .format (the call \
                             passes no argument of that name: a KeyError)",
                            clip(&text[open..=close], 40)
                        ),
                    )
                }
            };
            let line = line_of(text, at);
            fixes.push(Fix {
                kind: FixKind::FormatBrace,
                line,
                description: format!("line {line}: {what}"),
            });
        }
    }
    if inserts.is_empty() {
        return (text.to_owned(), fixes);
    }
    inserts.sort_by_key(|&(at, _)| std::cmp::Reverse(at));
    let mut fixed = text.to_owned();
    for (at, brace) in inserts {
        fixed.insert(at, brace);
    }
    (fixed, fixes)
}

/// Whether string token `i` is followed by `.format(`.
fn format_call(text: &str, tokens: &[Token], i: usize) -> bool {
    let is = |k: usize, kind: Kind, s: &str| {
        tokens
            .get(i + k)
            .is_some_and(|t| t.kind == kind && t.text(text) == s)
    };
    is(1, Kind::Op, ".") && is(2, Kind::Name, "format") && is(3, Kind::Op, "(")
}

/// The keyword names of the call whose arguments start at token `first`; `None` when it
/// has `*args` or `**kwargs` (names unknown) or does not close.
fn keywords(text: &str, tokens: &[Token], first: usize) -> Option<Vec<String>> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut at_start = true;
    for (k, t) in tokens.iter().enumerate().skip(first) {
        let s = t.text(text);
        if t.kind == Kind::Op {
            match s {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" if depth == 0 => return Some(names),
                ")" | "]" | "}" => depth -= 1,
                "*" | "**" if depth == 0 && at_start => return None,
                "," if depth == 0 => {
                    at_start = true;
                    continue;
                }
                _ => {}
            }
        }
        if depth == 0 && at_start && t.kind == Kind::Name {
            let next = tokens.get(k + 1);
            if next.is_some_and(|n| n.kind == Kind::Op && n.text(text) == "=") {
                names.push(s.to_owned());
            }
        }
        at_start = false;
    }
    None
}

/// The body span of a string token (inside its quotes) and whether it is raw; `None` for bytes.
fn body(text: &str, t: &Token) -> Option<((usize, usize), bool)> {
    let s = t.text(text);
    let quote = s.find(['\'', '"'])?;
    let prefix = s[..quote].to_ascii_lowercase();
    if prefix.contains('b') {
        return None;
    }
    let q = &s[quote..quote + 1];
    let n = if s[quote..].starts_with(&q.repeat(3)) && s.len() - quote >= 6 {
        3
    } else {
        1
    };
    Some(((t.start + quote + n, t.end - n), prefix.contains('r')))
}

/// A brace mistake in a format string, at byte offsets of the source.
enum Mistake {
    /// A single `}` outside a field.
    LoneClose(usize),
    /// A `{` whose field never closes.
    Unclosed(usize),
    /// A field naming an argument the call does not pass: its `{` and `}`.
    Unknown { open: usize, close: usize },
}

/// The mistakes of the format string `text[body]`; none when it holds an escape that could
/// make a brace, or a field this does not follow.
fn mistakes(
    text: &str,
    (start, end): (usize, usize),
    raw: bool,
    keywords: &[String],
) -> Vec<Mistake> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = start;
    while i < end {
        match b[i] {
            b'\\' if !raw => {
                if matches!(
                    b.get(i + 1),
                    Some(b'x' | b'u' | b'U' | b'N' | b'0'..=b'7' | b'{' | b'}')
                ) {
                    return Vec::new();
                }
                i += 2;
            }
            b'{' if b.get(i + 1) == Some(&b'{') && i + 1 < end => i += 2,
            b'}' if b.get(i + 1) == Some(&b'}') && i + 1 < end => i += 2,
            b'}' => {
                out.push(Mistake::LoneClose(i));
                i += 1;
            }
            b'{' => {
                let Some(close) = field_end(b, i, end) else {
                    out.push(Mistake::Unclosed(i));
                    return out;
                };
                let field = &text[i + 1..close];
                let name_end = field.find(['!', ':', '.', '[']).unwrap_or(field.len());
                let name = &field[..name_end];
                let numbered = name.is_empty() || name.bytes().all(|c| c.is_ascii_digit());
                let plain = !field.contains(['{', '\\']);
                if !numbered && plain && !keywords.iter().any(|k| k == name) {
                    out.push(Mistake::Unknown { open: i, close });
                }
                i = close + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The `}` closing the field opened at `open` (nested `{}` in its spec counted), before `end`.
fn field_end(b: &[u8], open: usize, end: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, &c) in b.iter().enumerate().take(end).skip(open + 1) {
        match c {
            b'{' => depth += 1,
            b'}' if depth == 0 => return Some(k),
            b'}' => depth -= 1,
            _ => {}
        }
    }
    None
}
