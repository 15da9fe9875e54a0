//! A lexical guard for Python written in a completion: a sampler setting that refuses tokens
//! after which the code could not be valid Python, whatever came next.
//!
//! A small model that has learned the shape of an environment still slips a token at a time:
//! `["ka", "ib"}`, a string that runs to the end of its line, `f"\boxed{}"`. Each makes the whole design a `SyntaxError`. The guard follows the
//! code as it is written, one character at a time, in the states Python's tokenizer has
//! (brackets, strings with their prefixes and triple quotes, escapes, PEP 701 f-strings with
//! their replacement fields and format specs, comments), and says when a token's text would
//! reach one of these dead ends:
//!
//! - a closing bracket that does not match the innermost open one (or closes nothing);
//! - the end of a line inside a one-line string (or a one-line f-string's format spec);
//! - an empty f-string field (`{}`, `{ }`) or a lone `}` in an f-string's literal text;
//! - a backslash outside a string not followed by a line break;
//! - a backtick outside a string and a comment that does not begin the closing fence (Python
//!   has no backtick).
//!
//! It is a guard, not a parser: indentation, grammar and names are not checked, and a state
//! it reaches is one that some continuation completes. It refuses only where the next token
//! can mend the slip. A bracket left open lines earlier (a `(` whose `)` never came before the
//! next `return`) cannot be mended from where it shows, so the code may end with one open,
//! and the check rejects it at once: refusing a statement keyword inside brackets, or the
//! closing fence while one is open, was tried and measured (docs/selfplay.md). The model did
//! not close the bracket; it wrote `breaks` for `break`, or another class, until the token
//! budget ran out, which costs a design's whole budget for the same rejection. The sampler redraws a refused token
//! (the same stream, that token masked), so a completion stays a function of the seed; the
//! log-probability kept for training is still the model's own (as with top-k and DRY).
//!
//! What it guards: with [`PythonGuard::fenced`], the first ```` ```python ```` fence of the
//! completion (the block a design is extracted from), nothing before it and nothing after its
//! closing fence; with [`PythonGuard::in_code`], the whole completion.

/// String prefixes, lower-cased (another name before a quote is a name, then a string).
const PREFIXES: &[&[u8]] = &[b"r", b"u", b"b", b"br", b"rb", b"f", b"fr", b"rf"];

/// The longest identifier kept (a longer one is not a string prefix).
const WORD: usize = 2;

/// The fence line that starts the guarded code.
const FENCE: &str = "```python";

/// One open thing, innermost last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// `(`, `[` or `{` in code (or in an f-string field).
    Bracket(u8),
    /// A string's body.
    Str {
        quote: u8,
        triple: bool,
        raw: bool,
        f: bool,
    },
    /// An f-string replacement field's expression; `empty` while only whitespace is in it.
    Field { empty: bool },
    /// A replacement field's format spec, after its `:`.
    Spec,
}

/// A character whose meaning depends on the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    None,
    /// An identifier (or number) is being written; its first [`WORD`] bytes and its length.
    Word {
        text: [u8; WORD],
        len: usize,
    },
    /// `n` (1 or 2) opening quotes of a string with these prefix flags.
    Open {
        quote: u8,
        n: u8,
        raw: bool,
        f: bool,
    },
    /// `n` (1 or 2) quotes inside a triple-quoted string, which a third would close.
    Close {
        n: u8,
    },
    /// A backslash in a string: the next character is escaped.
    Escape,
    /// `\N{` in a non-raw f-string: up to the `}` is a character name.
    Named,
    /// A `{` in f-string text: `{{` is a brace, anything else opens a field.
    FieldOpen,
    /// A `}` in f-string text: only `}}` is allowed.
    LoneClose,
    /// A backslash in code: a line break must follow.
    Continuation,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Before the fence; the current line so far (up to the fence's length).
    Prose(String),
    /// Inside the code.
    Code,
    /// After the code (or after a token was accepted that the guard refused): unguarded.
    Done,
}

/// The guard's state after the text fed so far. Cheap to clone: a candidate token is checked
/// on a copy ([`PythonGuard::allows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonGuard {
    mode: Mode,
    stack: Vec<Frame>,
    pending: Pending,
    comment: bool,
    /// Consecutive backticks just written (three end the code).
    ticks: u8,
}

/// A dead end: no continuation makes the code valid.
struct Dead;

type Step = Result<(), Dead>;

impl PythonGuard {
    /// A guard over the first ```` ```python ```` fence of a completion.
    pub fn fenced() -> Self {
        Self::with_mode(Mode::Prose(String::new()))
    }

    /// A guard over a completion that is all code (its prompt opened the fence).
    pub fn in_code() -> Self {
        Self::with_mode(Mode::Code)
    }

    fn with_mode(mode: Mode) -> Self {
        Self {
            mode,
            stack: Vec::new(),
            pending: Pending::None,
            comment: false,
            ticks: 0,
        }
    }

    /// Whether the guarded code is being written (the fence opened and has not closed).
    pub fn in_code_now(&self) -> bool {
        self.mode == Mode::Code
    }

    /// Whether nothing is left to guard: the code ended, or a dead end was fed.
    pub fn done(&self) -> bool {
        self.mode == Mode::Done
    }

    /// Whether `text` may come next: feeding it reaches no dead end.
    pub fn allows(&self, text: &str) -> bool {
        self.clone().run(text).is_ok()
    }

    /// Advances past `text` (what was sampled). Text that reaches a dead end (a token accepted
    /// after every redraw was refused) ends the guarding: from a dead end nothing is valid, so
    /// nothing more would be refused for a reason.
    pub fn feed(&mut self, text: &str) {
        if self.run(text).is_err() {
            *self = Self::with_mode(Mode::Done);
        }
    }

    fn run(&mut self, text: &str) -> Step {
        for (i, &c) in text.as_bytes().iter().enumerate() {
            match &mut self.mode {
                Mode::Done => return Ok(()),
                Mode::Prose(line) => {
                    if c == b'\n' || c == b'\r' {
                        let opens = line.trim_start().starts_with(FENCE);
                        line.clear();
                        if opens {
                            self.mode = Mode::Code;
                        }
                    } else if line.len() < 64 {
                        // Whole characters only: the byte at `i` starts or continues one.
                        line.push_str(char_at(text, i));
                    }
                }
                Mode::Code => self.code_byte(c)?,
            }
        }
        Ok(())
    }

    /// Whether the code written so far is complete lexically: nothing open, nothing pending but
    /// a word or an empty string, so the code could end here.
    pub fn is_complete(&self) -> bool {
        self.stack.is_empty()
            && matches!(
                self.pending,
                Pending::None | Pending::Word { .. } | Pending::Open { n: 2, .. }
            )
    }

    /// One byte of code (of any context inside the fence).
    fn code_byte(&mut self, c: u8) -> Step {
        // The extractor cuts the code at the first triple backtick, wherever it is.
        if c == b'`' {
            self.ticks += 1;
            if self.ticks == 3 {
                self.mode = Mode::Done;
                return Ok(());
            }
        } else if self.ticks > 0 {
            let in_text = self.comment || matches!(self.stack.last(), Some(Frame::Str { .. }));
            if !in_text {
                // A backtick in code only ever starts the closing fence.
                return Err(Dead);
            }
            self.ticks = 0;
        }
        if self.comment {
            if c == b'\n' || c == b'\r' {
                self.comment = false;
            }
            return Ok(());
        }
        self.resolve(c)
    }

    /// Settles a pending character with the one after it, then handles that one.
    fn resolve(&mut self, c: u8) -> Step {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => self.dispatch(c),
            Pending::Word { mut text, len } => {
                if is_ident(c) {
                    if len < WORD {
                        text[len] = c;
                    }
                    // Counted up to one past `WORD`: enough to know it is no prefix.
                    let len = (len + 1).min(WORD + 1);
                    self.pending = Pending::Word { text, len };
                    return Ok(());
                }
                if (c == b'"' || c == b'\'') && len <= WORD {
                    let lower = text[..len].to_ascii_lowercase();
                    if PREFIXES.contains(&lower.as_slice()) {
                        self.pending = Pending::Open {
                            quote: c,
                            n: 1,
                            raw: lower.contains(&b'r'),
                            f: lower.contains(&b'f'),
                        };
                        return Ok(());
                    }
                }
                self.dispatch(c)
            }
            Pending::Open { quote, n, raw, f } => {
                if c == quote && n == 1 {
                    self.pending = Pending::Open {
                        quote,
                        n: 2,
                        raw,
                        f,
                    };
                    Ok(())
                } else if c == quote {
                    self.stack.push(Frame::Str {
                        quote,
                        triple: true,
                        raw,
                        f,
                    });
                    Ok(())
                } else if n == 2 {
                    // `""`: an empty string, closed.
                    self.dispatch(c)
                } else {
                    self.stack.push(Frame::Str {
                        quote,
                        triple: false,
                        raw,
                        f,
                    });
                    self.dispatch(c)
                }
            }
            Pending::Close { n } => {
                let Some(Frame::Str { quote, .. }) = self.stack.last().copied() else {
                    unreachable!("a closing quote is pending only in a string")
                };
                if c == quote {
                    if n == 2 {
                        self.stack.pop();
                    } else {
                        self.pending = Pending::Close { n: 2 };
                    }
                    return Ok(());
                }
                self.dispatch(c)
            }
            Pending::Escape => {
                let f_brace = matches!(self.stack.last(), Some(Frame::Str { f: true, .. }))
                    && (c == b'{' || c == b'}');
                if f_brace {
                    // `\{` is a backslash, then a brace that opens (or closes) a field.
                    return self.dispatch(c);
                }
                let named = c == b'N'
                    && matches!(
                        self.stack.last(),
                        Some(Frame::Str {
                            f: true,
                            raw: false,
                            ..
                        })
                    );
                if named {
                    self.pending = Pending::Named;
                }
                Ok(())
            }
            Pending::Named => {
                if c == b'\n' || c == b'\r' {
                    return Err(Dead);
                }
                if c != b'}' {
                    self.pending = Pending::Named;
                }
                Ok(())
            }
            Pending::FieldOpen => {
                if c == b'{' {
                    return Ok(());
                }
                self.stack.push(Frame::Field { empty: true });
                self.dispatch(c)
            }
            Pending::LoneClose => {
                if c == b'}' {
                    Ok(())
                } else {
                    Err(Dead)
                }
            }
            Pending::Continuation => {
                if c == b'\n' || c == b'\r' {
                    Ok(())
                } else {
                    Err(Dead)
                }
            }
        }
    }

    /// A byte with nothing pending, by the innermost open thing.
    fn dispatch(&mut self, c: u8) -> Step {
        match self.stack.last().copied() {
            Some(Frame::Str {
                quote, triple, f, ..
            }) => self.string_byte(c, quote, triple, f),
            Some(Frame::Spec) => self.spec_byte(c),
            _ => self.expression_byte(c),
        }
    }

    fn string_byte(&mut self, c: u8, quote: u8, triple: bool, f: bool) -> Step {
        match c {
            b'\\' => self.pending = Pending::Escape,
            _ if c == quote => {
                if triple {
                    self.pending = Pending::Close { n: 1 };
                } else {
                    self.stack.pop();
                }
            }
            b'\n' | b'\r' if !triple => return Err(Dead),
            b'{' if f => self.pending = Pending::FieldOpen,
            b'}' if f => self.pending = Pending::LoneClose,
            _ => {}
        }
        Ok(())
    }

    fn spec_byte(&mut self, c: u8) -> Step {
        let Some(&Frame::Str { quote, triple, .. }) = self
            .stack
            .iter()
            .rev()
            .find(|f| matches!(f, Frame::Str { .. }))
        else {
            unreachable!("a format spec is inside an f-string")
        };
        match c {
            b'\\' => self.pending = Pending::Escape,
            b'{' => self.stack.push(Frame::Field { empty: true }),
            b'}' => {
                self.stack.pop();
                self.stack.pop();
            }
            b'\n' | b'\r' if !triple => return Err(Dead),
            // The string's own quote ends it with the field still open.
            _ if c == quote && !triple => return Err(Dead),
            _ => {}
        }
        Ok(())
    }

    /// A byte of an expression: code, or an f-string field.
    fn expression_byte(&mut self, c: u8) -> Step {
        let blank = matches!(c, b' ' | b'\t' | 0x0c | b'\n' | b'\r');
        let top = self.stack.last_mut();
        if let Some(Frame::Field { empty }) = top {
            if c == b'}' && *empty {
                return Err(Dead);
            }
            if !blank {
                *empty = false;
            }
        }
        match c {
            _ if blank => {}
            // The start of the closing fence ([`Self::code_byte`] counts).
            b'`' => {}
            b'#' => self.comment = true,
            b'\\' => self.pending = Pending::Continuation,
            b'"' | b'\'' => {
                self.pending = Pending::Open {
                    quote: c,
                    n: 1,
                    raw: false,
                    f: false,
                }
            }
            b'(' | b'[' | b'{' => self.stack.push(Frame::Bracket(c)),
            b')' | b']' | b'}' => match self.stack.last() {
                Some(&Frame::Bracket(open)) if open == opener(c) => {
                    self.stack.pop();
                }
                Some(Frame::Field { .. }) if c == b'}' => {
                    self.stack.pop();
                }
                _ => return Err(Dead),
            },
            b':' if matches!(self.stack.last(), Some(Frame::Field { .. })) => {
                self.stack.push(Frame::Spec);
            }
            _ if is_ident(c) => {
                let mut text = [0; WORD];
                text[0] = c;
                self.pending = Pending::Word { text, len: 1 };
            }
            _ => {}
        }
        Ok(())
    }
}

fn opener(close: u8) -> u8 {
    match close {
        b')' => b'(',
        b']' => b'[',
        _ => b'{',
    }
}

/// Letters, digits, `_` and any non-ASCII byte (identifiers may be Unicode; numbers are
/// followed as words too, and are never prefixes or keywords).
fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// The bytes of `text` at `i` if a character starts there, else nothing.
fn char_at(text: &str, i: usize) -> &str {
    if !text.is_char_boundary(i) {
        return "";
    }
    let end = (i + 1..=text.len())
        .find(|&e| text.is_char_boundary(e))
        .unwrap_or(text.len());
    &text[i..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard in code after `prefix`, which must be allowed.
    fn after(prefix: &str) -> PythonGuard {
        let g = PythonGuard::in_code();
        assert!(g.allows(prefix), "{prefix:?}");
        let mut g = g;
        g.feed(prefix);
        assert!(g.in_code_now(), "{prefix:?}");
        g
    }

    #[test]
    fn a_closing_bracket_must_match_the_innermost_open_one() {
        let g = after("x = [\"ka\", \"ib\"");
        assert!(g.allows("]"));
        assert!(!g.allows("}"));
        assert!(!g.allows(")"));
        assert!(!after("x = 1").allows(")"), "closes nothing");
        let g = after("d = {\"a\": (1, [2");
        assert!(g.allows("])}"));
        assert!(!g.allows("]})"));
        // Brackets inside strings and comments are text.
        assert!(after("s = '(]' # ]]\nt = 2").allows("\n"));
    }

    #[test]
    fn a_one_line_string_cannot_reach_the_end_of_its_line() {
        assert!(!after("s = o[\"price] * 2").allows("\n"));
        assert!(after("s = o[\"price").allows("\"]\n"));
        assert!(!after("s = 'it").allows("\n"));
        // Triple-quoted strings span lines; an escaped line break continues a one-line one.
        assert!(after("s = \"\"\"one").allows("\ntwo\"\"\"\n"));
        assert!(after("s = 'one\\").allows("\ntwo'\n"));
        // An escaped quote does not end a string, in a raw string either.
        assert!(!after("s = 'it\\'s").allows("\n"));
        assert!(!after("s = r'it\\'s").allows("\n"));
        // `''` is an empty string, closed; prefixes are read.
        assert!(after("s = '' + rb'x' + F''").allows("\n"));
    }

    #[test]
    fn f_string_fields_follow_pep_701() {
        assert!(!after("s = f\"\\\\boxed{").allows("}"));
        assert!(!after("s = f\"{ ").allows("}"));
        assert!(after("s = f\"{x").allows("}\"\n"));
        // `{{` and `}}` are braces; a lone `}` is refused once what follows it is known.
        assert!(after("s = f\"{{x}}\"").allows("\n"));
        let g = after("s = f\"a }");
        assert!(g.allows("}"));
        assert!(!g.allows(" b"));
        // Quotes, brackets and line breaks inside a field (PEP 701).
        assert!(after("s = f'{d[\"k\"]} {\", \".join([\n  a,\n])}'").allows("\n"));
        assert!(!after("s = f'{d[\"k\"").allows(")"));
        // Format specs: nested fields, and the spec's `}` closes the field.
        assert!(after("s = f'{x:>{w}.2f}'").allows("\n"));
        assert!(!after("s = f'{x:>5").allows("'"));
        // `\N{...}` is an escape in a non-raw f-string, not a field.
        assert!(after("s = f'\\N{BULLET} {x}'").allows("\n"));
        // In a plain string braces are text.
        assert!(after("s = '{}' + '}'").allows("\n"));
    }

    #[test]
    fn the_closing_fence_ends_the_code_whatever_is_open() {
        // A bracket left open cannot be mended from the end: the code may end, incomplete.
        let g = after("x = foo(1,\n");
        assert!(!g.is_complete());
        assert!(g.allows("```\n} ( ]"), "after the fence nothing is guarded");
        let g = after("x = foo(1)\n");
        assert!(g.is_complete());
        // A backtick in code is not Python unless it begins the fence; in a string it is text.
        assert!(!after("x = 1").allows(" `y`"));
        assert!(!after("x = 1").allows(" ``y"));
        assert!(after("s = 'a `b` c'").allows("\n"));
        // Three of them end the code even inside a string (the extractor cuts there).
        let mut g = after("s = \"\"\"doc\n");
        g.feed("```");
        assert!(g.done());
        assert!(!after("s = 'open").is_complete());
        // A continuation backslash must end its line.
        assert!(after("x = 1 + \\").allows("\n    2\n"));
        assert!(!after("x = 1 + \\").allows(" 2"));
    }

    #[test]
    fn fenced_guards_only_the_first_python_block() {
        let mut g = PythonGuard::fenced();
        assert!(g.allows("Here is the code } ] ) 'unclosed\n"));
        g.feed("Plan: write it.\n```python\n");
        assert!(g.in_code_now());
        g.feed("x = (1,");
        assert!(!g.allows("]"));
        assert!(!g.is_complete());
        g.feed(")\n```\n");
        assert!(!g.in_code_now());
        assert!(g.allows("} 'x\n```python\n)"));
    }

    #[test]
    fn a_dead_end_that_was_fed_anyway_ends_the_guarding() {
        let mut g = after("x = [1");
        g.feed("}");
        assert!(!g.in_code_now() && g.done());
        assert!(g.allows(")"));
    }

    #[test]
    fn a_token_may_split_anything() {
        // The same program fed whole and byte by byte reaches the same state.
        let src = "s = f'{x:>{w}}' + rb\"\\\"\" # c\nif x:\n    y((1e-5, **k), \"\"\"a\nb\"\"\")\n";
        let mut whole = PythonGuard::in_code();
        whole.feed(src);
        let mut bytes = PythonGuard::in_code();
        for i in 0..src.len() {
            bytes.feed(&src[i..i + 1]);
        }
        assert_eq!(whole, bytes);
        assert!(whole.in_code_now() && whole.is_complete());
    }

    /// Every Python file under `dirs` (relative to the workspace root).
    fn python_files(dirs: &[&str]) -> Vec<(std::path::PathBuf, String)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut out = Vec::new();
        let mut todo: Vec<_> = dirs.iter().map(|d| root.join(d)).collect();
        while let Some(p) = todo.pop() {
            if p.is_dir() {
                todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            } else if p.extension().is_some_and(|e| e == "py") {
                let src = std::fs::read_to_string(&p).unwrap();
                out.push((p, src));
            }
        }
        out
    }

    #[test]
    fn valid_environments_pass_whole_and_in_pieces() {
        let files = python_files(&["library_envs", "eval_envs", "tests/envs", "crates/selfplay"]);
        assert!(files.len() > 40, "{} files", files.len());
        for (path, src) in files {
            if path.ends_with("fault_syntax_error/env.py") {
                // `def reset(self, seed=None:`: a bracket left open, which only the end shows.
                let mut g = PythonGuard::in_code();
                g.feed(&src);
                assert!(g.in_code_now() && !g.is_complete());
                continue;
            }
            if src.contains("```") {
                // Valid Python, but a fence in a string would cut the extracted code there:
                // the guarding ends there.
                let mut g = PythonGuard::in_code();
                g.feed(&src);
                assert!(g.done(), "{}", path.display());
                continue;
            }
            let fenced = format!("Here it is.\n```python\n{src}```\nDone.");
            let g = PythonGuard::fenced();
            assert!(g.allows(&fenced), "{}", path.display());
            let mut whole = PythonGuard::in_code();
            whole.feed(&src);
            assert!(
                whole.in_code_now() && whole.is_complete(),
                "{}",
                path.display()
            );
            // Fed in pieces of 3 bytes (on character boundaries), the state is the same.
            let mut pieces = PythonGuard::in_code();
            let mut from = 0;
            while from < src.len() {
                let mut to = (from + 3).min(src.len());
                while !src.is_char_boundary(to) {
                    to += 1;
                }
                pieces.feed(&src[from..to]);
                from = to;
            }
            assert_eq!(whole, pieces, "{}", path.display());
        }
    }
}
