//! What the self-play loop reports while it runs: one phase at a time, each with a size and a
//! unit, so a front end can draw a bar with a rate and an ETA.
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Receives the loop's progress. Implementations must be cheap: `advance` is called once per
/// decode step during sampling phases.
pub trait Progress: Send + Sync {
    /// A phase of rollout `rollout` starts, `total` units of `unit` long (an upper bound
    /// when the phase may end early, as sampling does at an end-of-sequence token).
    fn start(&self, rollout: u64, phase: &str, total: u64, unit: &'static str);
    /// `n` more units of the current phase are done.
    fn advance(&self, n: u64);
    /// The current phase ended.
    fn finish(&self);
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn start(&self, _: u64, _: &str, _: u64, _: &'static str) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}

/// One line per phase on standard error, when it starts and when it ends (with its time and
/// how much of its budget it used): for logs and terminals without a bar.
#[derive(Debug)]
pub struct Lines {
    start: Instant,
    current: Mutex<Option<Phase>>,
}

/// The phase [`Lines`] is reporting.
#[derive(Debug)]
struct Phase {
    name: String,
    done: u64,
    total: u64,
    unit: &'static str,
    started: Instant,
}

impl Default for Lines {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            current: Mutex::new(None),
        }
    }
}

impl Lines {
    /// A reporter whose clock starts now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

impl Progress for Lines {
    fn start(&self, rollout: u64, phase: &str, total: u64, unit: &'static str) {
        let name = format!("rollout {rollout}: {phase}");
        eprintln!(
            "[{:>7.1}s] {name} ({total} {unit})",
            self.start.elapsed().as_secs_f64()
        );
        *self.current.lock().expect("progress lock") = Some(Phase {
            name,
            done: 0,
            total,
            unit,
            started: Instant::now(),
        });
    }

    fn advance(&self, n: u64) {
        if let Some(p) = self.current.lock().expect("progress lock").as_mut() {
            p.done += n;
        }
    }

    fn finish(&self) {
        if let Some(p) = self.current.lock().expect("progress lock").take() {
            eprintln!(
                "[{:>7.1}s] {} done: {}/{} {} in {:.1}s",
                self.start.elapsed().as_secs_f64(),
                p.name,
                p.done,
                p.total,
                p.unit,
                p.started.elapsed().as_secs_f64()
            );
        }
    }
}

/// Keeps every event as a line (`start R PHASE TOTAL UNIT`, `advance N`, `finish`), for tests.
#[derive(Debug, Default)]
pub struct Recorded(pub Mutex<Vec<String>>);

impl Progress for Recorded {
    fn start(&self, rollout: u64, phase: &str, total: u64, unit: &'static str) {
        self.0
            .lock()
            .expect("lock")
            .push(format!("start {rollout} {phase} {total} {unit}"));
    }
    fn advance(&self, n: u64) {
        self.0.lock().expect("lock").push(format!("advance {n}"));
    }
    fn finish(&self) {
        self.0.lock().expect("lock").push("finish".into());
    }
}
