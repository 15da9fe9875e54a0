//! `spade bench`: sandbox speed and memory, against CPython running the same environments
//! in-process (the SPADE reference's way), measured in the same run.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use spade_runtime::trajectory::{RecordMeta, Recorder, ReplayOptions, Trajectory, replay};
use spade_runtime::{Config, GUEST_SHA256, PRELUDE_MODULES, Runtime, Sandbox, SandboxOptions};

use super::{read_text, tokio_runtime};

const DRIVER: &str = include_str!("bench_driver.py");

/// Measure sandbox creation, reset/step latency, steps/s against CPython, and memory.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Directory holding the fixture environments (`<name>/env.py` and `<name>/actions.txt`).
    #[arg(long, default_value = "tests/envs")]
    pub envs_dir: PathBuf,
    /// Environments to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "arithmetic_puzzle,grid_walk,tool_inventory,fraction_answer"
    )]
    pub envs: Vec<String>,
    /// Fresh sandboxes created per environment for the creation latency.
    #[arg(long, default_value_t = 200)]
    pub samples: usize,
    /// Steps played per environment for the throughput.
    #[arg(long, default_value_t = 2000)]
    pub steps: usize,
    /// Sandboxes kept alive together to measure resident memory per sandbox.
    #[arg(long, default_value_t = 32)]
    pub live: usize,
    /// Process starts timed (spawning `spade` itself, warm artifact cache).
    #[arg(long, default_value_t = 5)]
    pub starts: usize,
    /// The CPython interpreter to compare against.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Internal: build a runtime, load this environment, reset it, exit (timed by the parent).
    #[arg(long, hide = true)]
    pub startup_probe: Option<PathBuf>,
}

struct Fixture {
    name: String,
    dir: PathBuf,
    source: String,
    actions: Vec<String>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// Resident set size of this process, from /proc.
fn rss_bytes() -> anyhow::Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS line")?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .context("malformed VmRSS")?
        .parse()?;
    Ok(kb * 1024)
}

impl BenchArgs {
    pub fn execute(self) -> anyhow::Result<ExitCode> {
        if let Some(env) = &self.startup_probe {
            return startup_probe(env);
        }
        let fixtures = self.fixtures()?;
        let t0 = Instant::now();
        let runtime = Runtime::new(Config::default()).context("starting the sandbox runtime")?;
        say!(
            "spade bench: guest {}, runtime ready in {}",
            &GUEST_SHA256[..12],
            ms(t0.elapsed())
        );
        let startup = self.process_starts(&fixtures[0])?;
        say!(
            "process start to first reset (warm artifact cache): median {} over {} runs",
            ms(startup),
            self.starts
        );
        let prelude_dir = tempfile_dir()?;
        for (name, source) in PRELUDE_MODULES {
            std::fs::write(prelude_dir.join(format!("{name}.py")), source)?;
        }
        std::fs::write(prelude_dir.join("bench_driver.py"), DRIVER)?;
        say!(
            "\n{:<18} {:>22} {:>11} {:>11} {:>9} {:>9} {:>10} {:>12} {:>7}",
            "env",
            "fresh sandbox med/p99",
            "+1st reset",
            "reset med",
            "step med",
            "CPy step",
            "steps/s",
            "CPy steps/s",
            "ratio"
        );
        let tokio = tokio_runtime()?;
        let mut ratios = Vec::new();
        let mut fresh_medians = Vec::new();
        let mut plain_rates = Vec::new();
        for fixture in &fixtures {
            let row = tokio.block_on(self.measure(&runtime, fixture))?;
            let cpython = self.cpython(&prelude_dir, fixture)?;
            let ratio = row.steps_per_s / cpython.0;
            ratios.push(ratio);
            plain_rates.push(row.steps_per_s);
            fresh_medians.push(row.fresh_with_reset);
            say!(
                "{:<18} {:>22} {:>11} {:>11} {:>9} {:>9} {:>10.0} {:>12.0} {:>6.2}x",
                fixture.name,
                format!("{} / {}", ms(row.fresh_median), ms(row.fresh_p99)),
                ms(row.fresh_with_reset),
                us(row.reset_median),
                us(row.step_median),
                us(cpython.1),
                row.steps_per_s,
                cpython.0,
                ratio
            );
        }
        say!(
            "\n{:<18} {:>12} {:>14} {:>9} {:>12} {:>12} {:>9}",
            "recording",
            "steps/s off",
            "steps/s on",
            "ratio",
            "record",
            "replay",
            "ratio"
        );
        for (fixture, plain) in fixtures.iter().zip(&plain_rates) {
            let rec = tokio.block_on(self.record_and_replay(&runtime, fixture, &prelude_dir))?;
            say!(
                "{:<18} {:>12.0} {:>14.0} {:>8.2}x {:>12} {:>12} {:>8.2}x",
                fixture.name,
                plain,
                rec.steps_per_s,
                rec.steps_per_s / plain,
                ms(rec.record),
                ms(rec.replay),
                rec.replay.as_secs_f64() / rec.record.as_secs_f64()
            );
        }
        let rss = tokio.block_on(self.live_memory(&runtime, &fixtures[0]))?;
        say!(
            "\nresident memory per live sandbox: {:.2} MiB ({} sandboxes of {})",
            rss / 1048576.0,
            self.live,
            fixtures[0].name
        );
        let worst_ratio = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
        let worst_fresh = fresh_medians.iter().max().copied().unwrap_or_default();
        say!("\ntargets (median over envs, worst env shown):");
        say!(
            "  fresh sandbox + first reset: {} (target 3 ms, goal 1 ms)",
            ms(worst_fresh)
        );
        say!("  steps/s vs CPython: {worst_ratio:.2}x (target 0.20x, goal 0.50x)");
        say!(
            "  memory per live sandbox: {:.2} MiB (target 8 MiB)",
            rss / 1048576.0
        );
        let _ = std::fs::remove_dir_all(&prelude_dir);
        Ok(ExitCode::SUCCESS)
    }

    fn fixtures(&self) -> anyhow::Result<Vec<Fixture>> {
        if self.envs.is_empty() {
            bail!("no environments to measure (--envs is empty)");
        }
        self.envs
            .iter()
            .map(|name| {
                let dir = self.envs_dir.join(name);
                let source = read_text(&dir.join("env.py"), "environment file")?;
                let actions: Vec<String> = read_text(&dir.join("actions.txt"), "actions file")?
                    .lines()
                    .map(str::to_owned)
                    .collect();
                if actions.is_empty() {
                    bail!(
                        "actions file '{}' is empty",
                        dir.join("actions.txt").display()
                    );
                }
                Ok(Fixture {
                    name: name.clone(),
                    dir,
                    source,
                    actions,
                })
            })
            .collect()
    }

    fn process_starts(&self, fixture: &Fixture) -> anyhow::Result<Duration> {
        let exe = std::env::current_exe().context("locating the spade binary")?;
        let mut times = Vec::new();
        for _ in 0..self.starts.max(1) {
            let start = Instant::now();
            let status = Command::new(&exe)
                .args(["bench", "--startup-probe"])
                .arg(fixture.dir.join("env.py"))
                .status()
                .context("spawning the startup probe")?;
            if !status.success() {
                bail!("the startup probe failed ({status})");
            }
            times.push(start.elapsed());
        }
        times.sort();
        Ok(percentile(&times, 0.5))
    }

    async fn measure(&self, runtime: &Runtime, fixture: &Fixture) -> anyhow::Result<Row> {
        let mut fresh = Vec::new();
        let mut fresh_with_reset = Vec::new();
        let mut resets = Vec::new();
        for i in 0..self.samples.max(1) {
            let start = Instant::now();
            let mut sandbox = runtime
                .sandbox(&fixture.source, SandboxOptions::seeded(i as u64))
                .await?;
            fresh.push(start.elapsed());
            let reset_start = Instant::now();
            sandbox.reset(Some(i as u64)).await?;
            resets.push(reset_start.elapsed());
            fresh_with_reset.push(start.elapsed());
        }
        fresh.sort();
        fresh_with_reset.sort();
        resets.sort();

        let mut sandbox = runtime
            .sandbox(&fixture.source, SandboxOptions::seeded(0))
            .await?;
        sandbox.reset(Some(0)).await?;
        let mut steps = Vec::with_capacity(self.steps);
        let (mut episode, mut index) = (0u64, 0usize);
        let start = Instant::now();
        for _ in 0..self.steps {
            let t = Instant::now();
            let step = sandbox
                .step(&fixture.actions[index % fixture.actions.len()])
                .await?;
            steps.push(t.elapsed());
            index += 1;
            if step.terminated || step.truncated {
                episode += 1;
                index = 0;
                sandbox.reset(Some(episode)).await?;
            }
        }
        let steps_per_s = self.steps as f64 / start.elapsed().as_secs_f64();
        steps.sort();
        Ok(Row {
            fresh_median: percentile(&fresh, 0.5),
            fresh_p99: percentile(&fresh, 0.99),
            fresh_with_reset: percentile(&fresh_with_reset, 0.5),
            reset_median: percentile(&resets, 0.5),
            step_median: percentile(&steps, 0.5),
            steps_per_s,
        })
    }

    /// Plays the throughput loop through a `Recorder` writing a trajectory file, then replays
    /// that file.
    async fn record_and_replay(
        &self,
        runtime: &Runtime,
        fixture: &Fixture,
        dir: &Path,
    ) -> anyhow::Result<Recording> {
        let path = dir.join(format!("{}.jsonl", fixture.name));
        let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let start = Instant::now();
        let mut recorder = Recorder::start(
            runtime,
            &fixture.source,
            SandboxOptions::seeded(0),
            RecordMeta::default(),
            file,
        )
        .await?;
        recorder.reset(Some(0)).await?;
        let (mut episode, mut index) = (0u64, 0usize);
        let steps_start = Instant::now();
        for _ in 0..self.steps {
            let step = recorder
                .step(&fixture.actions[index % fixture.actions.len()])
                .await?;
            index += 1;
            if step.terminated || step.truncated {
                episode += 1;
                index = 0;
                recorder.reset(Some(episode)).await?;
            }
        }
        let steps_per_s = self.steps as f64 / steps_start.elapsed().as_secs_f64();
        recorder.finish()?;
        let record = start.elapsed();
        let start = Instant::now();
        let trajectory = Trajectory::parse(&std::fs::read_to_string(&path)?)?;
        let report = replay(runtime, &trajectory, &ReplayOptions::default()).await?;
        let replay_time = start.elapsed();
        if let Some(divergence) = report.divergence {
            bail!(
                "the benchmark recording of {} did not replay identically: {divergence}",
                fixture.name
            );
        }
        Ok(Recording {
            steps_per_s,
            record,
            replay: replay_time,
        })
    }

    fn cpython(&self, prelude_dir: &Path, fixture: &Fixture) -> anyhow::Result<(f64, Duration)> {
        let output = Command::new(&self.python)
            .arg(prelude_dir.join("bench_driver.py"))
            .arg(prelude_dir)
            .arg(fixture.dir.join("env.py"))
            .arg(fixture.dir.join("actions.txt"))
            .arg(self.steps.to_string())
            .arg("0")
            .output()
            .with_context(|| format!("running {}", self.python))?;
        if !output.status.success() {
            bail!(
                "the CPython driver failed on {}: {}",
                fixture.name,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let result: serde_json::Value = serde_json::from_slice(&output.stdout)
            .context("reading the CPython driver's output")?;
        let steps_per_s = result["steps_per_s"].as_f64().context("steps_per_s")?;
        let step_us = result["step_us_median"]
            .as_f64()
            .context("step_us_median")?;
        Ok((steps_per_s, Duration::from_secs_f64(step_us / 1e6)))
    }

    async fn live_memory(&self, runtime: &Runtime, fixture: &Fixture) -> anyhow::Result<f64> {
        let before = rss_bytes()?;
        let mut live: Vec<Sandbox> = Vec::new();
        for i in 0..self.live.max(1) {
            let mut sandbox = runtime
                .sandbox(&fixture.source, SandboxOptions::seeded(i as u64))
                .await?;
            sandbox.reset(Some(i as u64)).await?;
            sandbox.step(&fixture.actions[0]).await?;
            live.push(sandbox);
        }
        let after = rss_bytes()?;
        let per = after.saturating_sub(before) as f64 / live.len() as f64;
        drop(live);
        Ok(per)
    }
}

struct Recording {
    steps_per_s: f64,
    record: Duration,
    replay: Duration,
}

struct Row {
    fresh_median: Duration,
    fresh_p99: Duration,
    fresh_with_reset: Duration,
    reset_median: Duration,
    step_median: Duration,
    steps_per_s: f64,
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("spade-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn startup_probe(env: &Path) -> anyhow::Result<ExitCode> {
    let source = read_text(env, "environment file")?;
    let runtime = Runtime::new(Config::default())?;
    tokio_runtime()?.block_on(async {
        let mut sandbox = runtime.sandbox(&source, SandboxOptions::seeded(0)).await?;
        sandbox.reset(Some(0)).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}
