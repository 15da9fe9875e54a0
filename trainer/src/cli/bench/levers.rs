//! Each lever of sandbox creation on and off, in the same run: a runtime per setting.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use spade_runtime::{Config, Runtime, SandboxOptions};

use super::{Fixture, percentile};

/// A runtime setting and its name.
pub struct Setting {
    pub name: &'static str,
    pub config: Config,
}

/// From nothing applied to everything applied (the default).
pub fn settings() -> Vec<Setting> {
    let none = Config {
        pool: None,
        snapshots: false,
        ..Config::default()
    };
    vec![
        Setting {
            name: "no pool, no snapshots",
            config: none.clone(),
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
