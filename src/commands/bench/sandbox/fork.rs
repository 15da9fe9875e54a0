//! `spade bench --fork`: what forking a live sandbox costs, against creating a fresh sandbox and
//! against replaying the prefix (a fresh sandbox, its reset and the prefix's steps), at several
//! prefix lengths; forks per second from one state; and the memory of live forks. Fresh
//! sandboxes and forks are timed in alternating rounds, so that the machine's drift hits both.

use std::time::{Duration, Instant};

use spade_sandbox::{EnvSource, Runtime, Sandbox, SandboxOptions};

use super::memory::Usage;
use super::{Fixture, ms, percentile};

/// One prefix length of one environment.
pub struct ForkRow {
    pub prefix: usize,
    /// Median time to create and load a fresh sandbox.
    pub fresh: Duration,
    /// Median time to fork the state after the prefix.
    pub fork: Duration,
    /// Median time to reach the same state by replaying: a fresh sandbox, its reset and the
    /// prefix's steps.
    pub replay: Duration,
}

/// The memory of live forks of one state.
pub struct ForkMemory {
    /// Private dirty memory the first fork added, in MiB.
    pub first: f64,
    /// Private dirty memory all `count` forks added together, in MiB.
    pub all: f64,
    pub count: usize,
}

/// Sandbox options of the benchmark's episodes: long enough for the longest prefix.
fn options(seed: u64) -> SandboxOptions {
    SandboxOptions {
        seed,
        max_turns: Some(1_000_000),
    }
}

/// The action a prefix repeats: the first of the fixture's that, played 50 times in a row
/// after the reset, does not end the episode (a move into a wall, a tool call).
async fn endless_actions(runtime: &Runtime, fixture: &Fixture) -> anyhow::Result<Vec<String>> {
    'actions: for action in &fixture.actions {
        let mut sandbox = runtime.sandbox(&fixture.source, options(0)).await?;
        sandbox.reset(Some(0)).await?;
        for _ in 0..50 {
            match sandbox.step(action).await {
                Ok(step) if !step.terminated && !step.truncated => {}
                _ => continue 'actions,
            }
        }
        return Ok(vec![action.clone()]);
    }
    anyhow::bail!(
        "every action of {} ends its episode within 50 steps: nothing to build a prefix from",
        fixture.name
    )
}

/// A sandbox after its reset and `prefix` steps.
async fn played(
    runtime: &Runtime,
    source: &EnvSource,
    actions: &[String],
    prefix: usize,
) -> anyhow::Result<Sandbox> {
    let mut sandbox = runtime.sandbox_from(source, options(0)).await?;
    sandbox.reset(Some(0)).await?;
    for action in actions.iter().cycle().take(prefix) {
        let step = sandbox.step(action).await?;
        anyhow::ensure!(
            !step.terminated && !step.truncated,
            "the prefix ended its episode"
        );
    }
    Ok(sandbox)
}

/// The fork table of `fixture` at each of `prefixes`, with `samples` forks and fresh sandboxes
/// per prefix.
pub async fn table(
    runtime: &Runtime,
    fixture: &Fixture,
    prefixes: &[usize],
    samples: usize,
) -> anyhow::Result<Vec<ForkRow>> {
    let source = runtime.prepare(&fixture.source).await?;
    let actions = endless_actions(runtime, fixture).await?;
    let mut rows = Vec::new();
    for &prefix in prefixes {
        let mut parent = played(runtime, &source, &actions, prefix).await?;
        let (mut fresh, mut forks) = (Vec::new(), Vec::new());
        for i in 0..samples.max(1) {
            let start = Instant::now();
            let sandbox = runtime.sandbox_from(&source, options(i as u64)).await?;
            fresh.push(start.elapsed());
            drop(sandbox);
            let start = Instant::now();
            let copy = runtime.fork(&mut parent, None).await?;
            forks.push(start.elapsed());
            drop(copy);
        }
        // Replaying costs the prefix's steps: fewer samples for long prefixes.
        let mut replays = Vec::new();
        for _ in 0..(samples / prefix.max(1)).clamp(3, samples.max(3)) {
            let start = Instant::now();
            drop(played(runtime, &source, &actions, prefix).await?);
            replays.push(start.elapsed());
        }
        for times in [&mut fresh, &mut forks, &mut replays] {
            times.sort();
        }
        rows.push(ForkRow {
            prefix,
            fresh: percentile(&fresh, 0.5),
            fork: percentile(&forks, 0.5),
            replay: percentile(&replays, 0.5),
        });
    }
    Ok(rows)
}

/// Forks per second from one state after `prefix` steps, `count` at a time (one capture).
pub async fn forks_per_second(
    runtime: &Runtime,
    fixture: &Fixture,
    prefix: usize,
    count: usize,
) -> anyhow::Result<f64> {
    let source = runtime.prepare(&fixture.source).await?;
    let actions = endless_actions(runtime, fixture).await?;
    let mut parent = played(runtime, &source, &actions, prefix).await?;
    let reseeds = vec![None; count.max(1)];
    let start = Instant::now();
    let copies = runtime.fork_n(&mut parent, &reseeds).await?;
    let elapsed = start.elapsed();
    drop(copies);
    Ok(count.max(1) as f64 / elapsed.as_secs_f64())
}

/// The private memory the first of `count` live forks of one state adds, and all of them.
pub async fn live_forks(
    runtime: &Runtime,
    fixture: &Fixture,
    prefix: usize,
    count: usize,
) -> anyhow::Result<ForkMemory> {
    let source = runtime.prepare(&fixture.source).await?;
    let actions = endless_actions(runtime, fixture).await?;
    let mut parent = played(runtime, &source, &actions, prefix).await?;
    // One fork first and dropped: the capture's base memory is then paid for.
    drop(runtime.fork(&mut parent, None).await?);
    let before = Usage::now()?;
    let mut live = vec![runtime.fork(&mut parent, None).await?];
    let one = Usage::now()?;
    for _ in 1..count {
        live.push(runtime.fork(&mut parent, None).await?);
    }
    let all = Usage::now()?;
    drop(live);
    Ok(ForkMemory {
        first: one.per(&before, 1).2,
        all: all.per(&before, 1).2,
        count,
    })
}

/// Prints one environment's rows.
pub fn print(name: &str, rows: &[ForkRow]) {
    for row in rows {
        say!(
            "{:<18} {:>7} {:>10} {:>10} {:>8} {:>12} {:>10}",
            name,
            row.prefix,
            ms(row.fresh),
            ms(row.fork),
            format!("{:.2}x", row.fork.as_secs_f64() / row.fresh.as_secs_f64()),
            ms(row.replay),
            format!("{:.1}x", row.replay.as_secs_f64() / row.fork.as_secs_f64()),
        );
    }
}
