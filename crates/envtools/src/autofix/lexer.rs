//! A Python tokenizer just deep enough for the automatic fixes: names, numbers, operators,
//! brackets, logical line ends, and strings, with f-strings followed into their replacement
//! fields as Python 3.12 (PEP 701, which the sandbox's parser implements) reads them.
//!
//! It does not validate a program. It reports an f-string brace mistake only where Python
//! rejects the source for certain ([`BraceError`]); anything else it cannot follow is
//! [`LexError::Other`], on which the fixes leave the source alone.

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Name,
    Number,
    /// A string literal that is not an f-string (plain, raw or bytes).
    Str,
    /// An f-string; the tokens of its replacement fields come before it, marked `nested`.
    FStr,
    Op,
    /// The end of a logical line (the newline characters, or nothing at the end of the file).
    Newline,
}

/// One token: its kind and byte span in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
    /// Inside an f-string's replacement field.
    pub nested: bool,
}

impl Token {
    pub fn text<'a>(&self, src: &'a str) -> &'a str {
        &src[self.start..self.end]
    }
}

/// An f-string brace mistake that makes the source a `SyntaxError` for certain, with the byte
/// offsets of the braces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BraceError {
    /// A single `}` in an f-string's literal text ("single '}' is not allowed").
    LoneClose { at: usize },
    /// `{}` (or only whitespace between): "valid expression required before '}'".
    Empty { open: usize, close: usize },
    /// A field of two or more plain words, such as `{your answer}`: "invalid syntax".
    Words { open: usize, close: usize },
    /// A `{` whose field never closes: the f-string ends (or a string inside the field runs
    /// to the end of its line, or the file ends) first: "expecting '}'".
    Unclosed { open: usize },
}

/// Why the source could not be tokenized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LexError {
    Brace(BraceError),
    /// A single-quoted string reached the end of its line, or a string the end of the file.
    Unterminated,
    /// Anything else this tokenizer does not follow.
    Other,
}

/// Python's keywords and soft keywords: a field of words that holds one may be an expression
/// (`{x if y else z}`), so it is never taken for a word mistake.
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield", "match", "case", "type", "_",
];

/// String prefixes (lower-cased); another name before a quote is a name, then a string.
const PREFIXES: &[&str] = &["r", "u", "b", "br", "rb", "f", "fr", "rf"];

/// Operators, longest first.
const OPERATORS: &[&str] = &[
    "**=", "//=", ">>=", "<<=", "...", "->", ":=", "==", "!=", "<=", ">=", "**", "//", "<<", ">>",
    "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", "+", "-", "*", "/", "%", "@", "&", "|",
    "^", "~", "<", ">", ",", ":", ".", ";", "=", "!",
];

/// Tokenizes `src`.
pub(super) fn lex(src: &str) -> Result<Vec<Token>, LexError> {
    let mut lexer = Lexer {
        src,
        b: src.as_bytes(),
        pos: 0,
        tokens: Vec::new(),
    };
    lexer.run()?;
    Ok(lexer.tokens)
}

struct Lexer<'a> {
    src: &'a str,
    b: &'a [u8],
    pos: usize,
    tokens: Vec<Token>,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

fn is_ident(c: u8) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

impl Lexer<'_> {
    fn at(&self, i: usize) -> Option<u8> {
        self.b.get(i).copied()
    }

    fn push(&mut self, kind: Kind, start: usize, nested: bool) {
        self.tokens.push(Token {
            kind,
            start,
            end: self.pos,
            nested,
        });
    }

    /// Length of the newline at `pos` (`\r\n`, `\r` or `\n`), 0 if none.
    fn newline_len(&self, pos: usize) -> usize {
        match (self.at(pos), self.at(pos + 1)) {
            (Some(b'\r'), Some(b'\n')) => 2,
            (Some(b'\r' | b'\n'), _) => 1,
            _ => 0,
        }
    }

    fn run(&mut self) -> Result<(), LexError> {
        let mut brackets = Vec::new();
        let mut line_has_tokens = false;
        while let Some(c) = self.at(self.pos) {
            match c {
                b' ' | b'\t' | 0x0c => self.pos += 1,
                b'\\' => {
                    let n = self.newline_len(self.pos + 1);
                    if n == 0 {
                        return Err(LexError::Other);
                    }
                    self.pos += 1 + n;
                }
                b'#' => self.comment(),
                b'\r' | b'\n' => {
                    let start = self.pos;
                    self.pos += self.newline_len(start);
                    if brackets.is_empty() && line_has_tokens {
                        self.push(Kind::Newline, start, false);
                        line_has_tokens = false;
                    }
                }
                _ => {
                    self.token(false, &mut brackets).map_err(|e| match e {
                        LexError::Brace(_) => e,
                        _ => LexError::Other,
                    })?;
                    line_has_tokens = true;
                }
            }
        }
        if !brackets.is_empty() {
            return Err(LexError::Other);
        }
        if line_has_tokens {
            self.push(Kind::Newline, self.pos, false);
        }
        Ok(())
    }

    fn comment(&mut self) {
        while let Some(c) = self.at(self.pos) {
            if c == b'\r' || c == b'\n' {
                break;
            }
            self.pos += 1;
        }
    }

    /// One token at `pos` (not whitespace, a comment or a newline).
    fn token(&mut self, nested: bool, brackets: &mut Vec<u8>) -> Result<(), LexError> {
        let start = self.pos;
        let c = self.b[start];
        if is_ident_start(c) {
            while self.at(self.pos).is_some_and(is_ident) {
                self.pos += 1;
            }
            if matches!(self.at(self.pos), Some(b'"' | b'\'')) {
                let word = self.src[start..self.pos].to_ascii_lowercase();
                if PREFIXES.contains(&word.as_str()) {
                    return self.string(start, nested);
                }
                if word.contains('t') && word.len() <= 2 {
                    // A template string (Python 3.14): not followed here.
                    return Err(LexError::Other);
                }
            }
            self.push(Kind::Name, start, nested);
            return Ok(());
        }
        if c.is_ascii_digit()
            || (c == b'.' && self.at(start + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            self.number(start);
            self.push(Kind::Number, start, nested);
            return Ok(());
        }
        if c == b'"' || c == b'\'' {
            return self.string(start, nested);
        }
        match c {
            b'(' | b'[' | b'{' => brackets.push(c),
            b')' | b']' | b'}' => {
                let open = match c {
                    b')' => b'(',
                    b']' => b'[',
                    _ => b'{',
                };
                if brackets.pop() != Some(open) {
                    return Err(LexError::Other);
                }
            }
            _ => {
                let rest = &self.src[start..];
                let op = OPERATORS
                    .iter()
                    .find(|op| rest.starts_with(*op))
                    .ok_or(LexError::Other)?;
                self.pos += op.len();
                self.push(Kind::Op, start, nested);
                return Ok(());
            }
        }
        self.pos += 1;
        self.push(Kind::Op, start, nested);
        Ok(())
    }

    fn number(&mut self, start: usize) {
        let hex = self.src[start..].starts_with("0x") || self.src[start..].starts_with("0X");
        let mut prev = 0u8;
        while let Some(c) = self.at(self.pos) {
            let exponent_sign = (c == b'+' || c == b'-') && (prev == b'e' || prev == b'E');
            if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || (exponent_sign && !hex) {
                prev = c;
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// A string literal whose prefix starts at `start` and whose quote is at `pos`.
    fn string(&mut self, start: usize, nested: bool) -> Result<(), LexError> {
        let prefix = self.src[start..self.pos].to_ascii_lowercase();
        let raw = prefix.contains('r');
        let q = self.b[self.pos];
        let triple = self.at(self.pos + 1) == Some(q) && self.at(self.pos + 2) == Some(q);
        self.pos += if triple { 3 } else { 1 };
        if prefix.contains('f') {
            self.fstring_literal(q, triple, raw)?;
            self.push(Kind::FStr, start, nested);
        } else {
            self.plain_body(q, triple)?;
            self.push(Kind::Str, start, nested);
        }
        Ok(())
    }

    /// Whether the string's closing quote is at `pos`; consumes it if so.
    fn closes(&mut self, q: u8, triple: bool) -> bool {
        let n = if triple { 3 } else { 1 };
        if (0..n).all(|i| self.at(self.pos + i) == Some(q)) {
            self.pos += n;
            true
        } else {
            false
        }
    }

    /// Skips a backslash escape at `pos` (in a raw string too: `\"` does not end it).
    fn escape(&mut self, raw: bool, fstring: bool) -> Result<(), LexError> {
        let next = self.at(self.pos + 1);
        if fstring && matches!(next, Some(b'{' | b'}')) {
            // `\{` is a backslash and then a brace that opens (or closes) a field.
            self.pos += 1;
            return Ok(());
        }
        if fstring && !raw && next == Some(b'N') && self.at(self.pos + 2) == Some(b'{') {
            // `\N{NAME}`: the braces belong to the escape.
            let close = self.src[self.pos + 3..]
                .find(['}', '\n', '\r'])
                .map(|i| self.pos + 3 + i)
                .ok_or(LexError::Other)?;
            if self.b[close] != b'}' {
                return Err(LexError::Other);
            }
            self.pos = close + 1;
            return Ok(());
        }
        let n = self.newline_len(self.pos + 1);
        self.pos += 1 + n.max(1);
        Ok(())
    }

    fn plain_body(&mut self, q: u8, triple: bool) -> Result<(), LexError> {
        loop {
            let Some(c) = self.at(self.pos) else {
                return Err(LexError::Unterminated);
            };
            if self.closes(q, triple) {
                return Ok(());
            }
            match c {
                b'\\' => self.escape(true, false)?,
                b'\r' | b'\n' if !triple => return Err(LexError::Unterminated),
                _ => self.pos += 1,
            }
        }
    }

    /// An f-string's literal text, up to and including its closing quote.
    fn fstring_literal(&mut self, q: u8, triple: bool, raw: bool) -> Result<(), LexError> {
        loop {
            let Some(c) = self.at(self.pos) else {
                return Err(LexError::Unterminated);
            };
            if self.closes(q, triple) {
                return Ok(());
            }
            match c {
                b'\\' => self.escape(raw, true)?,
                b'\r' | b'\n' if !triple => return Err(LexError::Unterminated),
                b'{' if self.at(self.pos + 1) == Some(b'{') => self.pos += 2,
                b'{' => self.field(q, triple, raw)?,
                b'}' if self.at(self.pos + 1) == Some(b'}') => self.pos += 2,
                b'}' => return Err(LexError::Brace(BraceError::LoneClose { at: self.pos })),
                _ => self.pos += 1,
            }
        }
    }

    /// A replacement field from its `{` at `pos` to its `}`.
    fn field(&mut self, q: u8, triple: bool, raw: bool) -> Result<(), LexError> {
        let open = self.pos;
        let unclosed = LexError::Brace(BraceError::Unclosed { open });
        self.pos += 1;
        while self
            .at(self.pos)
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n' | 0x0c))
        {
            self.pos += 1;
        }
        match self.at(self.pos) {
            None => return Err(unclosed),
            Some(b'}') => {
                return Err(LexError::Brace(BraceError::Empty {
                    open,
                    close: self.pos,
                }));
            }
            Some(_) => {}
        }
        let first = self.tokens.len();
        let mut brackets = Vec::new();
        loop {
            let Some(c) = self.at(self.pos) else {
                return Err(unclosed);
            };
            match c {
                b' ' | b'\t' | b'\r' | b'\n' | 0x0c => self.pos += 1,
                b'#' => return Err(LexError::Other),
                b'\\' => {
                    let n = self.newline_len(self.pos + 1);
                    if n == 0 {
                        return Err(LexError::Other);
                    }
                    self.pos += 1 + n;
                }
                b'}' if brackets.is_empty() => {
                    if self.words(first) {
                        return Err(LexError::Brace(BraceError::Words {
                            open,
                            close: self.pos,
                        }));
                    }
                    self.pos += 1;
                    return Ok(());
                }
                b':' if brackets.is_empty() => {
                    self.pos += 1;
                    return self.spec(open, q, triple, raw);
                }
                b'!' if brackets.is_empty() && self.at(self.pos + 1) != Some(b'=') => {
                    self.pos += 1;
                    while self.at(self.pos).is_some_and(is_ident) {
                        self.pos += 1;
                    }
                    match self.at(self.pos) {
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(());
                        }
                        Some(b':') => {
                            self.pos += 1;
                            return self.spec(open, q, triple, raw);
                        }
                        _ => return Err(LexError::Other),
                    }
                }
                _ => match self.token(true, &mut brackets) {
                    Ok(()) => {}
                    Err(LexError::Unterminated) => return Err(unclosed),
                    Err(e) => return Err(e),
                },
            }
        }
    }

    /// Whether the tokens since `first` are two or more plain words (no keyword).
    fn words(&self, first: usize) -> bool {
        let tokens = &self.tokens[first..];
        tokens.len() >= 2
            && tokens
                .iter()
                .all(|t| t.kind == Kind::Name && !KEYWORDS.contains(&t.text(self.src)))
    }

    /// A field's format spec, after its `:`, to the field's `}`.
    fn spec(&mut self, open: usize, q: u8, triple: bool, raw: bool) -> Result<(), LexError> {
        let unclosed = LexError::Brace(BraceError::Unclosed { open });
        loop {
            let Some(c) = self.at(self.pos) else {
                return Err(unclosed);
            };
            let quote = self.pos;
            if self.closes(q, triple) {
                self.pos = quote;
                return Err(unclosed);
            }
            match c {
                b'\\' => self.escape(raw, true)?,
                b'\r' | b'\n' if !triple => return Err(unclosed),
                b'{' if self.at(self.pos + 1) == Some(b'{') => return Err(LexError::Other),
                b'{' => self.field(q, triple, raw)?,
                b'}' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => self.pos += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(Kind, &str)> {
        lex(src)
            .unwrap()
            .iter()
            .map(|t| (t.kind, t.text(src)))
            .collect()
    }

    #[test]
    fn tokens_of_a_small_program() {
        let src = "x = f'{a.b!r:>{w}}' + rb\"\\\"\" # c\nif x:\n    y(1e-5, **k)\n";
        use Kind::*;
        assert_eq!(
            kinds(src),
            vec![
                (Name, "x"),
                (Op, "="),
                (Name, "a"),
                (Op, "."),
                (Name, "b"),
                (Name, "w"),
                (FStr, "f'{a.b!r:>{w}}'"),
                (Op, "+"),
                (Str, "rb\"\\\"\""),
                (Newline, "\n"),
                (Name, "if"),
                (Name, "x"),
                (Op, ":"),
                (Newline, "\n"),
                (Name, "y"),
                (Op, "("),
                (Number, "1e-5"),
                (Op, ","),
                (Op, "**"),
                (Name, "k"),
                (Op, ")"),
                (Newline, "\n"),
            ]
        );
    }

    #[test]
    fn pep_701_f_strings_nest_quotes_and_span_lines() {
        let src = "s = f\"{d[\"a\"]} {', '.join([\n  x,\n])} \\N{BULLET} {{lit}}\"\n";
        let tokens = lex(src).unwrap();
        assert_eq!(tokens.iter().filter(|t| t.kind == Kind::FStr).count(), 1);
        assert!(tokens.iter().any(|t| t.nested && t.text(src) == "\"a\""));
    }

    #[test]
    fn brace_mistakes_are_reported_where_python_rejects_the_source() {
        let err = |src: &str| lex(src).unwrap_err();
        assert_eq!(
            err("f'a } b'"),
            LexError::Brace(BraceError::LoneClose { at: 4 })
        );
        assert_eq!(
            err("f'\\\\boxed{}'"),
            LexError::Brace(BraceError::Empty { open: 9, close: 10 })
        );
        assert_eq!(
            err("f'{your answer}'"),
            LexError::Brace(BraceError::Words { open: 2, close: 14 })
        );
        assert_eq!(
            err("f'use {x'\n"),
            LexError::Brace(BraceError::Unclosed { open: 6 })
        );
        assert_eq!(
            err("f'{x:>5'"),
            LexError::Brace(BraceError::Unclosed { open: 2 })
        );
        // Words with a keyword may be an expression; other failures are not brace mistakes.
        assert!(lex("f'{a if b else c}'").is_ok());
        assert_eq!(err("x = 'open\n"), LexError::Other);
        assert_eq!(err("t'{x}'"), LexError::Other);
        assert_eq!(err("f(]"), LexError::Other);
    }
}
