//! `spade bench`: sandbox speed and memory, against CPython running the same environments
//! in-process (the SPADE reference's way), measured in the same run, and each lever of sandbox
//! creation (pooled slots, snapshots) on and off.

mod fork;
mod levers;
mod memory;
mod play;
mod startup;
mod throughput;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use spade_envtools::trajectory::{RecordMeta, ReplayOptions, Trajectory, replay};
use spade_envtools::{Episode, Record};
use spade_sandbox::{Config, GUEST_SHA256, PRELUDE_MODULES, Runtime, SandboxOptions};

use crate::commands::{executor, read_text};

const DRIVER: &str = include_str!("driver.py");

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
    /// Sandboxes kept alive together to measure memory per sandbox.
    #[arg(long, default_value_t = 1000)]
    pub live: usize,
    /// Sandboxes created (and reset) from one task per core for the creation throughput.
    #[arg(long, default_value_t = 2000)]
    pub burst: usize,
    /// Fresh sandboxes per environment and setting in the levers table.
    #[arg(long, default_value_t = 100)]
    pub lever_samples: usize,
    /// Process starts timed (spawning `spade` itself, warm artifact cache).
    #[arg(long, default_value_t = 5)]
    pub starts: usize,
    /// The CPython interpreter to compare against.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Measure only forking (`Runtime::fork`): fork against a fresh sandbox and against
    /// replaying the prefix, at each of --fork-prefixes, on --fork-envs; forks per second; the
    /// memory of 8 live forks.
    #[arg(long)]
    pub fork: bool,
    /// Prefix lengths (steps after the reset) the fork table forks at.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000")]
    pub fork_prefixes: Vec<usize>,
    /// Environments of the fork table.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "grid_walk,tool_inventory"
    )]
    pub fork_envs: Vec<String>,
    /// Forks and fresh sandboxes timed per prefix length.
    #[arg(long, default_value_t = 50)]
    pub fork_samples: usize,
    /// Internal: build a runtime, load this environment, reset it, exit (timed by the parent).
    #[arg(long, hide = true)]
    pub startup_probe: Option<PathBuf>,
    /// Internal: how the startup probe starts and ends (one lever undone, or none).
    #[arg(long, hide = true, value_enum, default_value_t = startup::ProbeSetting::Run)]
    pub probe_setting: startup::ProbeSetting,
}

/// One fixture environment of the benchmark.
pub struct Fixture {
    name: String,
    dir: PathBuf,
    source: String,
    actions: Vec<String>,
}

/// The `p` quantile of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Alternating rounds of the yields comparison.
const YIELD_ROUNDS: usize = 6;

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

impl BenchArgs {
    pub fn execute(self) -> anyhow::Result<ExitCode> {
        if let Some(env) = &self.startup_probe {
            return startup::probe(env, self.probe_setting);
        }
        if self.fork {
            return self.fork_only();
        }
        let fixtures = self.fixtures(&self.envs)?;
        let t0 = Instant::now();
        let runtime = Runtime::new(Config::default()).context("starting the sandbox runtime")?;
        say!(
            "spade bench: guest {}, runtime ready in {}",
            &GUEST_SHA256[..12],
            ms(t0.elapsed())
        );
        let startup = startup::measure(&fixtures[0].dir.join("env.py"), self.starts)?;
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
        let tokio = executor()?;
        let mut rows = Vec::new();
        for fixture in &fixtures {
            let row = tokio.block_on(self.measure(&runtime, fixture))?;
            let cpython = self.cpython(&prelude_dir, fixture)?;
            say!(
                "{:<18} {:>22} {:>11} {:>11} {:>9} {:>9} {:>10.0} {:>12.0} {:>6.2}x",
                fixture.name,
                format!("{} / {}", ms(row.fresh_median), ms(row.fresh_p99)),
                ms(row.fresh_with_reset),
                us(row.reset_median),
                us(row.step_median),
                us(cpython.step),
                row.steps_per_s,
                cpython.steps_per_s,
                row.steps_per_s / cpython.steps_per_s
            );
            rows.push((row, cpython));
        }
        say!(
            "\n{:<18} {:>16} {:>22} {:>8} {:>16}",
            "start an episode",
            "spade fresh+reset",
            "CPython compile+exec+",
            "ratio",
            "snapshot"
        );
        say!("{:<18} {:>16} {:>22} {:>8}", "", "", "construct+reset", "");
        for (fixture, (row, cpython)) in fixtures.iter().zip(&rows) {
            let snapshot = tokio.block_on(runtime.prepare(&fixture.source))?;
            let snapshot = match runtime.snapshot_size(&snapshot, None) {
                Some((pages, bytes)) => {
                    format!("{pages} pages, {:.1} MiB", bytes as f64 / 1048576.0)
                }
                None => "none (seeded load)".to_owned(),
            };
            say!(
                "{:<18} {:>16} {:>22} {:>7.2}x {:>16}",
                fixture.name,
                ms(row.fresh_with_reset),
                ms(cpython.load_reset),
                row.fresh_with_reset.as_secs_f64() / cpython.load_reset.as_secs_f64(),
                snapshot
            );
        }
        self.levers(&tokio, &fixtures)?;
        say!(
            "\n{:<18} {:>12} {:>12} {:>8} {:>12} {:>8} {:>12} {:>12} {:>8}",
            "episodes",
            "sandbox",
            "Episode",
            "ratio",
            "recorded",
            "ratio",
            "record",
            "replay",
            "ratio"
        );
        say!(
            "{:<18} {:>12} {:>12} {:>8} {:>12} {:>8}",
            "",
            "steps/s",
            "steps/s",
            "paired",
            "steps/s",
            "vs above"
        );
        for (fixture, (row, _)) in fixtures.iter().zip(&rows) {
            let (bare, episode, ratio) =
                tokio.block_on(self.episode_steps_per_s(&runtime, fixture))?;
            let rec = tokio.block_on(self.record_and_replay(&runtime, fixture, &prelude_dir))?;
            say!(
                "{:<18} {:>12.0} {:>12.0} {:>7.3}x {:>12.0} {:>7.2}x {:>12} {:>12} {:>7.2}x",
                fixture.name,
                bare,
                episode,
                ratio,
                rec.steps_per_s,
                rec.steps_per_s / row.steps_per_s,
                ms(rec.record),
                ms(rec.replay),
                rec.replay.as_secs_f64() / rec.record.as_secs_f64()
            );
        }
        let (burst, tasks) = tokio.block_on(throughput::sandboxes_per_second(
            &runtime,
            &fixtures[0],
            self.burst,
        ))?;
        say!(
            "\nsandboxes created and reset per second, {tasks} tasks on {tasks} cores: {burst:.0} ({})",
            fixtures[0].name
        );
        let (before, with) = tokio.block_on(memory::live_sandboxes(
            &runtime,
            &fixtures[0],
            self.live.max(1),
        ))?;
        let (rss, pss, private) = with.per(&before, self.live.max(1));
        say!(
            "memory per live sandbox ({} sandboxes of {}): private dirty {private:.2} MiB, \
             Pss {pss:.2} MiB, RSS {rss:.2} MiB; all {} together: {:.2} GiB private dirty",
            self.live,
            fixtures[0].name,
            self.live,
            private * self.live as f64 / 1024.0
        );
        let worst_ratio = rows
            .iter()
            .map(|(row, cpython)| row.steps_per_s / cpython.steps_per_s)
            .fold(f64::INFINITY, f64::min);
        let worst_start = rows
            .iter()
            .map(|(row, cpython)| {
                row.fresh_with_reset.as_secs_f64() / cpython.load_reset.as_secs_f64()
            })
            .fold(0.0, f64::max);
        say!("\ntargets (worst env shown):");
        say!(
            "  fresh sandbox + first reset vs CPython's exec path: {worst_start:.2}x (target 2x, goal 1x)"
        );
        say!("  steps/s vs CPython: {worst_ratio:.2}x (target 0.20x)");
        say!("  private memory per live sandbox: {private:.2} MiB (target 4 MiB)");
        say!(
            "  process start to first reset: {} (target 5 ms)",
            ms(startup)
        );
        let _ = std::fs::remove_dir_all(&prelude_dir);
        Ok(ExitCode::SUCCESS)
    }

    /// `--fork`: the fork table, forks per second and live forks' memory.
    fn fork_only(&self) -> anyhow::Result<ExitCode> {
        let fixtures = self.fixtures(&self.fork_envs)?;
        let runtime = Runtime::new(Config::default()).context("starting the sandbox runtime")?;
        let tokio = executor()?;
        say!(
            "spade bench --fork: guest {}, {} ({} samples per prefix; medians)",
            &GUEST_SHA256[..12],
            super::cpu::describe(),
            self.fork_samples
        );
        say!(
            "\n{:<18} {:>7} {:>10} {:>10} {:>8} {:>12} {:>10}",
            "env",
            "prefix",
            "fresh",
            "fork",
            "÷ fresh",
            "replay",
            "÷ fork"
        );
        let mut worst_vs_fresh: f64 = 0.0;
        let mut longest_vs_replay = f64::INFINITY;
        for fixture in &fixtures {
            let rows = tokio.block_on(fork::table(
                &runtime,
                fixture,
                &self.fork_prefixes,
                self.fork_samples,
            ))?;
            fork::print(&fixture.name, &rows);
            for row in &rows {
                worst_vs_fresh =
                    worst_vs_fresh.max(row.fork.as_secs_f64() / row.fresh.as_secs_f64());
            }
            if let Some(row) = rows.iter().max_by_key(|row| row.prefix) {
                longest_vs_replay =
                    longest_vs_replay.min(row.replay.as_secs_f64() / row.fork.as_secs_f64());
            }
        }
        let fixture = &fixtures[0];
        let prefix = self
            .fork_prefixes
            .iter()
            .copied()
            .max()
            .unwrap_or(100)
            .min(100);
        let rate = tokio.block_on(fork::forks_per_second(&runtime, fixture, prefix, 64))?;
        say!(
            "\nforks per second from one state ({}, prefix {prefix}, 64 from one capture): {rate:.0}",
            fixture.name
        );
        let memory = tokio.block_on(fork::live_forks(&runtime, fixture, prefix, 8))?;
        say!(
            "private dirty memory of live forks ({}, prefix {prefix}): the first {:.2} MiB, all {} {:.2} MiB ({:.2}x the first)",
            fixture.name,
            memory.first,
            memory.count,
            memory.all,
            memory.all / memory.first
        );
        say!("\ntargets (worst env shown):");
        say!("  fork vs a fresh sandbox: {worst_vs_fresh:.2}x (target at most 2x at every prefix)");
        say!(
            "  replaying the longest prefix vs forking there: {longest_vs_replay:.0}x (target at least 50x at 1,000 steps)"
        );
        Ok(ExitCode::SUCCESS)
    }

    /// Fresh sandbox + first reset with each lever on and off.
    fn levers(&self, tokio: &tokio::runtime::Runtime, fixtures: &[Fixture]) -> anyhow::Result<()> {
        let settings = levers::settings();
        let mut header = format!(
            "\n{:<34} {:>14}",
            "fresh sandbox + 1st reset", "runtime ready"
        );
        for fixture in fixtures {
            header.push_str(&format!(" {:>18}", fixture.name));
        }
        say!("{header}");
        let mut baseline = Vec::new();
        for (i, setting) in settings.iter().enumerate() {
            let mut line = format!(
                "{:<34} {:>14}",
                setting.name,
                ms(levers::runtime_ready(setting)?)
            );
            for (j, fixture) in fixtures.iter().enumerate() {
                let median = tokio.block_on(levers::fresh_with_reset(
                    setting,
                    fixture,
                    self.lever_samples,
                ))?;
                if i == 0 {
                    baseline.push(median);
                    line.push_str(&format!(" {:>18}", ms(median)));
                } else {
                    let speedup = baseline[j].as_secs_f64() / median.as_secs_f64();
                    line.push_str(&format!(
                        " {:>18}",
                        format!("{} ({speedup:.2}x)", ms(median))
                    ));
                }
            }
            say!("{line}");
        }
        self.yield_levers(tokio, fixtures)
    }

    /// Steps/s with each way a long call yields, in alternating rounds.
    fn yield_levers(
        &self,
        tokio: &tokio::runtime::Runtime,
        fixtures: &[Fixture],
    ) -> anyhow::Result<()> {
        let settings = levers::yield_settings();
        if !settings.iter().all(|s| Runtime::is_prepared(&s.config)) {
            say!("\n(compiling the guest once for the epoch setting: Cranelift, about a minute)");
        }
        let mut header = format!("\n{:<20}", "steps/s");
        for setting in &settings {
            header.push_str(&format!(" {:>30}", setting.name));
        }
        say!("{header}");
        for fixture in fixtures {
            let rates = tokio.block_on(levers::steps_per_second(
                &settings,
                fixture,
                self.steps,
                YIELD_ROUNDS,
            ))?;
            let mut line = format!("{:<20}", fixture.name);
            for rate in &rates {
                let ratio = rates[0] / rate;
                line.push_str(&format!(" {:>30}", format!("{rate:.0} ({ratio:.3}x)")));
            }
            say!("{line}");
        }
        say!("(each column: steps/s, and the default's steps/s over this setting's)");
        Ok(())
    }

    fn fixtures(&self, names: &[String]) -> anyhow::Result<Vec<Fixture>> {
        if names.is_empty() {
            bail!("no environments to measure (--envs is empty)");
        }
        names
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
        let (mut steps, elapsed) = play::play(&mut sandbox, fixture, self.steps).await?;
        let steps_per_s = self.steps as f64 / elapsed.as_secs_f64();
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

    /// Steps per second of the throughput loop through the bare sandbox and through an
    /// unrecorded [`Episode`], measured in alternating rounds (paired, so that the machine's
    /// drift hits both alike): the median steps/s of each, and the median of the rounds'
    /// Episode-over-sandbox ratios.
    async fn episode_steps_per_s(
        &self,
        runtime: &Runtime,
        fixture: &Fixture,
    ) -> anyhow::Result<(f64, f64, f64)> {
        const ROUNDS: usize = 21;
        let per_round = (self.steps / 4).max(100);
        let options = SandboxOptions::seeded(0);
        let mut sandbox = runtime.sandbox(&fixture.source, options).await?;
        sandbox.reset(Some(0)).await?;
        let mut episode = Episode::start(runtime, &fixture.source, options, Record::Off).await?;
        episode.reset(Some(0)).await.result?;
        let (mut bare, mut through, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let (_, a) = play::play(&mut sandbox, fixture, per_round).await?;
            let b = play::play_episode(&mut episode, fixture, per_round).await?;
            let (a, b) = (
                per_round as f64 / a.as_secs_f64(),
                per_round as f64 / b.as_secs_f64(),
            );
            bare.push(a);
            through.push(b);
            ratios.push(b / a);
        }
        Ok((median_f64(bare), median_f64(through), median_f64(ratios)))
    }

    /// Plays the throughput loop through an [`Episode`] writing a trajectory file, then replays
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
        let record = Record::to(file, RecordMeta::default());
        let mut recorder =
            Episode::start(runtime, &fixture.source, SandboxOptions::seeded(0), record).await?;
        recorder.reset(Some(0)).await.result?;
        let (mut episode, mut index) = (0u64, 0usize);
        let steps_start = Instant::now();
        for _ in 0..self.steps {
            let step = recorder
                .step(&fixture.actions[index % fixture.actions.len()])
                .await
                .result?;
            index += 1;
            if step.terminated || step.truncated {
                episode += 1;
                index = 0;
                recorder.reset(Some(episode)).await.result?;
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

    fn cpython(&self, prelude_dir: &Path, fixture: &Fixture) -> anyhow::Result<CPython> {
        let output = Command::new(&self.python)
            .arg(prelude_dir.join("bench_driver.py"))
            .arg(prelude_dir)
            .arg(fixture.dir.join("env.py"))
            .arg(fixture.dir.join("actions.txt"))
            .arg(self.steps.to_string())
            .arg("0")
            .arg(self.samples.max(1).to_string())
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
        let field = |name: &str| result[name].as_f64().with_context(|| name.to_owned());
        Ok(CPython {
            steps_per_s: field("steps_per_s")?,
            step: Duration::from_secs_f64(field("step_us_median")? / 1e6),
            load_reset: Duration::from_secs_f64(field("load_reset_us_median")? / 1e6),
        })
    }
}

/// What CPython measured for one environment.
struct CPython {
    steps_per_s: f64,
    step: Duration,
    /// Compile, exec, construct and reset, from the source text (median).
    load_reset: Duration,
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

/// The median of `values` (not empty).
fn median_f64(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("spade-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
