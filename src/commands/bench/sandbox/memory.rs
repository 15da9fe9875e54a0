//! Memory per live sandbox: resident set size, proportional set size and private dirty memory
//! (what a sandbox costs the machine: pages only it has written), from `/proc/self`.

use anyhow::Context as _;
use spade_sandbox::{Runtime, Sandbox, SandboxOptions};

use super::Fixture;

/// The process's memory figures, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub rss: u64,
    pub pss: u64,
    pub private_dirty: u64,
}

impl Usage {
    /// Now, from `/proc/self/smaps_rollup`.
    pub fn now() -> anyhow::Result<Usage> {
        let text = std::fs::read_to_string("/proc/self/smaps_rollup")
            .context("reading /proc/self/smaps_rollup")?;
        let field = |name: &str| -> anyhow::Result<u64> {
            let line = text
                .lines()
                .find(|l| l.starts_with(name))
                .with_context(|| format!("no {name} line in smaps_rollup"))?;
            let kb: u64 = line
                .split_whitespace()
                .nth(1)
                .with_context(|| format!("malformed {name} line"))?
                .parse()?;
            Ok(kb * 1024)
        };
        Ok(Usage {
            rss: field("Rss:")?,
            pss: field("Pss:")?,
            private_dirty: field("Private_Dirty:")?,
        })
    }

    /// `self - before`, per `count`, in MiB.
    pub fn per(&self, before: &Usage, count: usize) -> (f64, f64, f64) {
        let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / count as f64 / 1048576.0;
        (
            per(self.rss, before.rss),
            per(self.pss, before.pss),
            per(self.private_dirty, before.private_dirty),
        )
    }
}

/// Keeps `count` sandboxes of `fixture` alive (each reset and stepped once) and returns the
/// memory before and with them.
pub async fn live_sandboxes(
    runtime: &Runtime,
    fixture: &Fixture,
    count: usize,
) -> anyhow::Result<(Usage, Usage)> {
    // The first sandbox decides the load plan and takes the snapshot: not a live sandbox's cost.
    runtime
        .sandbox(&fixture.source, SandboxOptions::seeded(0))
        .await?;
    let before = Usage::now()?;
    let mut live: Vec<Sandbox> = Vec::with_capacity(count);
    for i in 0..count {
        let mut sandbox = runtime
            .sandbox(&fixture.source, SandboxOptions::seeded(i as u64))
            .await?;
        sandbox.reset(Some(i as u64)).await?;
        sandbox.step(&fixture.actions[0]).await?;
        live.push(sandbox);
    }
    let with = Usage::now()?;
    drop(live);
    Ok((before, with))
}
