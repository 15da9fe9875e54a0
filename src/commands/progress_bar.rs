//! Progress on a terminal: `spade train`'s and `spade eval --designer`'s bar per phase with
//! its rate and ETA, and `spade sft`'s bar over its steps.
use std::io::IsTerminal as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use spade_selfplay::progress::{Lines, Progress};

/// A self-play run's progress on standard error: [`Bars`] on a terminal, else a line per
/// phase ([`Lines`]).
pub fn phases() -> Arc<dyn Progress> {
    if std::io::stderr().is_terminal() {
        Arc::new(Bars::default())
    } else {
        Lines::new()
    }
}

/// A bar per phase on standard error.
#[derive(Debug, Default)]
pub struct Bars {
    bar: Mutex<Option<ProgressBar>>,
}

impl Progress for Bars {
    fn start(&self, rollout: u64, phase: &str, total: u64, unit: &'static str) {
        let style = ProgressStyle::with_template(&format!(
            "{{prefix:.bold}} [{{bar:30.cyan/blue}}] {{pos}}/{{len}} {unit} \
             {{per_sec}} elapsed {{elapsed}} ETA {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
            .with_style(style)
            .with_prefix(format!("rollout {rollout}: {phase}"));
        bar.enable_steady_tick(Duration::from_millis(500));
        if let Some(old) = self.bar.lock().expect("bar lock").replace(bar) {
            old.finish();
        }
    }

    fn advance(&self, n: u64) {
        if let Some(bar) = self.bar.lock().expect("bar lock").as_ref() {
            bar.inc(n);
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.bar.lock().expect("bar lock").take() {
            // A phase that ended early (EOS before the token budget) shows what it used.
            let done = bar.position();
            bar.set_length(done.max(1));
            bar.finish();
        }
    }
}

/// `spade sft`'s bar: optimiser steps of the run, starting at `done` (a resumed run), with
/// the last step's loss as its message.
pub fn step_bar(total: u64, done: u64) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "{prefix:.bold} [{bar:30.cyan/blue}] {pos}/{len} steps {msg} elapsed {elapsed} ETA {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
        .with_style(style)
        .with_prefix("sft");
    bar.set_position(done);
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}
