//! The RL-update lines of `spade bench-model`: per update its seconds, tokens/s, CPU
//! utilisation, peak RSS and the bytes of memory it added per token, read from `/proc`.
//!
//! CPU utilisation is the process's user + system time over the update (`/proc/self/stat`,
//! what `getrusage(RUSAGE_SELF)` reports, dead threads included) divided by its wall time:
//! 200% is both cores of a two-core machine. The peak is the kernel's high-water mark of the
//! resident set (`VmHWM`), reset before each update through `/proc/self/clear_refs`, so each
//! update reports its own peak; bytes per token is that peak less the resident set before the
//! first update of the kind (the model and its optimiser state, before any activation: the
//! allocator keeps freed memory, so the resident set before a later update already holds the
//! earlier one's), over the update's tokens: the constant of the update's linear memory growth.
use std::time::Instant;

use spade_model::memory::UpdateMemory;

/// `/proc/self/stat`'s clock: Linux reports process times in `USER_HZ` ticks, fixed at 100
/// a second in its user-space ABI.
const TICKS_PER_SECOND: f64 = 100.0;

/// The advantages of the benchmark's update batch: `i - (batch - 1) / 2` for a group of two
/// or more (what GRPO's group normalisation gives a spread of rewards), or `advantage` for a
/// one-sample batch, whose group advantage would be 0 and leave nothing to train.
pub fn advantages(batch: usize, advantage: Option<f64>) -> anyhow::Result<Vec<f64>> {
    match (batch, advantage) {
        (0, _) => anyhow::bail!("--batch must be at least 1"),
        (1, None) => anyhow::bail!(
            "a one-sample batch needs --advantage (its group advantage is 0: nothing would train)"
        ),
        (1, Some(a)) if !a.is_finite() || a == 0.0 => {
            anyhow::bail!("--advantage must be finite and non-zero, got {a}")
        }
        (1, Some(a)) => Ok(vec![a]),
        (_, Some(_)) => {
            anyhow::bail!("--advantage is for a one-sample batch (--batch 1); a group's are spread")
        }
        (b, None) => Ok((0..b).map(|i| i as f64 - (b as f64 - 1.0) / 2.0).collect()),
    }
}

/// User + system seconds of the process from the text of `/proc/self/stat`.
pub fn stat_cpu_seconds(stat: &str) -> anyhow::Result<f64> {
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| anyhow::anyhow!("/proc/self/stat has no command name: {stat:?}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let tick = |i: usize| -> anyhow::Result<f64> {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .map(|v| v as f64 / TICKS_PER_SECOND)
            .ok_or_else(|| anyhow::anyhow!("/proc/self/stat has no CPU time field {}", i + 3))
    };
    Ok(tick(11)? + tick(12)?)
}

/// A `kB` line (`VmRSS:`, `VmHWM:`) of `/proc/self/status`, in bytes.
pub fn status_bytes(status: &str, key: &str) -> anyhow::Result<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| anyhow::anyhow!("/proc/self/status has no `{key}:` line"))
}

/// The process's CPU seconds and resident set now.
struct Sample {
    cpu: f64,
    rss: u64,
}

fn sample() -> anyhow::Result<Sample> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let status = std::fs::read_to_string("/proc/self/status")?;
    Ok(Sample {
        cpu: stat_cpu_seconds(&stat)?,
        rss: status_bytes(&status, "VmRSS")?,
    })
}

/// Resets the peak-RSS mark, so the next reading is this update's own peak.
fn reset_peak() -> anyhow::Result<()> {
    std::fs::write("/proc/self/clear_refs", "5").map_err(|e| {
        anyhow::anyhow!("cannot reset the peak RSS through /proc/self/clear_refs: {e}")
    })
}

fn peak_bytes() -> anyhow::Result<u64> {
    status_bytes(&std::fs::read_to_string("/proc/self/status")?, "VmHWM")
}

/// The header of [`time_updates`]'s lines.
pub fn print_header() {
    say!("| measurement | tokens | seconds | tokens/s | CPU % | peak RSS MiB | bytes/token |");
    say!("|---|---|---|---|---|---|---|");
}

/// The line under an update's rows: what `spade_model::memory` estimates for it, the
/// numbers `train_memory_gib` is divided by (the estimate should lie above the measured peak
/// and bytes/token).
pub fn print_estimate(estimate: &UpdateMemory, tokens: usize) {
    say!(
        "| estimate (spade_model::memory) | {tokens} | | | | {:.0} | {} |",
        estimate.bytes_for(tokens) as f64 / (1024.0 * 1024.0),
        estimate.per_token
    );
}

/// Times `runs` updates (the first one pays for first-touch allocations) and prints a line
/// for each.
pub fn time_updates(
    label: &str,
    tokens: usize,
    runs: usize,
    mut step: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let base = sample()?.rss;
    for run in 1..=runs.max(1) {
        reset_peak()?;
        let before = sample()?;
        let start = Instant::now();
        step()?;
        let secs = start.elapsed().as_secs_f64();
        let after = sample()?;
        let peak = peak_bytes()?;
        let added = peak.saturating_sub(base) as f64 / tokens.max(1) as f64;
        say!(
            "| {label}, run {run} | {tokens} | {secs:.2} | {:.1} | {:.0} | {:.0} | {added:.0} |",
            tokens as f64 / secs,
            100.0 * (after.cpu - before.cpu) / secs,
            peak as f64 / (1024.0 * 1024.0),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_spreads_its_advantages_around_zero() {
        assert_eq!(advantages(4, None).ok(), Some(vec![-1.5, -0.5, 0.5, 1.5]));
        assert_eq!(advantages(1, Some(2.0)).ok(), Some(vec![2.0]));
    }

    #[test]
    fn advantages_reject_what_would_not_train() {
        let msg = |r: anyhow::Result<Vec<f64>>| r.err().map(|e| e.to_string());
        assert_eq!(
            msg(advantages(1, None)),
            Some(
                "a one-sample batch needs --advantage (its group advantage is 0: nothing would train)"
                    .into()
            )
        );
        assert_eq!(
            msg(advantages(1, Some(0.0))),
            Some("--advantage must be finite and non-zero, got 0".into())
        );
        assert_eq!(
            msg(advantages(4, Some(1.0))),
            Some("--advantage is for a one-sample batch (--batch 1); a group's are spread".into())
        );
        assert_eq!(
            msg(advantages(0, None)),
            Some("--batch must be at least 1".into())
        );
    }

    #[test]
    fn cpu_seconds_are_utime_plus_stime_after_the_command_name() {
        // A command name with a space and a parenthesis; utime 250 and stime 50 ticks.
        let stat = "42 (spade (x) y) R 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(stat_cpu_seconds(stat).ok(), Some(3.0));
        let err = stat_cpu_seconds("42 spade R").err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("has no command name")));
        let short = stat_cpu_seconds("42 (spade) R 1")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            short,
            Some("/proc/self/stat has no CPU time field 14".into())
        );
    }

    #[test]
    fn status_lines_are_read_in_bytes() {
        let status = "Name:\tspade\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(status_bytes(status, "VmHWM").ok(), Some(2048 * 1024));
        assert_eq!(status_bytes(status, "VmRSS").ok(), Some(1024 * 1024));
        let err = status_bytes(status, "VmSwap").err().map(|e| e.to_string());
        assert_eq!(err, Some("/proc/self/status has no `VmSwap:` line".into()));
    }
}
