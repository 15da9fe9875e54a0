//! Hand-written cases of the automatic fixes: what each mistake becomes, and sources that must
//! come back unchanged.

use super::*;

fn fixed(src: &str) -> (String, Vec<(FixKind, usize)>) {
    let out = autofix(src);
    let fixes = out.fixes.iter().map(|f| (f.kind, f.line)).collect();
    (out.source, fixes)
}

const B: FixKind = FixKind::FStringBrace;
const I: FixKind = FixKind::MissingImport;

#[test]
fn literal_braces_in_f_strings_are_doubled() {
    assert_eq!(
        fixed("x = f'Answer as \\\\boxed{}, {n} left'\n"),
        (
            "x = f'Answer as \\\\boxed{{}}, {n} left'\n".to_owned(),
            vec![(B, 1)]
        )
    );
    assert_eq!(
        fixed("a = 1\nx = f\"Reply \\\\boxed{your answer} in {n} turns\"\n"),
        (
            "a = 1\nx = f\"Reply \\\\boxed{{your answer}} in {n} turns\"\n".to_owned(),
            vec![(B, 2)]
        )
    );
    assert_eq!(
        fixed("x = f'set {a} } b'\n"),
        ("x = f'set {a} }} b'\n".to_owned(), vec![(B, 1)])
    );
    assert_eq!(
        fixed("x = f'use {n then stop'\ny = 2\n"),
        ("x = f'use {{n then stop'\ny = 2\n".to_owned(), vec![(B, 1)])
    );
    // Two mistakes in one f-string, each its own fix.
    assert_eq!(
        fixed("x = f'{} and {a b} } {c}'\n"),
        (
            "x = f'{{}} and {{a b}} }} {c}'\n".to_owned(),
            vec![(B, 1), (B, 1), (B, 1)]
        )
    );
}

#[test]
fn fixes_say_what_they_changed() {
    let out = autofix("x = 1\ny = f'\\\\boxed{your answer}'\n");
    assert_eq!(
        out.fixes,
        vec![Fix {
            kind: FixKind::FStringBrace,
            line: 2,
            description: "line 2: doubled the braces of `{your answer}` in an f-string (words \
                          are not an expression; they were meant literally)"
                .to_owned(),
        }]
    );
}

#[test]
fn a_source_that_does_not_tokenize_after_the_fixes_is_left_alone() {
    // An unterminated plain string elsewhere: no fix can make it parse.
    for src in [
        "x = f'{}'\ny = 'open\n",
        "x = f'{a b}'\ny = (\n",
        "x = t'{}'\n",
    ] {
        assert_eq!(fixed(src), (src.to_owned(), vec![]), "{src:?}");
    }
}

#[test]
fn valid_f_strings_are_not_touched() {
    for src in [
        "x = f'{{}} {a!r:>{w}} {b=} {c if d else e} {f\"{g}\"} \\N{BULLET} {{lit}}'\n",
        "x = f\"{d[\"k\"]} {', '.join([\n    a,\n])}\"\n",
        "x = rf'\\{a}\\d+'\n",
        "x = f'''{\n  a\n}'''\n",
        "x = '{} }' + '{a b}'.upper()\n",
        "x = f'{a:{b}.{c}}'\n",
        "x = f'{\"a b\"}'\n",
    ] {
        assert_eq!(fixed(src), (src.to_owned(), vec![]), "{src:?}");
    }
}

#[test]
fn missing_standard_library_imports_are_added_after_the_docstring() {
    let src = "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\n\n# note\nclass AEnv:\n    def reset(self, seed=None):\n        self.d = datetime.date(2024, 1, 1)\n        self.q = deque([Fraction(1, 2)])\n";
    let want = "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nfrom collections import deque\nfrom fractions import Fraction\nimport datetime\n\n# note\nclass AEnv:\n    def reset(self, seed=None):\n        self.d = datetime.date(2024, 1, 1)\n        self.q = deque([Fraction(1, 2)])\n";
    assert_eq!(fixed(src), (want.to_owned(), vec![(I, 8), (I, 8), (I, 7)]));
    let out = autofix(src);
    assert_eq!(
        out.fixes[2].description,
        "line 7: added `import datetime` at the top (`datetime` is used there but never \
         imported)"
    );
    // No docstring: at the first statement's line, after leading comments.
    assert_eq!(
        fixed("# header\nx = time.time()"),
        (
            "# header\nimport time\nx = time.time()".to_owned(),
            vec![(I, 2)]
        )
    );
    // A decorator, and CRLF line ends kept.
    assert_eq!(
        fixed("'''d'''\r\n@dataclass\r\nclass P:\r\n    x: int\r\n"),
        (
            "'''d'''\r\nfrom dataclasses import dataclass\r\n@dataclass\r\nclass P:\r\n    x: int\r\n"
                .to_owned(),
            vec![(I, 2)]
        )
    );
    // A docstring alone without a final newline.
    assert_eq!(fixed("'''d'''"), ("'''d'''".to_owned(), vec![]));
    // Uses inside f-string fields count.
    assert_eq!(
        fixed("x = f'{textwrap.dedent(y)}'\n"),
        (
            "import textwrap\nx = f'{textwrap.dedent(y)}'\n".to_owned(),
            vec![(I, 1)]
        )
    );
}

#[test]
fn a_name_that_may_be_bound_gets_no_import() {
    for src in [
        // Injected by the loader: not missing.
        "x = random.randint(1, 6)\ny = re.sub('a', 'b', 'c')\nz = Counter('ab')\n",
        // Imported, in any form.
        "import datetime\nx = datetime.date.today()\n",
        "import datetime as dt\nx = datetime.date.today()\n",
        "from datetime import date\nx = datetime.date.today()\n",
        "def f():\n    import time\n    return time.time()\n",
        "try: import time\nexcept ImportError: pass\nx = time.time()\n",
        // Bound: assignment, parameter, loop target, def, with/except targets, global.
        "time = clock()\nx = time.now()\n",
        "def f(time):\n    return time.now()\n",
        "x = [time.hour for time in times]\n",
        "def deque(x):\n    return x\ny = deque(1)\n",
        "with open_it() as time:\n    time.read()\n",
        "def f():\n    global time\n    time = 1\nx = time.real\n",
        "x = lambda time: time.real\n",
        "x = f(sqrt=1)\ny = sqrt(2)\n",
        // Only an attribute of something else.
        "x = self.datetime.now()\n",
        // A value use (not a call or attribute) of a from-name.
        "x = sorted(y, key=deepcopy)\nz = deepcopy(y)\n",
        // Anything that can bind names dynamically.
        "from os import *\nx = time.time()\n",
        "globals()['time'] = 1\nx = time.time()\n",
        // A first statement that starts with a string but is not only a docstring.
        "'doc'; x = time.time()\n",
    ] {
        assert_eq!(fixed(src), (src.to_owned(), vec![]), "{src:?}");
    }
}

#[test]
fn brace_and_import_fixes_together() {
    let src = "class AEnv:\n    def reset(self, seed=None):\n        return f'Today is {datetime.date(2024, 1, 2)}. Answer \\\\boxed{your answer}.', {}\n";
    let want = "import datetime\nclass AEnv:\n    def reset(self, seed=None):\n        return f'Today is {datetime.date(2024, 1, 2)}. Answer \\\\boxed{{your answer}}.', {}\n";
    assert_eq!(fixed(src), (want.to_owned(), vec![(B, 3), (I, 3)]));
}

#[test]
fn lines_count_crlf_once() {
    assert_eq!(line_of("a\r\nb\nc\rd", 8), 4);
    assert_eq!(line_of("a\r\nb", 3), 2);
}

/// Every source of up to four pieces of a Python-ish alphabet (braces, quotes, backslashes,
/// newlines, a multi-byte character, ...): the fixes never panic, a source they leave without
/// fixes is byte-identical, and a source that tokenizes gets no brace fix.
#[test]
fn short_sources_of_every_shape_never_panic() {
    const PIECES: &[&str] = &[
        "f'", "{", "}", "'", "\"", "\\", "\n", "x", " ", "é", "#", "(", ")", ":", "time.",
        ".format(",
    ];
    let mut sources = vec![String::new()];
    let mut frontier = vec![String::new()];
    for _ in 0..4 {
        frontier = frontier
            .iter()
            .flat_map(|s| PIECES.iter().map(move |p| format!("{s}{p}")))
            .collect();
        sources.extend(frontier.iter().cloned());
    }
    assert!(sources.len() > 60_000, "{}", sources.len());
    for src in &sources {
        let out = autofix(src);
        if out.fixes.is_empty() {
            assert_eq!(&out.source, src);
        }
        if lexer::lex(src).is_ok() {
            assert!(
                out.fixes.iter().all(|f| f.kind != FixKind::FStringBrace),
                "{src:?}: {:?}",
                out.fixes
            );
        }
    }
}

const F: FixKind = FixKind::FormatBrace;

#[test]
fn format_strings_that_fail_for_certain_get_their_braces_doubled() {
    assert_eq!(
        fixed("x = 'Reply \\\\boxed{answer} in {n} turns'.format(n=3)\n"),
        (
            "x = 'Reply \\\\boxed{{answer}} in {n} turns'.format(n=3)\n".to_owned(),
            vec![(F, 1)]
        )
    );
    assert_eq!(
        fixed("y = 1\nx = \"\"\"{a} {your answer} }\"\"\".format(\n    a=1,\n)\n"),
        (
            "y = 1\nx = \"\"\"{a} {{your answer}} }}\"\"\".format(\n    a=1,\n)\n".to_owned(),
            vec![(F, 2), (F, 2)]
        )
    );
    assert_eq!(
        fixed("x = 'set {a'.format(a=1)\n"),
        ("x = 'set {{a'.format(a=1)\n".to_owned(), vec![(F, 1)])
    );
    let out = autofix("x = '{k}'.format()\n");
    assert_eq!(
        out.fixes[0].description,
        "line 1: doubled the braces of `{k}` in a string given to .format (the call passes no \
         argument of that name: a KeyError)"
    );
}

#[test]
fn format_strings_that_may_work_are_not_touched() {
    for src in [
        // Named, numbered and auto-numbered fields that the call may fill.
        "x = '{a} {0} {} {b.c} {d[0]} {e!r:>{w}}'.format(1, 2, a=1, b=2, d=3, e=4, w=5)\n",
        // Unknown keywords: `**kwargs` or `*args`.
        "x = '{answer}'.format(**values)\n",
        "x = '{answer}'.format(*values)\n",
        // Too few positional arguments is a guess, not a certainty about which brace.
        "x = '\\\\boxed{} {}'.format(1)\n",
        // Implicit concatenation, a template in a variable, bytes, escapes that make braces.
        "x = 'a' '{answer}'.format()\n",
        "t = '{answer}'\nx = t.format()\n",
        "x = b'{answer}'.format()\n",
        "x = '\\x7banswer}'.format()\n",
        "x = '\\{answer}'.format()\n",
        // Escaped braces.
        "x = '{{answer}} {{'.format()\n",
    ] {
        assert_eq!(fixed(src), (src.to_owned(), vec![]), "{src:?}");
    }
}
