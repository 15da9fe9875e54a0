//! Just enough of Python's lexical structure to take a module apart and put pieces of it back
//! together unchanged: logical lines (strings, brackets and backslash continuations joined),
//! their tokens, the statements at one indentation level, and a compact rendering without
//! comments, docstrings and blank lines.
//!
//! Only what the RLVE converter needs ([`super::rlve_convert`]); it never rewrites code inside
//! a statement, so a source it takes apart runs the same when put back.

use std::collections::BTreeSet;
use std::ops::Range;

/// What a token is. Operators are one token per operator (`==`, `**=`, `->` included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokKind {
    Name,
    /// A string literal; `fstring` when its prefix has an `f`.
    Str {
        fstring: bool,
    },
    Number,
    Op,
    Comment,
}

/// One token: its kind and byte range in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tok {
    pub kind: TokKind,
    pub start: usize,
    pub end: usize,
}

/// One logical line: the physical lines a statement spans (or a blank or comment-only line).
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// Bytes of the source, from the first physical line's start to after its last newline.
    pub range: Range<usize>,
    /// Columns of leading whitespace of the first physical line (a tab to the next multiple of
    /// 8, as Python counts it).
    pub indent: usize,
    pub toks: Vec<Tok>,
}

impl Line {
    /// No code on the line: blank, or a comment only.
    pub fn blank(&self) -> bool {
        self.toks.iter().all(|t| t.kind == TokKind::Comment)
    }

    /// The code tokens (comments left out).
    pub fn code(&self) -> impl Iterator<Item = &Tok> {
        self.toks.iter().filter(|t| t.kind != TokKind::Comment)
    }

    /// A statement that is string literals only (a docstring, or a string used as a comment);
    /// f-strings excluded, since their expressions run.
    pub fn plain_string_statement(&self) -> bool {
        !self.blank()
            && self
                .code()
                .all(|t| matches!(t.kind, TokKind::Str { fstring: false }))
    }

    /// Whether its last code token is `:`, i.e. it opens a block whose body is on the lines
    /// below.
    pub fn opens_block(&self, src: &str) -> bool {
        self.code().last().is_some_and(|t| tok_text(src, t) == ":")
    }
}

/// A token's text.
pub(crate) fn tok_text<'a>(src: &'a str, t: &Tok) -> &'a str {
    &src[t.start..t.end]
}

/// Why a source could not be taken apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct LexError {
    /// 1-based line of the problem.
    pub line: usize,
    pub what: String,
}

const OPS3: [&str; 5] = ["**=", "//=", ">>=", "<<=", "..."];
const OPS2: [&str; 19] = [
    "==", "!=", "<=", ">=", ":=", "->", "**", "//", "<<", ">>", "+=", "-=", "*=", "/=", "%=", "&=",
    "|=", "^=", "@=",
];

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

fn line_of(src: &str, pos: usize) -> usize {
    src[..pos].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Whether `word` is a string prefix (`r`, `b`, `f`, `u`, `rb`, `fr`, ... in any case).
fn string_prefix(word: &str) -> Option<bool> {
    let lower = word.to_ascii_lowercase();
    match lower.as_str() {
        "r" | "u" | "b" | "br" | "rb" => Some(false),
        "f" | "fr" | "rf" => Some(true),
        _ => None,
    }
}

/// The end of the string literal whose opening quote is at `pos`.
fn scan_string(src: &str, pos: usize) -> Result<usize, LexError> {
    let b = src.as_bytes();
    let q = b[pos];
    let triple = b.len() >= pos + 3 && b[pos + 1] == q && b[pos + 2] == q;
    let mut i = pos + if triple { 3 } else { 1 };
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == q => {
                if !triple {
                    return Ok(i + 1);
                }
                if b.len() >= i + 3 && b[i + 1] == q && b[i + 2] == q {
                    return Ok(i + 3);
                }
                i += 1;
            }
            b'\n' if !triple => break,
            _ => i += 1,
        }
    }
    Err(LexError {
        line: line_of(src, pos),
        what: "a string literal that does not end".into(),
    })
}

/// Splits `src` into logical lines. Every byte of `src` belongs to exactly one line.
pub(crate) fn lines(src: &str) -> Result<Vec<Line>, LexError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut toks = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let indent_at = |s: usize| {
        let mut col = 0;
        for &c in &b[s..] {
            match c {
                b' ' => col += 1,
                b'\t' => col = (col / 8 + 1) * 8,
                b'\x0c' => col = 0,
                _ => break,
            }
        }
        col
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                i += 1;
                if depth == 0 {
                    out.push(Line {
                        range: start..i,
                        indent: indent_at(start),
                        toks: std::mem::take(&mut toks),
                    });
                    start = i;
                }
            }
            b'\\' if b.get(i + 1) == Some(&b'\n') => i += 2,
            b'\\' if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') => i += 3,
            b' ' | b'\t' | b'\r' | b'\x0c' => i += 1,
            b'#' => {
                let end = src[i..].find('\n').map_or(b.len(), |n| i + n);
                toks.push(Tok {
                    kind: TokKind::Comment,
                    start: i,
                    end,
                });
                i = end;
            }
            b'"' | b'\'' => {
                let end = scan_string(src, i)?;
                toks.push(Tok {
                    kind: TokKind::Str { fstring: false },
                    start: i,
                    end,
                });
                i = end;
            }
            c if c.is_ascii_digit()
                || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) =>
            {
                let mut j = i + 1;
                while j < b.len() {
                    let d = b[j];
                    let exponent_sign = (d == b'+' || d == b'-')
                        && matches!(b[j - 1], b'e' | b'E')
                        && !src[i..j].starts_with("0x")
                        && !src[i..j].starts_with("0X");
                    if d.is_ascii_alphanumeric() || d == b'_' || d == b'.' || exponent_sign {
                        j += 1;
                    } else {
                        break;
                    }
                }
                toks.push(Tok {
                    kind: TokKind::Number,
                    start: i,
                    end: j,
                });
                i = j;
            }
            c if is_name_byte(c) => {
                let mut j = i;
                while j < b.len() && is_name_byte(b[j]) {
                    j += 1;
                }
                let quoted = matches!(b.get(j), Some(b'"' | b'\''));
                match (quoted, string_prefix(&src[i..j])) {
                    (true, Some(fstring)) => {
                        let end = scan_string(src, j)?;
                        toks.push(Tok {
                            kind: TokKind::Str { fstring },
                            start: i,
                            end,
                        });
                        i = end;
                    }
                    _ => {
                        toks.push(Tok {
                            kind: TokKind::Name,
                            start: i,
                            end: j,
                        });
                        i = j;
                    }
                }
            }
            _ => {
                let len = if OPS3.iter().any(|op| src[i..].starts_with(op)) {
                    3
                } else if OPS2.iter().any(|op| src[i..].starts_with(op)) {
                    2
                } else {
                    // One character (a whole UTF-8 sequence if it is not ASCII).
                    src[i..].chars().next().map_or(1, char::len_utf8)
                };
                match c {
                    b'(' | b'[' | b'{' => depth += 1,
                    b')' | b']' | b'}' => {
                        depth = depth.checked_sub(1).ok_or_else(|| LexError {
                            line: line_of(src, i),
                            what: format!("a closing '{}' that nothing opened", c as char),
                        })?
                    }
                    _ => {}
                }
                toks.push(Tok {
                    kind: TokKind::Op,
                    start: i,
                    end: i + len,
                });
                i += len;
            }
        }
    }
    if depth > 0 {
        return Err(LexError {
            line: line_of(src, b.len()),
            what: "a bracket that is never closed".into(),
        });
    }
    if start < b.len() {
        out.push(Line {
            range: start..b.len(),
            indent: indent_at(start),
            toks,
        });
    }
    Ok(out)
}

/// A statement: its lines `lines[first..end]` (decorators first, blank lines after it
/// included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stmt {
    pub lines: Range<usize>,
}

/// The statements of the block `lines[range]`, whose first code line sets the indentation.
/// Decorator lines join the statement they decorate; blank lines join the statement before
/// them (those before the first statement form no statement and are left out).
pub(crate) fn statements(lines: &[Line], range: Range<usize>, src: &str) -> Vec<Stmt> {
    let Some(level) = lines[range.clone()]
        .iter()
        .find(|l| !l.blank())
        .map(|l| l.indent)
    else {
        return Vec::new();
    };
    let mut out: Vec<Stmt> = Vec::new();
    let mut decorated = false;
    for k in range.clone() {
        let line = &lines[k];
        if line.blank() || line.indent > level {
            if let Some(last) = out.last_mut() {
                last.lines.end = k + 1;
            }
            continue;
        }
        let decorator = line.code().next().is_some_and(|t| tok_text(src, t) == "@");
        match out.last_mut() {
            Some(last) if decorated => last.lines.end = k + 1,
            _ => out.push(Stmt { lines: k..k + 1 }),
        }
        decorated = decorator;
    }
    out
}

/// The names a piece of code reads: every name token but the one a `def` or `class` defines,
/// attribute names included (`self.scorer` reads `scorer`), and every word inside an
/// f-string. An over-approximation: a name it lists may not be read, but every name read is
/// listed.
pub(crate) fn names_read(src: &str, lines: &[Line]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in lines {
        let mut after_def = false;
        for t in line.code() {
            let text = tok_text(src, t);
            match t.kind {
                TokKind::Name => {
                    if !after_def {
                        out.insert(text.to_owned());
                    }
                    after_def = text == "def" || text == "class";
                }
                TokKind::Str { fstring: true } => {
                    out.extend(fstring_words(text));
                    after_def = false;
                }
                _ => after_def = false,
            }
        }
    }
    out
}

/// The words inside the replacement fields (`{...}`) of an f-string literal `text`, prefix
/// and quotes included; `{{` and `}}` are literal braces.
fn fstring_words(text: &str) -> Vec<String> {
    let body = text.find(['"', '\'']).map_or(text, |q| &text[q..]);
    let mut fields = String::new();
    let mut depth = 0usize;
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if depth == 0 && chars.peek() == Some(&'{') => {
                chars.next();
            }
            '{' => depth += 1,
            '}' if depth > 0 => {
                depth -= 1;
                fields.push(' ');
            }
            c if depth > 0 => fields.push(c),
            _ => {}
        }
    }
    fields
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.chars().next().is_some_and(|c| !c.is_ascii_digit()))
        .map(str::to_owned)
        .collect()
}

/// `src` with the annotations of every `def`'s parameters and return value removed
/// (`def f(self, n : int = 3) -> int :` becomes `def f(self, n = 3):`). Nothing else changes;
/// annotations of variables (which a dataclass reads) stay.
pub(crate) fn strip_def_annotations(src: &str) -> Result<String, LexError> {
    let mut cuts: Vec<Range<usize>> = Vec::new();
    for line in lines(src)? {
        let code: Vec<&Tok> = line.code().collect();
        let at = match code.first().map(|t| tok_text(src, t)) {
            Some("def") => 0,
            Some("async") => 1,
            _ => continue,
        };
        // Tokens: [async] def name ( params ) [-> ann] :
        let Some(open) = code.iter().skip(at).position(|t| tok_text(src, t) == "(") else {
            continue;
        };
        let mut depth = 0usize;
        let mut in_default = false;
        let mut k = at + open;
        let mut close = None;
        while k < code.len() {
            let t = code[k];
            let text = tok_text(src, t);
            match text {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        close = Some(k);
                        break;
                    }
                }
                "," if depth == 1 => in_default = false,
                "=" if depth == 1 => in_default = true,
                ":" if depth == 1 && !in_default => {
                    // The annotation runs to the next `,`, `=` or `)` at this depth.
                    let mut j = k + 1;
                    let mut d = 0usize;
                    while j < code.len() {
                        let u = tok_text(src, code[j]);
                        match u {
                            "(" | "[" | "{" => d += 1,
                            ")" | "]" | "}" if d > 0 => d -= 1,
                            ")" | "," | "=" if d == 0 => break,
                            _ => {}
                        }
                        j += 1;
                    }
                    let Some(end) = code.get(j) else { break };
                    let start = if tok_text(src, end) == "=" {
                        t.start
                    } else {
                        code[k - 1].end
                    };
                    cuts.push(start..end.start);
                    k = j;
                    continue;
                }
                _ => {}
            }
            k += 1;
        }
        // `-> annotation` and the space before the colon, up to the final `:`.
        if let (Some(close), Some(colon)) = (close, code.last())
            && tok_text(src, colon) == ":"
            && close + 1 < code.len() - 1
            && tok_text(src, code[close + 1]) == "->"
        {
            cuts.push(code[close].end..colon.start);
        }
    }
    let mut out = String::with_capacity(src.len());
    let mut pos = 0;
    for cut in cuts {
        out.push_str(&src[pos..cut.start]);
        pos = cut.end;
    }
    out.push_str(&src[pos..]);
    Ok(out)
}

/// `src` without comments, docstrings and other plain-string statements, blank lines and
/// trailing whitespace. A block whose body was only such lines gets `pass`. Code and every
/// string that is a value (a prompt, a template) stay byte for byte.
pub(crate) fn compact(src: &str) -> Result<String, LexError> {
    let lines = lines(src)?;
    let mut out = String::with_capacity(src.len());
    // The indentation of the block header whose body has had no code yet, if any.
    let mut open: Option<usize> = None;
    for (k, line) in lines.iter().enumerate() {
        if line.blank() {
            continue;
        }
        if line.plain_string_statement() {
            // Dropped, unless it is its block's whole body.
            let body_ends = lines[k + 1..]
                .iter()
                .find(|l| !l.blank())
                .is_none_or(|next| next.indent <= open.unwrap_or(usize::MAX));
            if open.is_some_and(|h| line.indent > h) && body_ends {
                out.push_str(&" ".repeat(line.indent));
                out.push_str("pass\n");
                open = None;
            }
            continue;
        }
        open = line.opens_block(src).then_some(line.indent);
        // The line's text with each comment cut, and trailing whitespace removed per
        // physical line (never inside a string: a string token spans its newlines).
        let mut text = String::new();
        let mut pos = line.range.start;
        for t in line.toks.iter().filter(|t| t.kind == TokKind::Comment) {
            text.push_str(&src[pos..t.start]);
            pos = t.end;
        }
        text.push_str(&src[pos..line.range.end]);
        let strings: Vec<Range<usize>> = line
            .toks
            .iter()
            .filter(|t| matches!(t.kind, TokKind::Str { .. }))
            .map(|t| t.start - line.range.start..t.end - line.range.start)
            .collect();
        out.push_str(&trim_physical_lines(&text, line, &strings, src));
    }
    Ok(out)
}

/// The logical line's text (`text`, comments already cut) with trailing whitespace removed
/// from each physical line that does not end inside a string, and physical lines left empty
/// by a cut comment dropped.
fn trim_physical_lines(text: &str, line: &Line, strings: &[Range<usize>], src: &str) -> String {
    // Offsets in `text` differ from offsets in the line once comments are cut, so map each
    // newline of `text` back: cut comments never contain a newline, and the newlines of
    // `text` are those of the line in order.
    let line_text = &src[line.range.clone()];
    let newlines_in_line: Vec<usize> = line_text.match_indices('\n').map(|(i, _)| i).collect();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut n = 0;
    while let Some(cut) = rest.find('\n') {
        let physical = &rest[..cut];
        let in_string = newlines_in_line
            .get(n)
            .is_some_and(|&at| strings.iter().any(|s| s.start < at && at < s.end));
        if in_string {
            out.push_str(physical);
            out.push('\n');
        } else {
            let trimmed = physical.trim_end();
            if !trimmed.trim_start().is_empty() {
                out.push_str(trimmed);
                out.push('\n');
            } else if out.ends_with("\\\n") {
                // A backslash that continued the statement onto this empty line: the
                // statement ends before it.
                out.truncate(out.len() - 2);
                out.push('\n');
            }
        }
        rest = &rest[cut + 1..];
        n += 1;
    }
    if !rest.trim().is_empty() {
        out.push_str(rest.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<String> {
        lines(src)
            .unwrap()
            .iter()
            .map(|l| src[l.range.clone()].to_owned())
            .collect()
    }

    #[test]
    fn logical_lines_join_brackets_strings_and_continuations() {
        let src = "a = (1,\n  2)\ns = \"\"\"x\n# not a comment\n\"\"\"\nb = 1 + \\\n 2\n# c\n";
        assert_eq!(
            texts(src),
            [
                "a = (1,\n  2)\n",
                "s = \"\"\"x\n# not a comment\n\"\"\"\n",
                "b = 1 + \\\n 2\n",
                "# c\n"
            ]
        );
        let l = lines(src).unwrap();
        assert!(l[3].blank() && !l[1].blank());
    }

    #[test]
    fn prefixed_and_escaped_strings_are_one_token() {
        let src = "x = rb'a\\'b' + f\"{y}\" + r'\\\\'\n";
        let l = &lines(src).unwrap()[0];
        let kinds: Vec<TokKind> = l.toks.iter().map(|t| t.kind).collect();
        assert_eq!(
            kinds,
            [
                TokKind::Name,
                TokKind::Op,
                TokKind::Str { fstring: false },
                TokKind::Op,
                TokKind::Str { fstring: true },
                TokKind::Op,
                TokKind::Str { fstring: false },
            ]
        );
    }

    #[test]
    fn numbers_with_exponents_and_multi_char_operators() {
        let src = "x **= 1e-5 // 0x1e\n";
        let l = &lines(src).unwrap()[0];
        let t: Vec<&str> = l.toks.iter().map(|t| tok_text(src, t)).collect();
        assert_eq!(t, ["x", "**=", "1e-5", "//", "0x1e"]);
    }

    #[test]
    fn unbalanced_sources_are_errors_with_their_line() {
        assert_eq!(
            lines("a = 1\nb = 'x\n").unwrap_err().to_string(),
            "line 2: a string literal that does not end"
        );
        assert_eq!(
            lines("a = (1,\n").unwrap_err().to_string(),
            "line 2: a bracket that is never closed"
        );
        assert_eq!(
            lines("a = 1)\n").unwrap_err().to_string(),
            "line 1: a closing ')' that nothing opened"
        );
    }

    #[test]
    fn statements_take_their_body_decorators_and_trailing_blanks() {
        let src = "import a\n\n@d\ndef f():\n    pass\n\n\nclass C:\n    x = 1\n";
        let l = lines(src).unwrap();
        let s = statements(&l, 0..l.len(), src);
        assert_eq!(
            s,
            [
                Stmt { lines: 0..2 },
                Stmt { lines: 2..7 },
                Stmt { lines: 7..9 }
            ]
        );
        // The class body's statements.
        assert_eq!(statements(&l, 8..9, src), [Stmt { lines: 8..9 }]);
    }

    #[test]
    fn names_read_leave_out_definitions_and_include_attributes_and_fstrings() {
        let src = "def f(self):\n    return self.scorer(x) + f\"a word {helper(y)} {{z}}\"\n";
        let l = lines(src).unwrap();
        let names = names_read(src, &l);
        for n in ["f", "a", "word", "z"] {
            assert!(!names.contains(n), "{n}: {names:?}");
        }
        for n in ["self", "scorer", "x", "helper", "y", "return"] {
            assert!(names.contains(n), "{n}: {names:?}");
        }
    }

    #[test]
    fn compact_drops_comments_docstrings_and_blank_lines_only() {
        let src = "\"\"\"Module doc.\"\"\"\nimport re  # regex\n\n\nclass A :\n    \"\"\"Doc.\"\"\"\n\n    def f(self) :\n        \"\"\"Only a docstring.\"\"\"\n\n    def g(self):\n        # why\n        return \"keep # this\"  \n\n\nP = \"\"\"line one\n\n  line three   \n\"\"\"\n";
        let want = "import re\nclass A :\n    def f(self) :\n        pass\n    def g(self):\n        return \"keep # this\"\nP = \"\"\"line one\n\n  line three   \n\"\"\"\n";
        assert_eq!(compact(src).unwrap(), want);
    }

    #[test]
    fn compact_drops_a_continuation_onto_an_empty_line() {
        let src = "def f():\n    assert x, \"m\"\\\n    \n    return 1\n";
        assert_eq!(
            compact(src).unwrap(),
            "def f():\n    assert x, \"m\"\n    return 1\n"
        );
    }

    #[test]
    fn compact_keeps_fstring_statements_and_a_class_body_of_a_docstring_gets_pass() {
        let src = "class E(Exception):\n    \"\"\"Doc.\"\"\"\nf\"{g()}\"\n";
        assert_eq!(
            compact(src).unwrap(),
            "class E(Exception):\n    pass\nf\"{g()}\"\n"
        );
    }

    #[test]
    fn def_annotations_go_and_defaults_and_lambdas_stay() {
        let src = "def f(self, n : int = 3, m: Dict[str, int], k=lambda a: a, *args: int) -> Optional[int] :\n    x: int = 1\n";
        assert_eq!(
            strip_def_annotations(src).unwrap(),
            "def f(self, n = 3, m, k=lambda a: a, *args):\n    x: int = 1\n"
        );
        let plain = "def g(a, b=(1, 2)):\n    return {a: b}\n";
        assert_eq!(strip_def_annotations(plain).unwrap(), plain);
    }
}
