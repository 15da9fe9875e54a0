//! Sandboxes created per second with every core busy.

use std::time::Instant;

use spade_sandbox::{Runtime, SandboxOptions};

use super::Fixture;

/// Creates and resets `total` sandboxes of `fixture` from one task per core; returns
/// sandboxes per second and the number of tasks.
pub async fn sandboxes_per_second(
    runtime: &Runtime,
    fixture: &Fixture,
    total: usize,
) -> anyhow::Result<(f64, usize)> {
    let tasks = std::thread::available_parallelism().map_or(1, |n| n.get());
    runtime
        .sandbox(&fixture.source, SandboxOptions::seeded(0))
        .await?;
    let start = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (runtime, source) = (runtime.clone(), fixture.source.clone());
        let count = total / tasks + usize::from(task < total % tasks);
        handles.push(tokio::spawn(async move {
            for i in 0..count {
                let seed = (task * count + i) as u64;
                let mut sandbox = runtime
                    .sandbox(&source, SandboxOptions::seeded(seed))
                    .await?;
                sandbox.reset(Some(seed)).await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    Ok((total as f64 / start.elapsed().as_secs_f64(), tasks))
}
