//! Process start to first reset: a child `spade` process builds a runtime with `spade run`'s
//! settings, loads a fixture, resets it and exits, timed whole by the parent and by phase from
//! inside. Each lever of the start is measured off and on in the same run, the settings
//! interleaved so that a slow minute of the machine hits them all alike.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use spade_sandbox::{Runtime, SandboxOptions};

use super::{ms, percentile, read_text};

/// How the probe starts and ends: `spade run`'s way, or with one lever of it undone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeSetting {
    /// `spade run`'s way: a current-thread executor, one engine, no teardown before exit.
    #[default]
    Run,
    /// With tokio's multi-thread executor (one worker per core, started and joined).
    MultiThread,
    /// Dropping the sandbox and the runtime before exit (the pool slot is reset for a next
    /// sandbox that never comes, the pool and the artifact unmapped one by one).
    Teardown,
    /// Building a second engine first to ask whether the artifact is cached
    /// (`Runtime::is_prepared`, as `spade run` did before `Runtime::new_announcing`).
    EngineTwice,
}

impl ProbeSetting {
    const ALL: [ProbeSetting; 4] = [
        ProbeSetting::Run,
        ProbeSetting::MultiThread,
        ProbeSetting::Teardown,
        ProbeSetting::EngineTwice,
    ];

    fn name(self) -> &'static str {
        match self {
            ProbeSetting::Run => "spade run's way",
            ProbeSetting::MultiThread => "multi-thread executor",
            ProbeSetting::Teardown => "teardown before exit",
            ProbeSetting::EngineTwice => "engine built twice",
        }
    }
}

/// What the probe measured inside itself, in microseconds since `main` ran the probe.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Phases {
    /// Reading the source file; engine, artifact, linker, pre-instantiation.
    runtime_us: f64,
    /// Reading the cached bytecode and snapshot, creating and restoring the sandbox.
    sandbox_us: f64,
    /// The first `reset`.
    reset_us: f64,
    /// Everything in the probe, the drops included.
    probe_us: f64,
}

/// The child's side: start the runtime, load `env`, reset it, print the phases, exit.
pub fn probe(env: &Path, setting: ProbeSetting) -> anyhow::Result<ExitCode> {
    let t0 = Instant::now();
    let source = read_text(env, "environment file")?;
    let config = crate::commands::common::one_episode_config(true);
    if setting == ProbeSetting::EngineTwice {
        let _ = Runtime::is_prepared(&config);
    }
    let runtime = Runtime::new_announcing(config, || {}).context("starting the runtime")?;
    let runtime_done = t0.elapsed();
    let executor = match setting {
        ProbeSetting::MultiThread => crate::commands::executor()?,
        _ => crate::commands::one_task_executor()?,
    };
    let (sandbox, sandbox_done, reset_done) = executor.block_on(async {
        let mut sandbox = runtime.sandbox(&source, SandboxOptions::seeded(0)).await?;
        let sandbox_done = t0.elapsed();
        sandbox.reset(Some(0)).await?;
        Ok::<_, anyhow::Error>((sandbox, sandbox_done, t0.elapsed()))
    })?;
    if setting == ProbeSetting::Teardown {
        drop(sandbox);
        drop(runtime);
    } else {
        crate::commands::common::leave_for_exit(Some(sandbox), runtime);
    }
    drop(executor);
    let phases = Phases {
        runtime_us: micros(runtime_done),
        sandbox_us: micros(sandbox_done - runtime_done),
        reset_us: micros(reset_done - sandbox_done),
        probe_us: micros(t0.elapsed()),
    };
    println!("{}", serde_json::to_string(&phases)?);
    Ok(ExitCode::SUCCESS)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One setting's starts: wall-clock times of whole processes, and the phases each reported.
struct Starts {
    wall: Vec<Duration>,
    phases: Vec<Phases>,
}

fn start_once(exe: &Path, env: &Path, setting: ProbeSetting) -> anyhow::Result<(Duration, Phases)> {
    let start = Instant::now();
    let output = Command::new(exe)
        .args(["bench", "--startup-probe"])
        .arg(env)
        .arg("--probe-setting")
        .arg(
            clap::ValueEnum::to_possible_value(&setting)
                .expect("no setting is skipped")
                .get_name(),
        )
        .stderr(Stdio::inherit())
        .output()
        .context("spawning the startup probe")?;
    let wall = start.elapsed();
    if !output.status.success() {
        bail!("the startup probe failed ({})", output.status);
    }
    let phases = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "reading the startup probe's phases from {:?}",
            String::from_utf8_lossy(&output.stdout)
        )
    })?;
    Ok((wall, phases))
}

/// Times `starts` process starts of every setting (interleaved) on `env`, prints the table and
/// returns the median of `spade run`'s way.
pub fn measure(env: &Path, starts: usize) -> anyhow::Result<Duration> {
    let exe = std::env::current_exe().context("locating the spade binary")?;
    // One start first, so that every timed one finds the page cache and the disk caches warm.
    start_once(&exe, env, ProbeSetting::Run)?;
    let mut all: Vec<Starts> = ProbeSetting::ALL
        .iter()
        .map(|_| Starts {
            wall: Vec::new(),
            phases: Vec::new(),
        })
        .collect();
    for _ in 0..starts.max(1) {
        for (setting, starts) in ProbeSetting::ALL.iter().zip(&mut all) {
            let (wall, phases) = start_once(&exe, env, *setting)?;
            starts.wall.push(wall);
            starts.phases.push(phases);
        }
    }
    say!(
        "\nprocess start to first reset (`spade run`'s settings, warm caches), median of {} starts each, settings interleaved:",
        starts.max(1)
    );
    say!(
        "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10} {:>13}",
        "setting",
        "total",
        "vs run",
        "runtime",
        "sandbox",
        "reset",
        "outside probe"
    );
    let median_of = |values: Vec<f64>| {
        let mut durations: Vec<Duration> = values
            .into_iter()
            .map(|us| Duration::from_secs_f64(us.max(0.0) / 1e6))
            .collect();
        durations.sort();
        percentile(&durations, 0.5)
    };
    let mut run = Duration::ZERO;
    for (setting, starts) in ProbeSetting::ALL.iter().zip(all) {
        let mut wall = starts.wall.clone();
        wall.sort();
        let total = percentile(&wall, 0.5);
        if *setting == ProbeSetting::Run {
            run = total;
        }
        let phase = |f: fn(&Phases) -> f64| median_of(starts.phases.iter().map(f).collect());
        let outside = median_of(
            starts
                .wall
                .iter()
                .zip(&starts.phases)
                .map(|(wall, phases)| micros(*wall) - phases.probe_us)
                .collect(),
        );
        say!(
            "{:<24} {:>10} {:>9.2}x {:>10} {:>10} {:>10} {:>13}",
            setting.name(),
            ms(total),
            total.as_secs_f64() / run.as_secs_f64(),
            ms(phase(|p| p.runtime_us)),
            ms(phase(|p| p.sandbox_us)),
            ms(phase(|p| p.reset_us)),
            ms(outside)
        );
    }
    say!(
        "  (outside probe: exec, dynamic loading, the allocator's and std's start, and the kernel's teardown of the process)"
    );
    Ok(run)
}
