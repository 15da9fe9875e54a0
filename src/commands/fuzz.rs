//! `spade fuzz`: hunt for crashes, reward hacks and nondeterminism with generated actions.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use spade_envtools::fuzz::{FuzzOptions, FuzzReport, Progress, fuzz};
use spade_sandbox::{Config, Runtime};

use super::env_arg::EnvArg;
use super::executor;

/// Exit code when the campaign found something.
pub const EXIT_FOUND: u8 = 2;

/// Fuzz an environment with structure-aware actions across many seeded episodes.
#[derive(Debug, Args)]
pub struct FuzzArgs {
    #[command(flatten)]
    pub env: EnvArg,
    /// Run for this long (`60s`, `5m`, `1h`; a bare number is seconds).
    #[arg(long, value_parser = parse_duration, conflicts_with = "episodes")]
    pub time: Option<Duration>,
    /// Run this many episodes (reproducible; the default is 100 when --time is absent).
    #[arg(long)]
    pub episodes: Option<u64>,
    /// Master seed: the same seed and episode count give the same findings.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Directory for the trajectories of findings (one per distinct finding).
    #[arg(long, value_name = "DIR", default_value = "spade-fuzz")]
    pub out: PathBuf,
    /// A call using more than this many times the median step fuel is a finding.
    #[arg(long, default_value_t = 1000)]
    pub fuel_factor: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Snapshot fuzzing: keep a live copy of every state that reached new behaviour (a new
    /// observation shape, reward, error kind or set of info keys) and start every other
    /// episode from one of them, so that deep states are explored instead of replayed.
    #[arg(long)]
    pub fork: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (try 60s, 5m or 1h)"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit '{unit}' in '{text}' (use ms, s, m or h)"
            ));
        }
    };
    Ok(Duration::from_secs_f64(seconds))
}

impl FuzzArgs {
    pub fn execute(self) -> anyhow::Result<ExitCode> {
        let source = self.env.source()?;
        if self.episodes == Some(0) {
            bail!("--episodes must be at least 1");
        }
        let runtime = Runtime::new(Config::default()).context("starting the sandbox runtime")?;
        let options = FuzzOptions {
            seed: self.seed,
            episodes: match (self.episodes, self.time) {
                (None, None) => Some(100),
                (n, _) => n,
            },
            time: self.time,
            fuel_factor: self.fuel_factor,
            fork: self.fork,
            ..FuzzOptions::default()
        };
        let started = Instant::now();
        let tty = std::io::stderr().is_terminal();
        let total = options.episodes;
        let mut last_draw = Instant::now() - Duration::from_secs(1);
        let mut on_progress = |p: Progress| {
            // Progress is drawn at most 10 times a second; it never influences the run.
            if last_draw.elapsed() < Duration::from_millis(100) {
                return;
            }
            last_draw = Instant::now();
            let of = total.map(|n| format!("/{n}")).unwrap_or_default();
            let line = format!(
                "fuzz: {}{of} episodes, {} steps, {} findings, {:.1}s",
                p.episodes,
                p.steps,
                p.findings,
                p.elapsed.as_secs_f64()
            );
            if tty {
                eprint!("\r{line}\x1b[K");
                let _ = std::io::stderr().flush();
            }
        };
        let report = executor()?.block_on(fuzz(&runtime, &source, &options, &mut on_progress));
        if tty {
            eprintln!();
        }
        let elapsed = started.elapsed().as_secs_f64();
        let files = save(&report, &self.out)?;
        if self.json {
            let mut value = serde_json::to_value(&report)?;
            value["trajectory_files"] = serde_json::to_value(&files)?;
            value["seconds"] = serde_json::json!(elapsed);
            say!("{value}");
        } else {
            print_summary(&self.env.env, &report, &files, elapsed);
        }
        Ok(if report.findings.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_FOUND)
        })
    }
}

/// File name of a finding's trajectory: its code and signature. A signature that is not a file
/// name as it stands (characters other than ASCII letters and digits, more than 40 of them: an
/// exception class named in another script, a long contract message) is spelled with `_` and
/// also gets 8 hex digits of its sha256, so two findings never share a file.
fn file_name(code: &str, signature: &str) -> String {
    let sig: String = signature
        .chars()
        .take(40)
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if sig.is_empty() {
        format!("{code}.jsonl")
    } else if sig == signature {
        format!("{code}-{sig}.jsonl")
    } else {
        let hash = spade_envtools::trajectory::sha256_hex(signature.as_bytes());
        format!("{code}-{sig}-{}.jsonl", &hash[..8])
    }
}

fn save(report: &FuzzReport, out: &Path) -> anyhow::Result<Vec<String>> {
    let mut files = Vec::new();
    for finding in &report.findings {
        if finding.trajectory.is_empty() {
            files.push(String::new());
            continue;
        }
        std::fs::create_dir_all(out)
            .with_context(|| format!("creating the output directory '{}'", out.display()))?;
        let path = out.join(file_name(&finding.code, &finding.signature));
        std::fs::write(&path, &finding.trajectory)
            .with_context(|| format!("writing '{}'", path.display()))?;
        files.push(path.display().to_string());
    }
    Ok(files)
}

fn print_summary(env: &str, report: &FuzzReport, files: &[String], seconds: f64) {
    say!(
        "fuzzed {} ({}): {} episodes ({} from kept states), {} steps in {seconds:.1}s ({:.1} episodes/s), seed {}, {} replays, median step fuel {}, {} distinct states",
        env,
        report.class_name.as_deref().unwrap_or("?"),
        report.episodes,
        report.forked_episodes,
        report.steps,
        report.episodes as f64 / seconds.max(1e-9),
        report.seed,
        report.replays,
        report.median_step_fuel,
        report.states
    );
    if report.findings.is_empty() {
        say!("no findings");
        return;
    }
    say!("{} distinct findings:", report.findings.len());
    for (finding, file) in report.findings.iter().zip(files) {
        let what = if finding.signature.is_empty() {
            finding.code.clone()
        } else {
            format!("{} ({})", finding.code, finding.signature)
        };
        // A traceback's last line names the exception; other messages lead with the point.
        let first = if finding.message.contains("Traceback") {
            finding
                .message
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
        } else {
            finding.message.lines().next().unwrap_or("")
        };
        say!(
            "  {what}: {} episodes, first in episode {} (seed {}): {first}",
            finding.count,
            finding.episode,
            finding.episode_seed
        );
        if !file.is_empty() {
            say!("    replay: spade replay {file}");
        }
    }
}
