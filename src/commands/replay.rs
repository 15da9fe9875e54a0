//! `spade replay`: re-execute a recorded episode and compare it field by field, or check a
//! trajectory for tampering without executing it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use spade_envtools::trajectory::{
    DEFAULT_MAX_FILE_BYTES, RecordedLimits, ReplayOptions, Trajectory, TrajectoryError, replay,
};
use spade_sandbox::{Config, Runtime};

use super::{EXIT_USAGE, executor, read_text};

/// Exit code when the replay diverged or the file was tampered with.
pub const EXIT_DIVERGED: u8 = 3;
/// Exit code when the file was cut short (its complete lines replayed identically).
pub const EXIT_TRUNCATED: u8 = 4;

/// Replay a trajectory file bit for bit, or check it for tampering.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trajectory file (written by `spade run --record` or any recorded `Episode`).
    pub trajectory: PathBuf,
    /// Use this environment source instead of the copy embedded in the trajectory (it must
    /// match the recorded sha256).
    #[arg(long, value_name = "ENV.py")]
    pub env: Option<PathBuf>,
    /// Replay even if the trajectory was recorded with a different guest build, and report it.
    #[arg(long)]
    pub allow_guest_mismatch: bool,
    /// Only check the trace hash and line chain (no execution).
    #[arg(long)]
    pub verify_hash: bool,
    /// Run under the limits the file records even where they exceed the local defaults (by
    /// default each is clamped to the local limit: a file from elsewhere could ask for unbounded
    /// fuel and time).
    #[arg(long)]
    pub trust_limits: bool,
    /// Refuse a trajectory file larger than this many bytes (default 1 GiB), before reading it.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_FILE_BYTES)]
    pub max_file_size: u64,
}

impl ReplayArgs {
    pub fn execute(self) -> anyhow::Result<ExitCode> {
        check_readable(&self.trajectory)?;
        let trajectory = match Trajectory::open(&self.trajectory, self.max_file_size) {
            Ok(t) => t,
            Err(err) => return Ok(fail(&self.trajectory, &err)),
        };
        if self.verify_hash {
            return Ok(match trajectory.verify() {
                Ok(verified) => match &trajectory.truncated {
                    Some(truncation) => {
                        eprintln!(
                            "truncated: {truncation}; the {} complete calls are intact",
                            verified.calls
                        );
                        ExitCode::from(EXIT_TRUNCATED)
                    }
                    None => {
                        say!(
                            "intact: {} calls, trace sha256 {}",
                            verified.calls,
                            verified.trace_sha256
                        );
                        ExitCode::SUCCESS
                    }
                },
                Err(err) => fail(&self.trajectory, &err),
            });
        }
        let env_source = match &self.env {
            Some(path) => Some(read_text(path, "environment file")?),
            None => None,
        };
        let options = ReplayOptions {
            env_source,
            allow_guest_mismatch: self.allow_guest_mismatch,
            trust_limits: self.trust_limits,
            dir: Some(
                self.trajectory
                    .parent()
                    .map_or_else(|| ".".into(), std::path::Path::to_path_buf),
            ),
        };
        let runtime = Runtime::new(Config::default()).context("starting the sandbox runtime")?;
        let report = match executor()?.block_on(replay(&runtime, &trajectory, &options)) {
            Ok(report) => report,
            Err(err) => return Ok(fail(&self.trajectory, &err)),
        };
        if let Some((recorded, this)) = &report.guest_mismatch {
            eprintln!(
                "warning: recorded with guest {recorded}, replayed with this build's guest {this}"
            );
        }
        if let Some((recorded, used)) = &report.clamped_limits {
            eprintln!(
                "warning: the file asks for limits above the local ones ({}); replayed under {} \
                 (pass --trust-limits to use the file's)",
                describe(recorded),
                describe(used)
            );
        }
        if let Some(divergence) = &report.divergence {
            eprintln!("diverged at {divergence}");
            return Ok(ExitCode::from(EXIT_DIVERGED));
        }
        if let Some(truncation) = &report.truncated {
            eprintln!(
                "truncated: {truncation}; the {} complete calls ({} steps) replayed identically",
                report.calls, report.steps
            );
            return Ok(ExitCode::from(EXIT_TRUNCATED));
        }
        // Under clamped limits the header (and so the trace hash) is this replay's own.
        let under = if report.clamped_limits.is_some() {
            " under the local limits"
        } else {
            ""
        };
        say!(
            "identical{under}: {} calls ({} steps), outcome {}, trace sha256 {}",
            report.calls,
            report.steps,
            report.outcome.as_deref().unwrap_or("unknown"),
            report.trace_sha256
        );
        Ok(ExitCode::SUCCESS)
    }
}

/// The same messages as for any other input file when `path` is missing or a directory (the
/// file itself is read, under its size cap, by `Trajectory::open`).
fn check_readable(path: &std::path::Path) -> anyhow::Result<()> {
    match std::fs::metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            anyhow::bail!("trajectory file '{}' does not exist", path.display())
        }
        Ok(meta) if meta.is_dir() => anyhow::bail!(
            "trajectory file '{}' is a directory, not a file",
            path.display()
        ),
        _ => Ok(()),
    }
}

fn describe(limits: &RecordedLimits) -> String {
    format!(
        "fuel {} per call, {} to load, memory {} bytes, deadline {} ms, output {} bytes",
        limits.fuel_per_call,
        limits.load_fuel,
        limits.memory_limit,
        limits.call_deadline_ms,
        limits.output_limit
    )
}

fn fail(path: &std::path::Path, err: &TrajectoryError) -> ExitCode {
    eprintln!("error: {}: {err}", path.display());
    match err {
        TrajectoryError::Tampered(_) => ExitCode::from(EXIT_DIVERGED),
        _ => ExitCode::from(EXIT_USAGE),
    }
}
