//! Environments that are more than one module: a package directory with an entry point
//! (`--package DIR --env module:Class`), or an environment of RLVE's `Gym` package
//! (`rlve:Name`). Each becomes one environment source (a [`Bundle`]), which the sandbox loads,
//! snapshots, records and replays as it does a single module.
//!
//! [`EnvSpec`] is what a user names on the command line; [`EnvSpec::resolve`] gives its name
//! and source. [`rlve_convert`] renders an RLVE environment the other way round: as one
//! self-contained file in the contract's form (`spade convert`).

mod bundle;
mod pysource;
pub mod rlve;
pub mod rlve_convert;

use std::path::{Path, PathBuf};

pub use bundle::{Bundle, MAX_BUNDLE_BYTES, Module, is_identifier};

/// Why a package or an environment spec could not be turned into a source.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("cannot read '{path}': {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("'{0}' is not a directory: --package takes the directory that holds the modules")]
    NotADirectory(PathBuf),
    #[error(
        "'{0}' holds an __init__.py but its name is not a Python identifier, so it cannot be imported"
    )]
    BadPackageName(PathBuf),
    #[error("'{0}' holds no Python modules (no .py file under it whose path is importable)")]
    NoModules(PathBuf),
    #[error("'{0}' is nested more than 32 directories deep (a link loop?)")]
    TooDeep(PathBuf),
    #[error("'{0}' is not UTF-8 text; Python sources must be UTF-8")]
    NotUtf8(PathBuf),
    #[error(
        "the package holds {bytes} bytes of Python in {modules} modules, over the 8 MiB one environment may hold"
    )]
    TooLarge { bytes: usize, modules: usize },
    #[error("{0}")]
    BadSpec(String),
    #[error("the package has no module '{module}' (it has: {available})")]
    NoEntryModule { module: String, available: String },
    #[error("{0}")]
    Rlve(String),
    #[error("cannot convert rlve:{name} to one file: {why}")]
    Convert { name: String, why: String },
}

impl PackageError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        PackageError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// An environment as a user names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvSpec {
    /// A Python file defining one class whose name ends in `Env`.
    File(PathBuf),
    /// A class in a package directory: `--package DIR --env module:Class`.
    Package {
        dir: PathBuf,
        module: String,
        class: String,
    },
    /// An environment of RLVE's `Gym` package by its identifier (`rlve:Multiplication`).
    Rlve(String),
}

/// An environment spec turned into what the sandbox runs.
#[derive(Debug, Clone)]
pub struct ResolvedEnv {
    /// A short name for reports (the file's stem, the class, or `rlve:Name`).
    pub name: String,
    /// The environment source.
    pub source: String,
}

impl EnvSpec {
    /// Parses `text`: `rlve:NAME`; `module:Class` when `package` is given; a file path
    /// otherwise.
    pub fn parse(text: &str, package: Option<&Path>) -> Result<Self, PackageError> {
        if let Some(name) = text.strip_prefix("rlve:") {
            if package.is_some() {
                return Err(PackageError::BadSpec(format!(
                    "'{text}' names an RLVE environment; --package is for an entry point `module:Class` in that directory"
                )));
            }
            if !is_identifier(name) {
                return Err(PackageError::BadSpec(format!(
                    "'{text}': an RLVE environment is named by its identifier, as in rlve:Multiplication"
                )));
            }
            return Ok(EnvSpec::Rlve(name.to_owned()));
        }
        let Some(dir) = package else {
            return Ok(EnvSpec::File(PathBuf::from(text)));
        };
        let (module, class) = text.split_once(':').ok_or_else(|| {
            PackageError::BadSpec(format!(
                "with --package, the environment is an entry point `module:Class` (as in games.maze:MazeGame), not '{text}'"
            ))
        })?;
        if module.is_empty() || !module.split('.').all(is_identifier) || !is_identifier(class) {
            return Err(PackageError::BadSpec(format!(
                "'{text}' is not an entry point `module:Class`: the module is a dotted Python name and the class an identifier"
            )));
        }
        Ok(EnvSpec::Package {
            dir: dir.to_path_buf(),
            module: module.to_owned(),
            class: class.to_owned(),
        })
    }

    /// Reads what the spec names and gives its source.
    pub fn resolve(&self) -> Result<ResolvedEnv, PackageError> {
        match self {
            EnvSpec::File(path) => {
                let bytes = std::fs::read(path).map_err(|e| PackageError::io(path, e))?;
                let source =
                    String::from_utf8(bytes).map_err(|_| PackageError::NotUtf8(path.clone()))?;
                let name = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Ok(ResolvedEnv { name, source })
            }
            EnvSpec::Package { dir, module, class } => {
                let bundle = Bundle::from_dir(dir)?;
                Ok(ResolvedEnv {
                    name: class.clone(),
                    source: package_source(&bundle, dir, module, class)?,
                })
            }
            EnvSpec::Rlve(name) => Ok(ResolvedEnv {
                name: format!("rlve:{name}"),
                source: rlve::source(&rlve::locate()?, name)?,
            }),
        }
    }
}

/// The source of entry point `module:class` of `bundle`: the bundle, then a subclass of the
/// entry class defined in the environment module, where the sandbox looks for its `...Env`
/// class (named `class`, or `class` + `Env` when it does not end in `Env`).
pub fn package_source(
    bundle: &Bundle,
    dir: &Path,
    module: &str,
    class: &str,
) -> Result<String, PackageError> {
    if bundle.module(module).is_none() {
        let available: Vec<&str> = bundle.names().take(20).collect();
        return Err(PackageError::NoEntryModule {
            module: module.to_owned(),
            available: available.join(", "),
        });
    }
    let env_class = if class.ends_with("Env") {
        class.to_owned()
    } else {
        format!("{class}Env")
    };
    let entry = format!(
        "from {module} import {class} as _SpadeEntryClass\n\n\n\
         class {env_class}(_SpadeEntryClass):\n    \
         \"\"\"`{module}:{class}` of the bundled package.\"\"\"\n"
    );
    let header = format!(
        "spade environment bundle: entry point {module}:{class} of the package {}",
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string())
    );
    Ok(bundle.render(&header, &entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_by_their_form() {
        assert_eq!(
            EnvSpec::parse("rlve:Multiplication", None).unwrap(),
            EnvSpec::Rlve("Multiplication".into())
        );
        assert_eq!(
            EnvSpec::parse("envs/a.py", None).unwrap(),
            EnvSpec::File("envs/a.py".into())
        );
        assert_eq!(
            EnvSpec::parse("games.maze:Maze", Some(Path::new("pkg"))).unwrap(),
            EnvSpec::Package {
                dir: "pkg".into(),
                module: "games.maze".into(),
                class: "Maze".into()
            }
        );
    }

    #[test]
    fn bad_specs_say_what_is_expected() {
        let e =
            |t: &str, p: Option<&str>| EnvSpec::parse(t, p.map(Path::new)).unwrap_err().to_string();
        assert!(e("rlve:", None).contains("rlve:Multiplication"));
        assert!(e("rlve:a-b", None).contains("identifier"));
        assert!(e("rlve:Sorting", Some("d")).contains("--package"));
        assert!(e("maze.py", Some("d")).contains("module:Class"));
        assert!(e("games.:Maze", Some("d")).contains("dotted Python name"));
        assert!(e("games:9x", Some("d")).contains("not an entry point"));
    }

    #[test]
    fn a_missing_entry_module_lists_what_the_package_has() {
        let mut b = Bundle::new();
        b.add_text("games", "games/__init__.py", true, String::new());
        let e = package_source(&b, Path::new("pkg"), "game", "Maze")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "the package has no module 'game' (it has: games)");
    }
}
