//! `spade convert`: RLVE's environments in the contract's single-file format, each checked
//! with `spade check` before it is written.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Args;
use spade_envtools::check::{CheckOptions, check};
use spade_envtools::package::rlve;
use spade_envtools::package::rlve_convert::{self, Form, Sources};
use spade_sandbox::Config;

use super::executor;

/// Exit code when an environment could not be converted or `spade check` rejected it
/// (without `--keep-going`).
pub const EXIT_NOT_CONVERTED: u8 = 2;

/// Write RLVE environments as single-file environments (`DIR/<name>/env.py` and
/// `DIR/<name>/skill.txt`, the layout of eval_envs/), each accepted by `spade check` first.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// RLVE environments, as `rlve:NAME` (RLVE is `pip install rlve-gym`; `$SPADE_RLVE_DIR`
    /// names the directory holding `Gym/` if python3 cannot import it).
    #[arg(
        value_name = "ENV",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub envs: Vec<String>,
    /// Every RLVE environment that has a parameter controller.
    #[arg(long)]
    pub all: bool,
    /// Output directory (created if missing); existing `<name>/` folders are overwritten.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Write the compact form: only what the contract class reaches, without comments,
    /// docstrings and blank lines (prompt text kept verbatim). Default: the full form.
    #[arg(long)]
    pub compact: bool,
    /// Go on past an environment that cannot be converted or that `spade check` rejects: it is
    /// reported and not written, and the command exits 0. Default: stop there and exit 2.
    #[arg(long)]
    pub keep_going: bool,
    /// Episodes per probe of the check (as `spade check --seeds`).
    #[arg(long, default_value_t = 5)]
    pub seeds: u32,
}

/// The RLVE identifier in `rlve:NAME`.
fn rlve_name(text: &str) -> anyhow::Result<&str> {
    match text.strip_prefix("rlve:") {
        Some(name) if spade_envtools::package::is_identifier(name) => Ok(name),
        _ => bail!(
            "'{text}' is not an RLVE environment: spade convert takes rlve:NAME (as in rlve:Multiplication), or --all"
        ),
    }
}

/// Makes `dir` and checks that a file can be written in it.
fn writable_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output directory '{}'", dir.display()))?;
    let probe = dir.join(".spade-convert-probe");
    std::fs::write(&probe, b"")
        .with_context(|| format!("cannot write in the output directory '{}'", dir.display()))?;
    std::fs::remove_file(&probe)
        .with_context(|| format!("cannot write in the output directory '{}'", dir.display()))
}

impl ConvertArgs {
    pub fn execute(self) -> anyhow::Result<ExitCode> {
        // Phase 1: every name and the package, before anything is written.
        let names: Vec<String> = self
            .envs
            .iter()
            .map(|t| rlve_name(t).map(str::to_owned))
            .collect::<anyhow::Result<_>>()?;
        let root = rlve::locate()?;
        let names = if self.all { rlve::names(&root)? } else { names };
        let sources: Vec<Sources> = names
            .iter()
            .map(|n| rlve_convert::read_sources(&root, n))
            .collect::<Result<_, _>>()?;
        writable_dir(&self.out)?;
        let form = if self.compact {
            Form::Compact
        } else {
            Form::Full
        };
        // Phase 2: convert, check, write, one at a time.
        let runtime = super::common::start_runtime(Config::default())?;
        let options = CheckOptions {
            seeds: self.seeds,
            ..CheckOptions::default()
        };
        let executor = executor()?;
        let (mut written, mut failed) = (0usize, 0usize);
        for sources in &sources {
            let name = &sources.name;
            let outcome = match rlve_convert::render(sources, form) {
                Err(why) => Err(format!("cannot convert rlve:{name} to one file: {why}")),
                Ok(source) => {
                    let report = executor.block_on(check(&runtime, &source, &options));
                    if report.accepted {
                        Ok(source)
                    } else {
                        let errors: Vec<_> = report
                            .findings
                            .iter()
                            .filter(|f| f.severity == spade_envtools::Severity::Error)
                            .collect();
                        let codes: Vec<&str> = errors.iter().map(|f| f.code.as_str()).collect();
                        let first = errors
                            .first()
                            .map(|f| f.message.lines().last().unwrap_or_default())
                            .unwrap_or_default();
                        Err(format!(
                            "rlve:{name} converted, but spade check rejects it ({}: {first}); not written",
                            codes.join(", ")
                        ))
                    }
                }
            };
            match outcome {
                Ok(source) => {
                    let path = write_env(&self.out, name, &source)?;
                    say!(
                        "WROTE {} ({} chars)",
                        path.display(),
                        source.chars().count()
                    );
                    written += 1;
                }
                Err(message) => {
                    say!("FAILED {message}");
                    failed += 1;
                    if !self.keep_going {
                        eprintln!(
                            "error: {message} (pass --keep-going to convert the others anyway)"
                        );
                        return Ok(ExitCode::from(EXIT_NOT_CONVERTED));
                    }
                }
            }
        }
        say!(
            "converted {written} of {} RLVE environments into {} ({} form); {failed} failed",
            sources.len(),
            self.out.display(),
            if self.compact { "compact" } else { "full" }
        );
        Ok(ExitCode::SUCCESS)
    }
}

/// Writes `dir/<name>/env.py` and `dir/<name>/skill.txt` (the RLVE identifier).
fn write_env(dir: &Path, name: &str, source: &str) -> anyhow::Result<PathBuf> {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder)
        .with_context(|| format!("cannot create '{}'", folder.display()))?;
    let env = folder.join("env.py");
    std::fs::write(&env, source).with_context(|| format!("cannot write '{}'", env.display()))?;
    let skill = folder.join("skill.txt");
    std::fs::write(&skill, format!("{name}\n"))
        .with_context(|| format!("cannot write '{}'", skill.display()))?;
    Ok(env)
}
