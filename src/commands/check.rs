//! `spade check`: decide whether a generated environment may enter training.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use spade_envtools::check::{CheckOptions, CheckReport, check};
use spade_envtools::{Fix, Severity, autofix};
use spade_sandbox::Config;

use super::env_arg::EnvArg;
use super::executor;

/// Exit code when the environment is rejected (at least one error finding).
pub const EXIT_REJECTED: u8 = 2;

/// Validate an environment: the reference's probes plus determinism, solution, reward-hacking,
/// episode-end, fuel and output checks. Exit 0 = accept, 2 = reject.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub env: EnvArg,
    /// Print the report as one JSON object (stable field names).
    #[arg(long)]
    pub json: bool,
    /// Episodes per probe (solution, garbage and random play).
    #[arg(long, default_value_t = 5)]
    pub seeds: u32,
    /// Directory for the trajectories of findings (replay them with `spade replay`), created
    /// only when a finding has one. Default: `.spade/check/<env>/` in the current directory,
    /// which ignores itself in git (`.spade/.gitignore`) and is emptied of the last check's
    /// trajectories of that env first.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Fuel budget per call (default: the runtime's, 10^10).
    #[arg(long)]
    pub fuel: Option<u64>,
    /// Fuel for the whole check, summed over every call; past it the check stops and rejects
    /// the environment with `validation_fuel` (default: no total).
    #[arg(long, value_name = "FUEL")]
    pub total_fuel: Option<u64>,
    /// Apply the automatic fixes first (f-string brace mistakes, standard-library names used
    /// but never imported: docs/check-and-fuzz.md), list them, and check the fixed source.
    #[arg(long)]
    pub fix: bool,
    /// With `--fix`: also write the fixed source to FILE (byte-identical when nothing was fixed).
    #[arg(long, value_name = "FILE", requires = "fix")]
    pub fix_out: Option<PathBuf>,
    /// Keep the older judgement of a solution that does not win: an error only where the env is
    /// single-answer by its behaviour, a warning in a multi-turn one (default: a solution must
    /// win when played in every env).
    #[arg(long)]
    pub lenient_solution: bool,
}

impl CheckArgs {
    pub fn execute(self) -> anyhow::Result<ExitCode> {
        let mut source = self.env.source()?;
        let mut fixes = None;
        if self.fix {
            let fixed = autofix(&source);
            if let Some(out) = &self.fix_out {
                std::fs::write(out, &fixed.source)
                    .with_context(|| format!("writing the fixed source '{}'", out.display()))?;
            }
            source = fixed.source;
            fixes = Some(fixed.fixes);
        }
        let started = Instant::now();
        let mut runtime = super::common::start_runtime(Config::default())?;
        if let Some(fuel) = self.fuel {
            let mut limits = runtime.limits().clone();
            limits.fuel_per_call = fuel;
            runtime = runtime.with_limits(limits);
        }
        let options = CheckOptions {
            seeds: self.seeds,
            fuel_budget: self.total_fuel,
            require_winning_solution: !self.lenient_solution,
            ..CheckOptions::default()
        };
        let mut report = executor()?.block_on(check(&runtime, &source, &options));
        let saved = match &self.out {
            Some(out) => save_trajectories(&mut report, out)?,
            None => save_to_default(&mut report, &self.env.name())?,
        };
        let seconds = started.elapsed().as_secs_f64();
        if self.json {
            match &fixes {
                Some(fixes) => {
                    let mut json = serde_json::to_value(&report)?;
                    if let Some(object) = json.as_object_mut() {
                        object.insert("fixes".to_owned(), serde_json::to_value(fixes)?);
                    }
                    say!("{json}");
                }
                None => say!("{}", serde_json::to_string(&report)?),
            }
        } else {
            if let Some(fixes) = &fixes {
                print_fixes(fixes);
            }
            print_human(&self.env.env, &report, seconds);
        }
        if let Some(out) = &self.fix_out {
            eprintln!("the fixed source is in {}", out.display());
        }
        if let Some(dir) = saved {
            // On stderr, so that `--json` output stays one object.
            eprintln!(
                "trajectories of the findings are in {}/ (replay one with `spade replay FILE`)",
                dir.display()
            );
        }
        Ok(if report.accepted {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_REJECTED)
        })
    }
}

/// Where `spade check` saves trajectories without `--out`: one folder per env under a folder
/// that git ignores wherever it is.
pub const DEFAULT_OUT: &str = ".spade/check";

/// Saves the trajectories under [`DEFAULT_OUT`]`/<name>/`, after removing the ones an earlier
/// check of this env left there. Returns the folder when something was written.
fn save_to_default(report: &mut CheckReport, name: &str) -> anyhow::Result<Option<PathBuf>> {
    let root = Path::new(DEFAULT_OUT);
    let dir = root.join(name);
    remove_old_trajectories(&dir)?;
    if !report.findings.iter().any(|f| f.trajectory.is_some()) {
        return Ok(None);
    }
    let ignore = root
        .parent()
        .expect("DEFAULT_OUT has a parent")
        .join(".gitignore");
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating the output directory '{}'", dir.display()))?;
    if !ignore.exists() {
        std::fs::write(
            &ignore,
            "# Written by `spade check`: trajectories of findings, not source.\n*\n",
        )
        .with_context(|| format!("writing '{}'", ignore.display()))?;
    }
    save_trajectories(report, &dir)
}

/// Removes the `.jsonl` files in `dir` (an earlier check's), leaving anything else.
fn remove_old_trajectories(dir: &Path) -> anyhow::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => {
            return Err(err).with_context(|| format!("reading the directory '{}'", dir.display()));
        }
    };
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading the directory '{}'", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            std::fs::remove_file(&path)
                .with_context(|| format!("removing the old trajectory '{}'", path.display()))?;
        }
    }
    Ok(())
}

/// Writes each finding's trajectory to `out/<code>.jsonl`. Returns `out` when something was
/// written.
fn save_trajectories(report: &mut CheckReport, out: &Path) -> anyhow::Result<Option<PathBuf>> {
    let mut wrote = false;
    for finding in &mut report.findings {
        let Some(text) = &finding.trajectory else {
            continue;
        };
        std::fs::create_dir_all(out)
            .with_context(|| format!("creating the output directory '{}'", out.display()))?;
        let path = out.join(format!("{}.jsonl", finding.code));
        std::fs::write(&path, text)
            .with_context(|| format!("writing the trajectory '{}'", path.display()))?;
        finding.trajectory_file = Some(path.display().to_string());
        wrote = true;
    }
    Ok(wrote.then(|| out.to_path_buf()))
}

/// The automatic fixes applied, before the report.
fn print_fixes(fixes: &[Fix]) {
    match fixes.len() {
        0 => say!("no automatic fix applied"),
        1 => say!("1 automatic fix applied:"),
        n => say!("{n} automatic fixes applied:"),
    }
    for fix in fixes {
        say!("  fixed: {}", fix.description);
    }
}

fn print_human(env: &str, report: &CheckReport, seconds: f64) {
    let verdict = if report.accepted { "ACCEPT" } else { "REJECT" };
    let class = report
        .class_name
        .as_deref()
        .unwrap_or("no environment class");
    say!(
        "{verdict} {} ({class}): {} errors, {} warnings, {} episodes in {seconds:.1}s",
        env,
        report.errors(),
        report.warnings(),
        report.stats.episodes
    );
    for finding in &report.findings {
        let severity = match finding.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let message = first_lines(&finding.message, 6);
        say!("  {severity} [{}] {message}", finding.code);
        if let Some(path) = &finding.trajectory_file {
            say!("    replay: spade replay {path}");
        }
    }
}

fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= n {
        return lines.join("\n    ");
    }
    let mut shown: Vec<&str> = lines[..2].to_vec();
    shown.push("...");
    shown.extend(&lines[lines.len() - (n - 3)..]);
    shown.join("\n    ")
}
