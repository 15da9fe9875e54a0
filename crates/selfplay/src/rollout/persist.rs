//! Phase 7, persist: the metrics line, then the checkpoint that makes it count (a crash
//! between the two leaves a line that resuming drops).
use std::io::Write as _;

use super::{Metrics, Run, io_err};
use crate::error::Result;
use crate::state;

impl Run<'_> {
    /// Appends `m` to `metrics.jsonl` and writes the checkpoint of rollout `r`.
    pub(super) fn persist(&mut self, r: u64, m: &Metrics) -> Result<()> {
        let metrics_path = self.dir.join("metrics.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&metrics_path)
            .map_err(io_err("opening", &metrics_path))?;
        let line = serde_json::to_string(m).expect("metrics serialise");
        writeln!(f, "{line}").map_err(io_err("writing", &metrics_path))?;
        drop(f);
        self.state.rollouts_done = r + 1;
        self.state.metrics_len = std::fs::metadata(&metrics_path)
            .map_err(io_err("reading", &metrics_path))?
            .len();
        self.progress.start(r, "checkpoint", 1, "writes");
        let p = &mut *self.policy;
        let saved = state::save_checkpoint(&self.dir, &self.state, |d| p.save(d));
        self.progress.advance(1);
        self.progress.finish();
        saved.map(|_| ())
    }
}
