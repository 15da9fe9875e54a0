//! RLVE's environments in the contract's single-file form: `spade convert rlve:NAME`.
//!
//! [`convert`] renders `rlve:NAME` as one self-contained Python module: RLVE's environment
//! class and its parameter controller (their modules, read from the installed `Gym` package
//! at run time), only what they use of `Gym`'s base modules (`Gym/environment.py`,
//! `Gym/parameter_controller.py`) inlined, and a contract class `NAMEEnv` with
//! `reset(seed, difficulty=0)`, `step(action)`, `solution()` and `close()` that plays it
//! exactly as `rlve:NAME`'s adapter does. Its imports are the standard library's only.
//!
//! "What they use" is found by reachability over top-level definitions: a definition of a
//! base module is kept when a kept piece reads its name (resolved in the reading module, as
//! Python would: its own definitions, then what it imports from `Gym`), and a method of a
//! base class is kept when any kept piece reads its name (`self.verifier(...)`), or it is
//! `__init__`. Reads are over-approximated (every name token and attribute name, every word
//! of an f-string), so nothing read is ever left out.
//!
//! Two forms ([`Form`]): [`Form::Full`] keeps the environment's and controller's modules
//! whole, comments and docstrings included. [`Form::Compact`], for a model's context, keeps
//! only what the contract class reaches (unused helpers dropped), drops the base classes'
//! abstract stubs, and then every comment, docstring and blank line
//! ([`super::pysource::compact`]); code and every string that is a value (the prompt
//! templates) stay byte for byte.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::PackageError;
use super::pysource::{self, Line, Stmt, TokKind, tok_text};

/// The contract class of the full form: `rlve:NAME`'s adapter, with its checks and messages.
const TEMPLATE: &str = include_str!("rlve_single_file.py");
/// The contract class of the compact form: the same play in fewer lines; a generator that
/// fails raises RLVE's own exception instead of the adapter's message.
const TEMPLATE_COMPACT: &str = include_str!("rlve_single_file_compact.py");

/// Top-level modules of Python 3.11's standard library (`sys.stdlib_module_names`, private
/// ones left out): the only imports a converted environment may keep.
const STDLIB: [&str; 218] = [
    "__future__",
    "abc",
    "aifc",
    "antigravity",
    "argparse",
    "array",
    "ast",
    "asynchat",
    "asyncio",
    "asyncore",
    "atexit",
    "audioop",
    "base64",
    "bdb",
    "binascii",
    "bisect",
    "builtins",
    "bz2",
    "cProfile",
    "calendar",
    "cgi",
    "cgitb",
    "chunk",
    "cmath",
    "cmd",
    "code",
    "codecs",
    "codeop",
    "collections",
    "colorsys",
    "compileall",
    "concurrent",
    "configparser",
    "contextlib",
    "contextvars",
    "copy",
    "copyreg",
    "crypt",
    "csv",
    "ctypes",
    "curses",
    "dataclasses",
    "datetime",
    "dbm",
    "decimal",
    "difflib",
    "dis",
    "distutils",
    "doctest",
    "email",
    "encodings",
    "ensurepip",
    "enum",
    "errno",
    "faulthandler",
    "fcntl",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "gc",
    "genericpath",
    "getopt",
    "getpass",
    "gettext",
    "glob",
    "graphlib",
    "grp",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "idlelib",
    "imaplib",
    "imghdr",
    "imp",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "lib2to3",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "mailcap",
    "marshal",
    "math",
    "mimetypes",
    "mmap",
    "modulefinder",
    "msilib",
    "msvcrt",
    "multiprocessing",
    "netrc",
    "nis",
    "nntplib",
    "nt",
    "ntpath",
    "nturl2path",
    "numbers",
    "opcode",
    "operator",
    "optparse",
    "os",
    "ossaudiodev",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "pipes",
    "pkgutil",
    "platform",
    "plistlib",
    "poplib",
    "posix",
    "posixpath",
    "pprint",
    "profile",
    "pstats",
    "pty",
    "pwd",
    "py_compile",
    "pyclbr",
    "pydoc",
    "pydoc_data",
    "pyexpat",
    "queue",
    "quopri",
    "random",
    "re",
    "readline",
    "reprlib",
    "resource",
    "rlcompleter",
    "runpy",
    "sched",
    "secrets",
    "select",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "site",
    "smtpd",
    "smtplib",
    "sndhdr",
    "socket",
    "socketserver",
    "spwd",
    "sqlite3",
    "sre_compile",
    "sre_constants",
    "sre_parse",
    "ssl",
    "stat",
    "statistics",
    "string",
    "stringprep",
    "struct",
    "subprocess",
    "sunau",
    "symtable",
    "sys",
    "sysconfig",
    "syslog",
    "tabnanny",
    "tarfile",
    "telnetlib",
    "tempfile",
    "termios",
    "textwrap",
    "this",
    "threading",
    "time",
    "timeit",
    "tkinter",
    "token",
    "tokenize",
    "tomllib",
    "trace",
    "traceback",
    "tracemalloc",
    "tty",
    "turtle",
    "turtledemo",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "urllib",
    "uu",
    "uuid",
    "venv",
    "warnings",
    "wave",
    "weakref",
    "webbrowser",
    "winreg",
    "winsound",
    "wsgiref",
    "xdrlib",
    "xml",
    "xmlrpc",
    "zipapp",
    "zipfile",
    "zipimport",
    "zlib",
    "zoneinfo",
];

/// Which rendering [`convert`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Form {
    /// The environment's and controller's modules whole, with their comments and docstrings.
    #[default]
    Full,
    /// Only what the contract class reaches, without comments, docstrings, blank lines and
    /// abstract stubs: the form that fits a small model's context.
    Compact,
}

/// One RLVE environment rendered as a single file.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The RLVE identifier (`Multiplication`).
    pub name: String,
    /// The contract class's name (`MultiplicationEnv`).
    pub class: String,
    /// The Python source.
    pub source: String,
    /// The skill it is filed under: the RLVE identifier (RLVE has no categories).
    pub skill: String,
}

/// The texts a conversion reads: Gym's two base modules and the two modules of one
/// environment, each with the path it is reported by.
#[derive(Debug, Clone)]
pub struct Sources {
    pub name: String,
    /// `rlve-gym`'s version, for the header.
    pub version: Option<String>,
    pub base_env: (String, String),
    pub base_ctrl: (String, String),
    pub env: (String, String),
    pub env_class: String,
    pub ctrl: (String, String),
    pub ctrl_class: String,
}

/// Converts `rlve:name`, reading the `Gym` package under `root`.
pub fn convert(root: &Path, name: &str, form: Form) -> Result<Converted, PackageError> {
    let sources = read_sources(root, name)?;
    let source = render(&sources, form).map_err(|why| PackageError::Convert {
        name: name.to_owned(),
        why,
    })?;
    Ok(Converted {
        name: name.to_owned(),
        class: format!("{name}Env"),
        source,
        skill: name.to_owned(),
    })
}

/// Reads what [`render`] needs for `name` from the `Gym` package under `root`.
pub fn read_sources(root: &Path, name: &str) -> Result<Sources, PackageError> {
    let gym = root.join("Gym");
    let ((env_module, env_class), (ctrl_module, ctrl_class)) = super::rlve::lookup(&gym, name)?;
    let read = |rel: String| -> Result<(String, String), PackageError> {
        let path = gym.join(&rel);
        let text = std::fs::read_to_string(&path).map_err(|e| PackageError::io(&path, e))?;
        Ok((format!("Gym/{rel}"), text))
    };
    let env_file = class_file(&gym, "environments", &env_module, &env_class)?;
    let ctrl_file = class_file(&gym, "parameter_controllers", &ctrl_module, &ctrl_class)?;
    Ok(Sources {
        name: name.to_owned(),
        version: super::rlve::version(root),
        base_env: read("environment.py".into())?,
        base_ctrl: read("parameter_controller.py".into())?,
        env: read(env_file)?,
        env_class,
        ctrl: read(ctrl_file)?,
        ctrl_class,
    })
}

/// The file (relative to `Gym/`) that defines `class` of `module` below `package`: the
/// module's own file, or for a package the submodule its `__init__.py` imports the class from
/// (`from .environment import Multiplication_Environment`).
fn class_file(
    gym: &Path,
    package: &str,
    module: &str,
    class: &str,
) -> Result<String, PackageError> {
    let rel = format!("{package}/{}", module.replace('.', "/"));
    if gym.join(format!("{rel}.py")).is_file() {
        return Ok(format!("{rel}.py"));
    }
    let init = gym.join(&rel).join("__init__.py");
    let text = std::fs::read_to_string(&init).map_err(|e| PackageError::io(&init, e))?;
    for line in text.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("from .") else {
            continue;
        };
        let Some((sub, names)) = rest.split_once(" import ") else {
            continue;
        };
        if names.split(',').any(|n| n.trim() == class) && sub.split('.').all(super::is_identifier) {
            return Ok(format!("{rel}/{}.py", sub.replace('.', "/")));
        }
    }
    Ok(format!("{rel}/__init__.py"))
}

/// What a top-level import binds: the rendered import and the name it binds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Import {
    /// `import module [as alias]`.
    Module {
        module: String,
        alias: Option<String>,
    },
    /// `from module import name [as alias]`.
    From {
        module: String,
        name: String,
        alias: Option<String>,
    },
}

impl Import {
    fn bound(&self) -> String {
        match self {
            Import::Module { module, alias } => alias
                .clone()
                .unwrap_or_else(|| module.split('.').next().unwrap_or(module).to_owned()),
            Import::From { name, alias, .. } => alias.clone().unwrap_or_else(|| name.clone()),
        }
    }

    fn module(&self) -> &str {
        match self {
            Import::Module { module, .. } | Import::From { module, .. } => module,
        }
    }
}

/// What a top-level statement is.
#[derive(Debug, Clone)]
enum Kind {
    /// Standard-library imports, one binding each.
    Imports(Vec<Import>),
    /// `from Gym.<base> import a, b`: names that another piece of the file defines.
    GymImport { base: usize, names: Vec<String> },
    /// A class, with the index of its `class ...:` line and its body's statements.
    Class { header: usize, members: Vec<Stmt> },
    /// Anything else (a def, an assignment, a module docstring).
    Other,
}

/// A top-level statement, parsed.
#[derive(Debug, Clone)]
struct Unit {
    stmt: Stmt,
    kind: Kind,
    /// The names it binds at module level.
    defines: Vec<String>,
    reads: BTreeSet<String>,
}

/// One module of the file to be, parsed.
struct Module<'a> {
    label: &'a str,
    src: &'a str,
    lines: Vec<Line>,
    units: Vec<Unit>,
}

/// The indices of the base modules in [`render`]'s list.
const BASE_ENV: usize = 0;
const BASE_CTRL: usize = 1;

impl<'a> Module<'a> {
    fn parse(label: &'a str, src: &'a str) -> Result<Self, String> {
        let lines = pysource::lines(src).map_err(|e| format!("{label}: {e}"))?;
        let mut units = Vec::new();
        for stmt in pysource::statements(&lines, 0..lines.len(), src) {
            units.push(parse_unit(label, src, &lines, stmt)?);
        }
        check_nested_imports(label, src, &lines)?;
        Ok(Module {
            label,
            src,
            lines,
            units,
        })
    }

    /// The units of this module that bind `name`.
    fn definers(&self, name: &str) -> impl Iterator<Item = usize> + '_ {
        let name = name.to_owned();
        (0..self.units.len()).filter(move |&u| self.units[u].defines.contains(&name))
    }

    fn text(&self, lines: std::ops::Range<usize>) -> &'a str {
        match (lines.start < lines.end, self.lines.get(lines.start)) {
            (true, Some(first)) => {
                &self.src[first.range.start..self.lines[lines.end - 1].range.end]
            }
            _ => "",
        }
    }
}

fn is_stdlib(module: &str) -> bool {
    let top = module.split('.').next().unwrap_or(module);
    STDLIB.binary_search(&top).is_ok()
}

/// The code tokens' texts of a statement's lines.
fn words<'s>(src: &'s str, lines: &[Line]) -> Vec<&'s str> {
    lines
        .iter()
        .flat_map(|l| l.code().map(|t| tok_text(src, t)))
        .collect()
}

/// Names an import statement lists, each with its `as` alias.
type Aliased = Vec<(String, Option<String>)>;

/// Parses `import a.b as c, d` or `from m import (x as y, z)` given as code words: the `from`
/// module (empty for `import`) and the names.
fn parse_import(w: &[&str]) -> Result<(String, Aliased), String> {
    let bad = || format!("cannot read the import `{}`", w.join(" "));
    let names_from = |rest: &[&str]| -> Result<Aliased, String> {
        let rest: Vec<&str> = rest
            .iter()
            .copied()
            .filter(|t| *t != "(" && *t != ")")
            .collect();
        let mut out = Vec::new();
        for part in rest.split(|t| *t == ",").filter(|p| !p.is_empty()) {
            match part {
                [name] => out.push((name.to_string(), None)),
                [name, "as", alias] => out.push((name.to_string(), Some(alias.to_string()))),
                _ => return Err(bad()),
            }
        }
        Ok(out)
    };
    match w.first() {
        Some(&"import") => {
            // Dotted names arrive as name, ".", name: join them back.
            let joined: Vec<String> = w[1..]
                .split(|t| *t == ",")
                .map(|part| {
                    let (dotted, alias) = match part {
                        [.., "as", alias] => (&part[..part.len() - 2], Some(*alias)),
                        _ => (part, None),
                    };
                    let mut s = dotted.concat();
                    if let Some(a) = alias {
                        s = format!("{s} as {a}");
                    }
                    s
                })
                .collect();
            let mut out = Vec::new();
            for piece in joined {
                let mut it = piece.split(" as ");
                let module = it.next().unwrap_or_default().to_owned();
                if module.is_empty() || !module.split('.').all(super::is_identifier) {
                    return Err(bad());
                }
                out.push((module, it.next().map(str::to_owned)));
            }
            Ok((String::new(), out))
        }
        Some(&"from") => {
            let at = w.iter().position(|t| *t == "import").ok_or_else(bad)?;
            let module = w[1..at].concat();
            if w[at + 1..].contains(&"*") {
                return Err(format!(
                    "`from {module} import *`: a star import cannot be resolved"
                ));
            }
            Ok((module, names_from(&w[at + 1..])?))
        }
        _ => Err(bad()),
    }
}

fn parse_unit(label: &str, src: &str, lines: &[Line], stmt: Stmt) -> Result<Unit, String> {
    let own = &lines[stmt.lines.clone()];
    let w = words(src, own);
    let first = w.first().copied().unwrap_or_default();
    let reads = pysource::names_read(src, own);
    if first == "import" || first == "from" {
        if w.contains(&";") {
            return Err(format!(
                "{label}: an import line with `;` (`{}`): write one statement per line",
                w.join(" ")
            ));
        }
        let (from, names) = parse_import(&w).map_err(|e| format!("{label}: {e}"))?;
        if first == "from" {
            let base = match from.as_str() {
                "Gym.environment" => Some(BASE_ENV),
                "Gym.parameter_controller" => Some(BASE_CTRL),
                _ => None,
            };
            if let Some(base) = base {
                if names.iter().any(|(_, alias)| alias.is_some()) {
                    return Err(format!(
                        "{label}: `{}` renames a name of {from}, which one file cannot do",
                        w.join(" ")
                    ));
                }
                let names: Vec<String> = names.into_iter().map(|(n, _)| n).collect();
                return Ok(Unit {
                    stmt,
                    kind: Kind::GymImport {
                        base,
                        names: names.clone(),
                    },
                    defines: Vec::new(),
                    reads: names.into_iter().collect(),
                });
            }
            check_import_source(label, &from)?;
            let imports: Vec<Import> = names
                .into_iter()
                .map(|(name, alias)| Import::From {
                    module: from.clone(),
                    name,
                    alias,
                })
                .collect();
            return Ok(Unit {
                stmt,
                defines: imports.iter().map(Import::bound).collect(),
                kind: Kind::Imports(imports),
                reads: BTreeSet::new(),
            });
        }
        let mut imports = Vec::new();
        for (module, alias) in names {
            check_import_source(label, &module)?;
            imports.push(Import::Module { module, alias });
        }
        return Ok(Unit {
            stmt,
            defines: imports.iter().map(Import::bound).collect(),
            kind: Kind::Imports(imports),
            reads: BTreeSet::new(),
        });
    }
    // Past decorators to the line that defines.
    let header = (stmt.lines.clone())
        .find(|&k| {
            !lines[k].blank()
                && lines[k]
                    .code()
                    .next()
                    .is_some_and(|t| tok_text(src, t) != "@")
        })
        .unwrap_or(stmt.lines.start);
    let hw: Vec<&str> = lines[header].code().map(|t| tok_text(src, t)).collect();
    let (kind, defines) = match hw.as_slice() {
        ["class", name, ..] => {
            let members = pysource::statements(lines, header + 1..stmt.lines.end, src);
            (Kind::Class { header, members }, vec![name.to_string()])
        }
        ["def", name, ..] | ["async", "def", name, ..] => (Kind::Other, vec![name.to_string()]),
        _ => {
            // Names assigned at the top level: those before the first `=`.
            let eq = hw.iter().position(|t| *t == "=");
            let targets = eq.map_or(&[][..], |at| &hw[..at]);
            let defines = targets
                .iter()
                .filter(|t| super::is_identifier(t))
                .map(|t| t.to_string())
                .collect();
            (Kind::Other, defines)
        }
    };
    Ok(Unit {
        stmt,
        kind,
        defines,
        reads,
    })
}

/// An import is kept only if it is the standard library's.
fn check_import_source(label: &str, module: &str) -> Result<(), String> {
    if module.starts_with('.') {
        return Err(format!(
            "{label} imports `{module}`, a module of its own package: the converter inlines only Gym's base modules"
        ));
    }
    if module == "Gym" || module.starts_with("Gym.") {
        return Err(format!(
            "{label} imports `{module}`: the converter inlines only Gym.environment and Gym.parameter_controller"
        ));
    }
    if !is_stdlib(module) {
        return Err(format!(
            "{label} imports `{module}`, which is not in Python's standard library (the sandbox has only the standard library)"
        ));
    }
    Ok(())
}

/// Imports inside functions stay where they are: they must be the standard library's too.
fn check_nested_imports(label: &str, src: &str, lines: &[Line]) -> Result<(), String> {
    for line in lines.iter().filter(|l| l.indent > 0 && !l.blank()) {
        let w: Vec<&str> = line.code().map(|t| tok_text(src, t)).collect();
        if !matches!(w.first(), Some(&"import" | &"from")) {
            continue;
        }
        let (from, names) = parse_import(&w).map_err(|e| format!("{label}: {e}"))?;
        if from.is_empty() {
            for (module, _) in names {
                check_import_source(label, &module)?;
            }
        } else {
            check_import_source(label, &from)?;
        }
    }
    Ok(())
}

/// Whether a class member is decorated with `@abstractmethod` (or `@abc.abstractmethod`).
fn is_abstract(m: &Module, member: &Stmt) -> bool {
    m.lines[member.lines.clone()]
        .iter()
        .take_while(|l| l.blank() || l.code().next().is_some_and(|t| tok_text(m.src, t) == "@"))
        .any(|l| {
            l.toks
                .iter()
                .any(|t| t.kind == TokKind::Name && tok_text(m.src, t) == "abstractmethod")
        })
}

/// The name a class member defines (`def name`), if it is a method.
fn member_name<'s>(m: &Module<'s>, member: &Stmt) -> Option<&'s str> {
    m.lines[member.lines.clone()].iter().find_map(|l| {
        let mut code = l.code();
        match code.next().map(|t| tok_text(m.src, t)) {
            Some("def") => code.next().map(|t| tok_text(m.src, t)),
            Some("async") => code.nth(1).map(|t| tok_text(m.src, t)),
            _ => None,
        }
    })
}

/// What of the modules goes into the file.
#[derive(Default)]
struct Kept {
    units: BTreeSet<(usize, usize)>,
    /// Members of base classes, by (module, unit, member).
    members: BTreeSet<(usize, usize, usize)>,
    /// Every name any kept piece reads.
    reads: BTreeSet<String>,
}

/// Renders the single file for `sources`. The error says what cannot be made one file.
pub fn render(sources: &Sources, form: Form) -> Result<String, String> {
    let template = match form {
        Form::Full => TEMPLATE,
        Form::Compact => TEMPLATE_COMPACT,
    };
    let adapter = template
        .replace("__SPADE_ENV_CLASS__", &sources.env_class)
        .replace("__SPADE_CTRL_CLASS__", &sources.ctrl_class)
        .replace("__SPADE_NAME__", &sources.name);
    let adapter = ("spade's contract class".to_owned(), adapter);
    // The compact form reads the modules without their `def` annotations, so that the
    // `typing` names only they used are not kept either.
    let prepare = |(label, text): &(String, String)| -> Result<(String, String), String> {
        Ok(match form {
            Form::Full => (label.clone(), text.clone()),
            Form::Compact => (
                label.clone(),
                pysource::strip_def_annotations(text).map_err(|e| format!("{label}: {e}"))?,
            ),
        })
    };
    let texts = [
        prepare(&sources.base_env)?,
        prepare(&sources.base_ctrl)?,
        prepare(&sources.env)?,
        prepare(&sources.ctrl)?,
        adapter,
    ];
    let texts = [&texts[0], &texts[1], &texts[2], &texts[3], &texts[4]];
    // Phase 1: parse every module (a base module's imports are checked only if kept).
    let modules = parse_all(&texts)?;
    // Phase 2: what is kept.
    let kept = reach(&modules, sources, form);
    // Phase 3: one namespace: no name bound twice to different things.
    check_collisions(&modules, &kept, form)?;
    // Phase 4: the text.
    let body = assemble(&modules, &kept, form);
    let version = sources.version.as_deref().unwrap_or("(version unknown)");
    Ok(match form {
        Form::Full => format!(
            "# RLVE's {name} (rlve-gym {version}, MIT, https://github.com/Zhiyuan-Zeng/RLVE) in one\n\
             # file: its environment and parameter controller, what they use of Gym's base modules,\n\
             # and the contract class {name}Env that plays it (written by `spade convert`).\n\n{body}",
            name = sources.name
        ),
        Form::Compact => {
            let body = pysource::compact(&body).map_err(|e| format!("compacting: {e}"))?;
            format!(
                "# RLVE's {} (rlve-gym {version}, MIT)\n{body}",
                sources.name
            )
        }
    })
}

fn parse_all<'a>(texts: &[&'a (String, String); 5]) -> Result<Vec<Module<'a>>, String> {
    texts
        .iter()
        .enumerate()
        .map(|(k, (label, src))| {
            if k == BASE_ENV || k == BASE_CTRL {
                parse_base(label, src)
            } else {
                Module::parse(label, src)
            }
        })
        .collect()
}

/// A base module: parsed like the others, but its imports are checked only when kept
/// (`Gym/environment.py` imports torch and numpy for a function no environment here uses).
fn parse_base<'a>(label: &'a str, src: &'a str) -> Result<Module<'a>, String> {
    let lines = pysource::lines(src).map_err(|e| format!("{label}: {e}"))?;
    let mut units = Vec::new();
    for stmt in pysource::statements(&lines, 0..lines.len(), src) {
        let w = words(src, &lines[stmt.lines.clone()]);
        let unit = match w.first() {
            Some(&"import" | &"from") => {
                let (from, names) = parse_import(&w).map_err(|e| format!("{label}: {e}"))?;
                let imports: Vec<Import> = if from.is_empty() {
                    names
                        .into_iter()
                        .map(|(module, alias)| Import::Module { module, alias })
                        .collect()
                } else {
                    names
                        .into_iter()
                        .map(|(name, alias)| Import::From {
                            module: from.clone(),
                            name,
                            alias,
                        })
                        .collect()
                };
                Unit {
                    stmt,
                    defines: imports.iter().map(Import::bound).collect(),
                    kind: Kind::Imports(imports),
                    reads: BTreeSet::new(),
                }
            }
            _ => parse_unit(label, src, &lines, stmt)?,
        };
        units.push(unit);
    }
    Ok(Module {
        label,
        src,
        lines,
        units,
    })
}

/// The units of `modules[m]` that `name`, read in module `m`, refers to: its own definition,
/// else the base definition it imports from Gym, else (for the contract class) the
/// environment's or controller's.
fn resolve(modules: &[Module], m: usize, name: &str) -> Vec<(usize, usize)> {
    let own: Vec<(usize, usize)> = modules[m].definers(name).map(|u| (m, u)).collect();
    if !own.is_empty() {
        return own;
    }
    for unit in &modules[m].units {
        if let Kind::GymImport { base, names } = &unit.kind
            && names.iter().any(|n| n == name)
        {
            return modules[*base].definers(name).map(|u| (*base, u)).collect();
        }
    }
    if m == 4 {
        for other in [2, 3] {
            let found: Vec<(usize, usize)> =
                modules[other].definers(name).map(|u| (other, u)).collect();
            if !found.is_empty() {
                return found;
            }
        }
    }
    Vec::new()
}

/// Phase 2: the fixpoint of what the roots read.
fn reach(modules: &[Module], sources: &Sources, form: Form) -> Kept {
    let mut kept = Kept::default();
    let mut todo: Vec<(usize, usize)> = Vec::new();
    // The roots: the contract class's module whole; in the full form the environment's and
    // controller's modules whole, in the compact form their two classes only.
    for (m, module) in modules.iter().enumerate().skip(2) {
        for (u, unit) in module.units.iter().enumerate() {
            let root = match form {
                Form::Full => true,
                Form::Compact => {
                    m == 4
                        || (m == 2 && unit.defines.contains(&sources.env_class))
                        || (m == 3 && unit.defines.contains(&sources.ctrl_class))
                }
            };
            if root {
                todo.push((m, u));
            }
        }
    }
    let mut members_todo = true;
    while !todo.is_empty() || members_todo {
        while let Some((m, u)) = todo.pop() {
            if !kept.units.insert((m, u)) {
                continue;
            }
            let unit = &modules[m].units[u];
            let reads: BTreeSet<String> = match &unit.kind {
                // A base class reads what its header reads; its members are kept one by one.
                Kind::Class { header, .. } if m <= BASE_CTRL => pysource::names_read(
                    modules[m].src,
                    &modules[m].lines[unit.stmt.lines.start..header + 1],
                ),
                _ => unit.reads.clone(),
            };
            for name in &reads {
                todo.extend(resolve(modules, m, name));
            }
            kept.reads.extend(reads);
        }
        // Members of kept base classes that a kept piece reads.
        members_todo = false;
        let classes: Vec<(usize, usize)> = kept
            .units
            .iter()
            .copied()
            .filter(|&(m, _)| m <= BASE_CTRL)
            .collect();
        for (m, u) in classes {
            let Kind::Class { members, .. } = &modules[m].units[u].kind else {
                continue;
            };
            for (k, member) in members.iter().enumerate() {
                if kept.members.contains(&(m, u, k)) {
                    continue;
                }
                let name = member_name(&modules[m], member);
                let wanted = match name {
                    Some("__init__") => true,
                    Some(n) => {
                        kept.reads.contains(n)
                            && !(form == Form::Compact && is_abstract(&modules[m], member))
                    }
                    // Class attributes and docstrings go with the class.
                    None => true,
                };
                if wanted {
                    kept.members.insert((m, u, k));
                    let reads = pysource::names_read(
                        modules[m].src,
                        &modules[m].lines[member.lines.clone()],
                    );
                    for name in &reads {
                        todo.extend(resolve(modules, m, name));
                    }
                    kept.reads.extend(reads);
                    members_todo = true;
                }
            }
        }
    }
    kept
}

/// Whether import `binding` of unit `(m, _)` is kept: every import of the environment's,
/// controller's and contract class's modules in the full form; otherwise one that a kept
/// piece reads.
fn binding_kept(kept: &Kept, m: usize, binding: &Import, form: Form) -> bool {
    (form == Form::Full && m > BASE_CTRL) || kept.reads.contains(&binding.bound())
}

/// Phase 3: the kept pieces bind each name once (the same import twice is one binding), and
/// every kept import is the standard library's.
fn check_collisions(modules: &[Module], kept: &Kept, form: Form) -> Result<(), String> {
    let mut bound: BTreeMap<String, Vec<(usize, Option<&Import>)>> = BTreeMap::new();
    for &(m, u) in &kept.units {
        let unit = &modules[m].units[u];
        match &unit.kind {
            Kind::Imports(imports) => {
                for binding in imports.iter().filter(|b| binding_kept(kept, m, b, form)) {
                    check_import_source(modules[m].label, binding.module())?;
                    bound
                        .entry(binding.bound())
                        .or_default()
                        .push((m, Some(binding)));
                }
            }
            _ => {
                for name in &unit.defines {
                    bound.entry(name.clone()).or_default().push((m, None));
                }
            }
        }
    }
    for (name, definers) in bound {
        let same_import = definers
            .iter()
            .all(|(_, b)| b.is_some() && *b == definers[0].1);
        if definers.len() > 1 && !same_import {
            let mut labels: Vec<&str> = definers.iter().map(|(m, _)| modules[*m].label).collect();
            labels.dedup();
            return Err(format!(
                "`{name}` is bound more than once ({}), and one file has one namespace",
                labels.join(", ")
            ));
        }
    }
    Ok(())
}

/// Phase 4: the imports, then every kept piece in the order of its module and line.
fn assemble(modules: &[Module], kept: &Kept, form: Form) -> String {
    let mut plain = BTreeSet::new();
    let mut from: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for &(m, u) in &kept.units {
        let Kind::Imports(imports) = &modules[m].units[u].kind else {
            continue;
        };
        for binding in imports.iter().filter(|b| binding_kept(kept, m, b, form)) {
            match binding {
                Import::Module { module, alias } => {
                    plain.insert(match alias {
                        Some(a) => format!("import {module} as {a}"),
                        None => format!("import {module}"),
                    });
                }
                Import::From {
                    module,
                    name,
                    alias,
                } => {
                    from.entry(module).or_default().insert(match alias {
                        Some(a) => format!("{name} as {a}"),
                        None => name.clone(),
                    });
                }
            }
        }
    }
    let mut head: Vec<String> = plain.into_iter().collect();
    head.extend(from.into_iter().map(|(module, names)| {
        format!(
            "from {module} import {}",
            names.into_iter().collect::<Vec<_>>().join(", ")
        )
    }));
    let mut pieces = vec![head.join("\n")];
    for &(m, u) in &kept.units {
        let module = &modules[m];
        let unit = &module.units[u];
        let text = match &unit.kind {
            Kind::Imports(_) | Kind::GymImport { .. } => continue,
            Kind::Class { header, members } if m <= BASE_CTRL => {
                let mut text = module.text(unit.stmt.lines.start..header + 1).to_owned();
                let mut any = false;
                for (k, member) in members.iter().enumerate() {
                    if kept.members.contains(&(m, u, k)) {
                        text.push_str(module.text(member.lines.clone()));
                        any = true;
                    }
                }
                if !any {
                    let indent = module.lines[*header].indent + 4;
                    text.push_str(&format!("{}pass\n", " ".repeat(indent)));
                }
                text
            }
            _ => module.text(unit.stmt.lines.clone()).to_owned(),
        };
        pieces.push(text.trim_end().to_owned());
    }
    let mut out = pieces.join("\n\n\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE_ENV_SRC: &str = "import os\nimport torch\nfrom abc import ABC, abstractmethod\nfrom typing import Dict, Optional\n\n\ndef manual_seed(s):\n    torch.manual_seed(s)\n\n\ndef timeout(seconds):\n    \"\"\"Unused by most.\"\"\"\n    return seconds\n\n\nclass VerifiableEnvironment(ABC):\n    \"\"\"Base.\"\"\"\n    def __init__(self):\n        self.seed = None\n\n    def generator(self, seed):\n        manual_seed(seed)\n\n    @abstractmethod\n    def _generate(self):\n        pass\n\n    def prompt_generator(self) -> str:\n        return self._prompt_generate()\n\n    def get_config(self) -> Dict:\n        return {}\n";
    const BASE_CTRL_SRC: &str = "from abc import ABC, abstractmethod\n\n\nclass ParameterController(ABC):\n    def __init__(self):\n        pass\n\n    @abstractmethod\n    def update(self):\n        pass\n";
    const ENV_SRC: &str = "import random\nfrom typing import Optional\nfrom Gym.environment import VerifiableEnvironment\n\n\ndef helper(x):\n    # doubles\n    return 2 * x\n\n\ndef unused():\n    return 0\n\n\nclass Toy_Environment(VerifiableEnvironment):\n    \"\"\"A toy.\"\"\"\n    def _generate(self):\n        self.parameter[\"reference_answer\"] = helper(random.randint(1, 9))\n\n    def _prompt_generate(self):\n        return \"Double it.  # not a comment\\n\\nAnswer.\"\n";
    const CTRL_SRC: &str = "from typing import Dict, List\nfrom Gym.parameter_controller import ParameterController\n\nclass Toy_ParameterController(ParameterController):\n    def update(self):\n        pass\n\n    def get_parameter_list(self) -> List[Dict]:\n        return [{}]\n";

    fn sources(env: &str) -> Sources {
        Sources {
            name: "Toy".into(),
            version: Some("0.0.1".into()),
            base_env: ("Gym/environment.py".into(), BASE_ENV_SRC.into()),
            base_ctrl: ("Gym/parameter_controller.py".into(), BASE_CTRL_SRC.into()),
            env: ("Gym/environments/toy/environment.py".into(), env.into()),
            env_class: "Toy_Environment".into(),
            ctrl: (
                "Gym/parameter_controllers/toy/parameter_controller.py".into(),
                CTRL_SRC.into(),
            ),
            ctrl_class: "Toy_ParameterController".into(),
        }
    }

    #[test]
    fn the_full_form_keeps_the_modules_and_only_the_base_code_they_use() {
        let out = render(&sources(ENV_SRC), Form::Full).unwrap();
        // No Gym import, no torch: `generator` (which seeds torch) is never read.
        assert!(!out.contains("from Gym"), "{out}");
        assert!(
            !out.contains("torch") && !out.contains("import os"),
            "{out}"
        );
        assert!(
            !out.contains("def generator") && !out.contains("def get_config"),
            "{out}"
        );
        assert!(!out.contains("def timeout"), "{out}");
        // What is read is there: the base class, its __init__, prompt_generator, the abstract
        // _generate that the contract class calls, and the module's own helpers, unused too.
        for kept in [
            "class VerifiableEnvironment(ABC):",
            "def prompt_generator(self) -> str:",
            "    @abstractmethod\n    def _generate(self):",
            "def unused():",
            "    # doubles\n",
            "\"\"\"A toy.\"\"\"",
            "class ToyEnv:",
            "class ParameterController(ABC):",
        ] {
            assert!(out.contains(kept), "{kept}: {out}");
        }
        // The imports, merged and sorted, at the top after the header.
        let imports: Vec<&str> = out
            .lines()
            .skip_while(|l| l.starts_with('#') || l.is_empty())
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(
            imports,
            [
                "import copy",
                "import random",
                "from abc import ABC, abstractmethod",
                "from typing import Dict, List, Optional"
            ]
        );
        // Base classes come before the classes that extend them.
        assert!(
            out.find("class VerifiableEnvironment").unwrap()
                < out.find("class Toy_Environment").unwrap()
        );
    }

    #[test]
    fn the_compact_form_drops_unused_helpers_stubs_comments_and_docstrings() {
        let out = render(&sources(ENV_SRC), Form::Compact).unwrap();
        for gone in [
            "def unused",
            "@abstractmethod",
            "abstractmethod",
            "# doubles",
            "\"\"\"",
            "\n\n",
            "Optional",
            "->",
        ] {
            assert!(!out.contains(gone), "{gone}: {out}");
        }
        // The prompt stays verbatim, `#` and blank line included; the helper it calls stays.
        assert!(
            out.contains("return \"Double it.  # not a comment\\n\\nAnswer.\""),
            "{out}"
        );
        assert!(out.contains("def helper(x):\n    return 2 * x\n"), "{out}");
        // Without `def` annotations, `typing` is not imported at all.
        assert!(out.starts_with("# RLVE's Toy (rlve-gym 0.0.1, MIT)\nimport copy\nimport random\nfrom abc import ABC\nclass VerifiableEnvironment(ABC):\n"), "{out}");
        assert!(out.contains("    def get_parameter_list(self):\n"), "{out}");
        // The controller base keeps its __init__; its abstract update is dropped.
        assert!(out.contains("class ParameterController(ABC):\n    def __init__(self):\n        pass\ndef helper(x):"), "{out}");
    }

    #[test]
    fn what_cannot_be_one_file_is_an_error_that_says_why() {
        let with = |env: &str| render(&sources(env), Form::Full).unwrap_err();
        assert_eq!(
            with("import networkx\nclass Toy_Environment:\n    pass\n"),
            "Gym/environments/toy/environment.py imports `networkx`, which is not in Python's standard library (the sandbox has only the standard library)"
        );
        assert_eq!(
            with("class Toy_Environment:\n    def f(self):\n        import numpy as np\n"),
            "Gym/environments/toy/environment.py imports `numpy`, which is not in Python's standard library (the sandbox has only the standard library)"
        );
        assert_eq!(
            with("from .helpers import h\nclass Toy_Environment:\n    pass\n"),
            "Gym/environments/toy/environment.py imports `.helpers`, a module of its own package: the converter inlines only Gym's base modules"
        );
        assert_eq!(
            with(
                "from Gym.environment import manual_seed\nclass Toy_Environment:\n    def f(self):\n        manual_seed(1)\n"
            ),
            "Gym/environment.py imports `torch`, which is not in Python's standard library (the sandbox has only the standard library)"
        );
        assert_eq!(
            with("x = 'open\n"),
            "Gym/environments/toy/environment.py: line 1: a string literal that does not end"
        );
    }

    #[test]
    fn a_name_bound_twice_to_different_things_is_refused() {
        // The environment's module and the contract class both define `_last_boxed`.
        let e = render(
            &sources("def _last_boxed(t):\n    return t\nclass Toy_Environment:\n    pass\n"),
            Form::Full,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "`_last_boxed` is bound more than once (Gym/environments/toy/environment.py, spade's contract class), and one file has one namespace"
        );
    }

    #[test]
    fn the_stdlib_list_is_sorted_for_its_binary_search() {
        assert!(STDLIB.windows(2).all(|w| w[0] < w[1]));
        assert!(is_stdlib("collections.abc") && is_stdlib("typing") && !is_stdlib("numpy"));
    }
}
