//! A package's modules as one environment source.
//!
//! The sandbox loads one source per environment, compiles it once, snapshots it once, and a
//! trajectory keeps it for replay. A package of several modules becomes such a source: its
//! modules' text goes into a table at the top, and a small finder (`loader.py`) serves them to
//! `import`, compiling each the first time it is imported. So the guest reads no files (the
//! package is read-only by construction: it is a string), a package environment snapshots and
//! replays exactly as a single module does, and only the modules an environment imports cost
//! anything at load.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::PackageError;

/// The most Python text a bundle may hold, in bytes: far above an environment package (RLVE's
/// largest environment with its base modules is under 100 KiB), well below what makes loading
/// slow (the bundle's text is compiled, as string constants, at every load without snapshot).
pub const MAX_BUNDLE_BYTES: usize = 8 << 20;

/// How deep a package's directories may nest (a guard against directory loops through links).
const MAX_DEPTH: usize = 32;

/// One module of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Its file name in tracebacks, relative to the package's parent (`Gym/environment.py`).
    pub filename: String,
    /// Whether it is a package (an `__init__.py`, or a directory without one).
    pub is_package: bool,
    /// Its Python source.
    pub text: String,
}

/// Modules by their dotted name, in a fixed (sorted) order so that a bundle's text, and so its
/// sha256, depend only on the package's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundle {
    modules: BTreeMap<String, Module>,
}

impl Bundle {
    /// An empty bundle.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every module under `dir`, as Python would import them with `dir` on `sys.path`; or, when
    /// `dir` holds an `__init__.py`, the package `dir` itself with its parent on `sys.path`.
    /// Files and directories whose names are not Python identifiers cannot be imported and are
    /// left out, as are `__pycache__` and hidden entries.
    pub fn from_dir(dir: &Path) -> Result<Self, PackageError> {
        let meta = std::fs::metadata(dir).map_err(|e| PackageError::io(dir, e))?;
        if !meta.is_dir() {
            return Err(PackageError::NotADirectory(dir.to_path_buf()));
        }
        let mut bundle = Bundle::new();
        if dir.join("__init__.py").is_file() {
            let name = dir
                .file_name()
                .and_then(|n| n.to_str())
                .filter(|n| is_identifier(n))
                .ok_or_else(|| PackageError::BadPackageName(dir.to_path_buf()))?;
            bundle.add_tree(dir, name, name, 0)?;
        } else {
            for (path, stem, is_dir) in entries(dir)? {
                if is_dir {
                    bundle.add_tree(&path, &stem, &stem, 0)?;
                } else {
                    bundle.add_file(&path, &stem, &format!("{stem}.py"), false)?;
                }
            }
        }
        if bundle.modules.is_empty() {
            return Err(PackageError::NoModules(dir.to_path_buf()));
        }
        bundle.check_size()?;
        Ok(bundle)
    }

    /// Adds the package directory `dir` as module `name` (file names under `filename`), with
    /// everything below it.
    pub(crate) fn add_tree(
        &mut self,
        dir: &Path,
        name: &str,
        filename: &str,
        depth: usize,
    ) -> Result<(), PackageError> {
        if depth > MAX_DEPTH {
            return Err(PackageError::TooDeep(dir.to_path_buf()));
        }
        let init = dir.join("__init__.py");
        if init.is_file() {
            self.add_file(&init, name, &format!("{filename}/__init__.py"), true)?;
        } else {
            self.add_text(name, &format!("{filename}/"), true, String::new());
        }
        for (path, stem, is_dir) in entries(dir)? {
            if stem == "__init__" {
                continue;
            }
            let (child, child_file) = (format!("{name}.{stem}"), format!("{filename}/{stem}"));
            if is_dir {
                self.add_tree(&path, &child, &child_file, depth + 1)?;
            } else {
                self.add_file(&path, &child, &format!("{child_file}.py"), false)?;
            }
        }
        Ok(())
    }

    /// Adds the file `path` as module `name`.
    pub(crate) fn add_file(
        &mut self,
        path: &Path,
        name: &str,
        filename: &str,
        is_package: bool,
    ) -> Result<(), PackageError> {
        let bytes = std::fs::read(path).map_err(|e| PackageError::io(path, e))?;
        let text =
            String::from_utf8(bytes).map_err(|_| PackageError::NotUtf8(path.to_path_buf()))?;
        // Python decodes a source file as UTF-8 with its byte-order mark removed; `compile`
        // of a string would reject the mark.
        let text = match text.strip_prefix('\u{feff}') {
            Some(rest) => rest.to_owned(),
            None => text,
        };
        self.add_text(name, filename, is_package, text);
        Ok(())
    }

    /// Adds (or replaces) module `name` with the given text.
    pub fn add_text(&mut self, name: &str, filename: &str, is_package: bool, text: String) {
        self.modules.insert(
            name.to_owned(),
            Module {
                filename: filename.to_owned(),
                is_package,
                text,
            },
        );
    }

    /// The module called `name`, if the bundle has it.
    pub fn module(&self, name: &str) -> Option<&Module> {
        self.modules.get(name)
    }

    /// The modules' names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.modules.keys().map(String::as_str)
    }

    /// Bytes of Python text the bundle holds.
    pub fn bytes(&self) -> usize {
        self.modules.values().map(|m| m.text.len()).sum()
    }

    pub(crate) fn check_size(&self) -> Result<(), PackageError> {
        let bytes = self.bytes();
        if bytes > MAX_BUNDLE_BYTES {
            return Err(PackageError::TooLarge {
                bytes,
                modules: self.modules.len(),
            });
        }
        Ok(())
    }

    /// The environment source: a header comment, the module table, the loader, then `entry`
    /// (the code that imports the environment and defines its `...Env` class).
    pub fn render(&self, header: &str, entry: &str) -> String {
        let mut out = String::with_capacity(self.bytes() + 4096 + entry.len());
        for line in header.lines() {
            out.push_str("# ");
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("_SPADE_PACKAGE_FILES = {\n");
        for (name, m) in &self.modules {
            // A JSON string is a valid Python string literal (`\"`, `\\`, `\n`, `\uXXXX`).
            out.push_str(&format!(
                "    {}: ({}, {}, {}),\n",
                py_str(name),
                py_str(&m.filename),
                if m.is_package { "True" } else { "False" },
                py_str(&m.text)
            ));
        }
        out.push_str("}\n");
        out.push_str(include_str!("loader.py"));
        out.push_str(entry);
        if !entry.ends_with('\n') {
            out.push('\n');
        }
        out
    }
}

/// `s` as a Python string literal.
fn py_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// Whether `s` is an ASCII Python identifier (what spade accepts as a module or class name).
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// A directory's importable entries, sorted: `(path, module name, is a directory)`.
fn entries(dir: &Path) -> Result<Vec<(PathBuf, String, bool)>, PackageError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| PackageError::io(dir, e))? {
        let entry = entry.map_err(|e| PackageError::io(dir, e))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if path.is_dir() {
            if is_identifier(&name) && name != "__pycache__" && has_python(&path)? {
                out.push((path, name, true));
            }
        } else if let Some(stem) = name.strip_suffix(".py")
            && is_identifier(stem)
        {
            out.push((path, stem.to_owned(), false));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Whether `dir` holds a `.py` file at any depth (a directory without one is not a package).
fn has_python(dir: &Path) -> Result<bool, PackageError> {
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(PackageError::TooDeep(d));
        }
        for entry in std::fs::read_dir(&d).map_err(|e| PackageError::io(&d, e))? {
            let path = entry.map_err(|e| PackageError::io(&d, e))?.path();
            if path.is_dir() {
                stack.push((path, depth + 1));
            } else if path.extension().is_some_and(|e| e == "py") {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("spade-bundle-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_path_entry_and_a_package_name_their_modules_as_python_does() {
        let root = tmp("names");
        write(&root, "top.py", "A = 1\n");
        write(&root, "pkg/__init__.py", "");
        write(&root, "pkg/sub/leaf.py", "B = 2\n");
        write(&root, "pkg/not-a-name.py", "");
        write(&root, "pkg/__pycache__/x.py", "");
        write(&root, "pkg/data.txt", "");
        write(&root, "bom.py", "\u{feff}X = 1\n");
        let b = Bundle::from_dir(&root).unwrap();
        let names: Vec<&str> = b.names().collect();
        assert_eq!(names, ["bom", "pkg", "pkg.sub", "pkg.sub.leaf", "top"]);
        // A byte-order mark is dropped, as Python's own import drops it.
        assert_eq!(b.module("bom").unwrap().text, "X = 1\n");
        assert!(b.module("pkg").unwrap().is_package);
        assert_eq!(b.module("pkg").unwrap().filename, "pkg/__init__.py");
        // A directory without `__init__.py` is a package with no code.
        assert_eq!(b.module("pkg.sub").unwrap().filename, "pkg/sub/");
        assert_eq!(b.module("pkg.sub.leaf").unwrap().text, "B = 2\n");
        // The package directory itself: named after the directory.
        let p = Bundle::from_dir(&root.join("pkg")).unwrap();
        let names: Vec<&str> = p.names().collect();
        assert_eq!(names, ["pkg", "pkg.sub", "pkg.sub.leaf"]);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn bad_directories_are_named_in_the_error() {
        let root = tmp("bad");
        let missing = root.join("missing");
        let e = Bundle::from_dir(&missing).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("cannot read"), "{e}");
        write(&root, "empty/notes.txt", "");
        let e = Bundle::from_dir(&root.join("empty"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no Python modules"), "{e}");
        write(&root, "latin/mod.py", "");
        std::fs::write(root.join("latin/mod.py"), [0x41, 0xff, 0x0a]).unwrap();
        let e = Bundle::from_dir(&root.join("latin"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("mod.py") && e.contains("UTF-8"), "{e}");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_bundle_over_the_size_limit_is_refused() {
        let mut b = Bundle::new();
        b.add_text("big", "big.py", false, "#".repeat(MAX_BUNDLE_BYTES + 1));
        let e = b.check_size().unwrap_err().to_string();
        assert!(e.contains("8 MiB"), "{e}");
    }

    #[test]
    fn the_rendered_table_holds_every_text_as_a_python_literal() {
        let mut b = Bundle::new();
        let text = "s = \"quote\\\\ \u{e9}\"\n\tx = '\u{0}'\n";
        b.add_text("m", "m.py", false, text.to_owned());
        let src = b.render("header line", "ENTRY = 1\n");
        assert!(src.starts_with("# header line\n_SPADE_PACKAGE_FILES = {\n"));
        assert!(src.contains(&format!("\"m\": (\"m.py\", False, {}),", py_str(text))));
        assert!(src.ends_with("ENTRY = 1\n"));
    }
}
