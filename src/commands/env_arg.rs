//! The environment argument that `run`, `check` and `fuzz` share: a Python file, an RLVE
//! environment (`rlve:Name`), or an entry point in a package directory
//! (`--package DIR module:Class`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use spade_envtools::package::EnvSpec;

use super::read_text;

/// Which environment to play.
#[derive(Debug, Args)]
pub struct EnvArg {
    /// The environment: a Python file defining one class whose name ends in `Env`;
    /// `rlve:NAME`, an environment of RLVE (`pip install rlve-gym`; `$SPADE_RLVE_DIR` names
    /// the directory holding `Gym/` if python3 cannot import it); or, with --package, an entry
    /// point `module:Class` of that package.
    #[arg(value_name = "ENV")]
    pub env: String,
    /// A directory of Python modules (or a package directory, with its `__init__.py`) that the
    /// environment is imported from. Its modules are bundled into the environment's source,
    /// read-only: the sandbox still reads no files.
    #[arg(long, value_name = "DIR")]
    pub package: Option<PathBuf>,
}

impl EnvArg {
    /// The spec the argument names.
    pub fn spec(&self) -> anyhow::Result<EnvSpec> {
        Ok(EnvSpec::parse(&self.env, self.package.as_deref())?)
    }

    /// The environment's source.
    pub fn source(&self) -> anyhow::Result<String> {
        spec_source(&self.spec()?, &self.env, "environment")
    }

    /// A name for the folders that keep this environment's outputs: the file's stem (its
    /// folder's name for an `env.py`), the entry class, or `rlve-Name`.
    pub fn name(&self) -> String {
        match self.spec() {
            Ok(EnvSpec::File(path)) => file_stem(&path),
            Ok(EnvSpec::Package { class, .. }) => class,
            Ok(EnvSpec::Rlve(name)) => format!("rlve-{name}"),
            Err(_) => "env".to_owned(),
        }
    }
}

/// The source of `spec` (written `text` by the user), with messages that call it `what`: a
/// file is read with [`read_text`]'s messages, a package or RLVE environment is bundled.
pub fn spec_source(spec: &EnvSpec, text: &str, what: &str) -> anyhow::Result<String> {
    match spec {
        EnvSpec::File(path) => read_text(path, &format!("{what} file")),
        spec => Ok(spec
            .resolve()
            .with_context(|| format!("loading {what} '{text}'"))?
            .source),
    }
}

/// A file's stem, or its folder's name for an `env.py`.
pub fn file_stem(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "env".to_owned());
    if stem == "env"
        && let Some(parent) = path.parent().and_then(Path::file_name)
    {
        return parent.to_string_lossy().into_owned();
    }
    stem
}
