//! Each lever of sandbox creation on and off, in the same run: a runtime per setting.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use spade_sandbox::{Config, Pool, Runtime, SandboxOptions, Yields};

use super::play::play;
use super::{Fixture, percentile};

/// A runtime setting and its name.
pub struct Setting {
    pub name: &'static str,
    pub config: Config,
}

/// From nothing applied to everything applied (the default). "pool, reset low 1 MiB" is the
/// pool as first built (the lowest 1 MiB of a freed slot reset by copying, the rest by
/// `madvise`), to show what keeping the written pages resident adds.
pub fn settings() -> Vec<Setting> {
    let none = Config {
        pool: None,
        snapshots: false,
        ..Config::default()
    };
    let low_mib = Some(Pool {
        keep_resident: 1 << 20,
        scan_dirty_pages: false,
        ..Pool::default()
    });
    vec![
        Setting {
            name: "no pool, no snapshots",
            config: none.clone(),
        },
        Setting {
            name: "pool, reset low 1 MiB",
            config: Config {
                pool: low_mib.clone(),
                ..none.clone()
            },
        },
        Setting {
            name: "pool",
            config: Config {
                pool: Config::default().pool,
                ..none.clone()
            },
        },
        Setting {
            name: "snapshots",
            config: Config {
                snapshots: true,
                ..none
            },
        },
        Setting {
            name: "pool, reset low 1 MiB + snapshots",
            config: Config {
                pool: low_mib,
                ..Config::default()
            },
        },
        Setting {
            name: "pool + snapshots (default)",
            config: Config::default(),
        },
    ]
}

/// How long building a runtime with `setting` takes (warm artifact cache).
pub fn runtime_ready(setting: &Setting) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let runtime = Runtime::new(setting.config.clone())
        .with_context(|| format!("starting a runtime with {}", setting.name))?;
    let ready = start.elapsed();
    drop(runtime);
    Ok(ready)
}

/// The median of fresh sandbox + first reset over `samples` sandboxes, for one setting.
pub async fn fresh_with_reset(
    setting: &Setting,
    fixture: &Fixture,
    samples: usize,
) -> anyhow::Result<Duration> {
    let runtime = Runtime::new(setting.config.clone())
        .with_context(|| format!("starting a runtime with {}", setting.name))?;
    // The first sandbox compiles the source and decides the load plan.
    runtime
        .sandbox(&fixture.source, SandboxOptions::seeded(0))
        .await?;
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples.max(1) {
        let start = Instant::now();
        let mut sandbox = runtime
            .sandbox(&fixture.source, SandboxOptions::seeded(i as u64))
            .await?;
        sandbox.reset(Some(i as u64)).await?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(percentile(&times, 0.5))
}

/// The two ways a long call yields, for the steps/s comparison: fuel intervals (the default)
/// and epoch ticks (fuel and epoch checks both compiled in).
pub fn yield_settings() -> [Setting; 2] {
    [
        Setting {
            name: "fuel yields (default)",
            config: Config::default(),
        },
        Setting {
            name: "epochs (fuel + epoch checks)",
            config: Config {
                yields: Yields::Epochs,
                ..Config::default()
            },
        },
    ]
}

/// Steps/s of `fixture` under each setting of `settings`, played in alternating rounds of
/// `steps / rounds` steps so that both see the same machine.
pub async fn steps_per_second(
    settings: &[Setting],
    fixture: &Fixture,
    steps: usize,
    rounds: usize,
) -> anyhow::Result<Vec<f64>> {
    let mut sandboxes = Vec::new();
    for setting in settings {
        let runtime = Runtime::new(setting.config.clone())
            .with_context(|| format!("starting a runtime with {}", setting.name))?;
        let mut sandbox = runtime
            .sandbox(&fixture.source, SandboxOptions::seeded(0))
            .await?;
        sandbox.reset(Some(0)).await?;
        sandboxes.push((runtime, sandbox));
    }
    let per_round = (steps / rounds.max(1)).max(1);
    let mut spent = vec![Duration::ZERO; settings.len()];
    for _ in 0..rounds.max(1) {
        for ((_, sandbox), spent) in sandboxes.iter_mut().zip(&mut spent) {
            let (_, elapsed) = play(sandbox, fixture, per_round).await?;
            *spent += elapsed;
        }
    }
    let played = (per_round * rounds.max(1)) as f64;
    Ok(spent.iter().map(|d| played / d.as_secs_f64()).collect())
}
