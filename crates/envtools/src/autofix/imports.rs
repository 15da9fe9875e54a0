//! Standard-library names used but never imported: `datetime.date(...)` with no
//! `import datetime` gets `import datetime` at the top, after the module docstring and any
//! `from __future__` lines.

use super::lexer::{Kind, Token};
use super::{Fix, FixKind, line_of};

/// Modules whose use as `module.attr` without an import gets `import module`. Each imports in
/// the sandbox (a test checks that). The modules the sandbox's loader injects (`random`, `re`,
/// `math`, `json`, `itertools`, `collections`, `functools`, `heapq`, `statistics`, `copy`,
/// `string`) are not here: they are never missing.
pub const MODULES: &[&str] = &[
    "abc",
    "bisect",
    "calendar",
    "cmath",
    "dataclasses",
    "datetime",
    "decimal",
    "enum",
    "fractions",
    "numbers",
    "operator",
    "textwrap",
    "time",
    "typing",
    "unicodedata",
];

/// `(name, module)`: names whose use as a call, an attribute's base or a decorator without an
/// import gets `from module import name`. None is a builtin or a `typing` name the loader
/// injects (`typing.Counter` and `typing.OrderedDict` are injected, so those are not here).
pub const NAMES: &[(&str, &str)] = &[
    ("Decimal", "decimal"),
    ("Enum", "enum"),
    ("Fraction", "fractions"),
    ("IntEnum", "enum"),
    ("combinations", "itertools"),
    ("dataclass", "dataclasses"),
    ("deepcopy", "copy"),
    ("defaultdict", "collections"),
    ("deque", "collections"),
    ("factorial", "math"),
    ("gcd", "math"),
    ("heapify", "heapq"),
    ("heappop", "heapq"),
    ("heappush", "heapq"),
    ("isqrt", "math"),
    ("lru_cache", "functools"),
    ("namedtuple", "collections"),
    ("permutations", "itertools"),
    ("reduce", "functools"),
    ("sqrt", "math"),
];

/// Names whose presence may bind any name at run time: a module using one gets no import fix.
const DYNAMIC: &[&str] = &["exec", "globals", "builtins", "__builtins__", "__dict__"];

/// `text` with the missing imports added, and the fixes (none: `text` unchanged).
pub(super) fn add_missing(text: &str, tokens: &[Token]) -> (String, Vec<Fix>) {
    let unchanged = (text.to_owned(), Vec::new());
    if dynamic(text, tokens) {
        return unchanged;
    }
    let mut wanted: Vec<(String, String, usize)> = Vec::new();
    for module in MODULES {
        if let Some(line) = unbound_use(text, tokens, module, false) {
            wanted.push((format!("import {module}"), (*module).to_owned(), line));
        }
    }
    for (name, module) in NAMES {
        if let Some(line) = unbound_use(text, tokens, name, true) {
            wanted.push((
                format!("from {module} import {name}"),
                (*name).to_owned(),
                line,
            ));
        }
    }
    if wanted.is_empty() {
        return unchanged;
    }
    let Some(at) = insertion_point(text, tokens) else {
        return unchanged;
    };
    wanted.sort();
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut block = String::new();
    if at > 0 && !text[..at].ends_with(['\n', '\r']) {
        block.push_str(eol);
    }
    let mut fixes = Vec::new();
    for (statement, name, line) in &wanted {
        block.push_str(statement);
        block.push_str(eol);
        fixes.push(Fix {
            kind: FixKind::MissingImport,
            line: *line,
            description: format!(
                "line {line}: added `{statement}` at the top (`{name}` is used there but never \
                 imported)"
            ),
        });
    }
    let mut fixed = String::with_capacity(text.len() + block.len());
    fixed.push_str(&text[..at]);
    fixed.push_str(&block);
    fixed.push_str(&text[at..]);
    (fixed, fixes)
}

fn is_op(src: &str, token: Option<&Token>, op: &str) -> bool {
    token.is_some_and(|t| t.kind == Kind::Op && t.text(src) == op)
}

fn is_name(src: &str, token: Option<&Token>, name: &str) -> bool {
    token.is_some_and(|t| t.kind == Kind::Name && t.text(src) == name)
}

/// Whether the module may bind names dynamically (`import *`, `exec`, `globals`, ...).
fn dynamic(src: &str, tokens: &[Token]) -> bool {
    tokens.iter().enumerate().any(|(i, t)| {
        (t.kind == Kind::Name && DYNAMIC.contains(&t.text(src)))
            || (is_name(src, Some(t), "import") && is_op(src, tokens.get(i + 1), "*"))
    })
}

/// Whether token `i` is in an import statement: `import` or `from` earlier in its statement.
fn in_import(src: &str, tokens: &[Token], i: usize) -> bool {
    tokens[..i]
        .iter()
        .rev()
        .take_while(|t| t.kind != Kind::Newline && !(t.kind == Kind::Op && t.text(src) == ";"))
        .any(|t| t.kind == Kind::Name && matches!(t.text(src), "import" | "from"))
}

/// The line of the first use of `name` when the module uses it and never binds it: every
/// occurrence (not after a `.`) is `name.attr`, or for a `call` name also `name(` or `@name`,
/// and none is in an import statement or after `def`/`class`. `None` otherwise.
fn unbound_use(src: &str, tokens: &[Token], name: &str, call: bool) -> Option<usize> {
    let mut first = None;
    for (i, t) in tokens.iter().enumerate() {
        if t.kind != Kind::Name || t.text(src) != name {
            continue;
        }
        let prev = i.checked_sub(1).and_then(|p| tokens.get(p));
        if is_op(src, prev, ".") {
            continue;
        }
        let next = tokens.get(i + 1);
        let used =
            is_op(src, next, ".") || (call && (is_op(src, next, "(") || is_op(src, prev, "@")));
        let defines = is_name(src, prev, "def") || is_name(src, prev, "class");
        if !used || defines || in_import(src, tokens, i) {
            return None;
        }
        first.get_or_insert(line_of(src, t.start));
    }
    first
}

/// Where the imports go: after the module docstring and the `from __future__` statements, at
/// the start of the first other statement's line. `None` when the first statement starts with
/// a string but is not only a docstring.
fn insertion_point(src: &str, tokens: &[Token]) -> Option<usize> {
    let top: Vec<&Token> = tokens.iter().filter(|t| !t.nested).collect();
    let mut statements = top.split(|t| t.kind == Kind::Newline).peekable();
    let newlines: Vec<&&Token> = top.iter().filter(|t| t.kind == Kind::Newline).collect();
    let mut after = None;
    let mut n = 0;
    if let Some(first) = statements.peek()
        && first.first().is_some_and(|t| t.kind == Kind::Str)
    {
        if !first.iter().all(|t| t.kind == Kind::Str) {
            return None;
        }
        statements.next();
        after = newlines.get(n).map(|t| t.end);
        n += 1;
    }
    for statement in statements {
        let future = matches!(
            statement,
            [from, future, ..] if is_name(src, Some(from), "from") && is_name(src, Some(future), "__future__")
        );
        if !future {
            return Some(match (after, statement.first()) {
                (Some(end), _) => end,
                (None, Some(t)) => line_start(src, t.start),
                (None, None) => 0,
            });
        }
        after = newlines.get(n).map(|t| t.end);
        n += 1;
    }
    Some(after.unwrap_or(0))
}

/// The byte offset where the line holding `at` starts.
fn line_start(src: &str, at: usize) -> usize {
    src[..at].rfind(['\n', '\r']).map_or(0, |i| i + 1)
}
