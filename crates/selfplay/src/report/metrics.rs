//! Reading `metrics.jsonl`: one line per rollout, as written by the self-play loop
//! ([`Metrics`](crate::Metrics)). Numbers may be `null` (serde_json writes NaN that
//! way) or absent; both read as `None`.
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::ReportError;

/// The fields of one metrics line that the report uses; unknown fields are ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RolloutRow {
    /// Rollout index (0-based).
    pub rollout: u64,
    /// Whether the design phase ran.
    #[serde(default)]
    pub designed: bool,
    /// Designer completions sampled.
    #[serde(default)]
    pub designs: usize,
    /// Designs that validated.
    #[serde(default)]
    pub valid: usize,
    /// `valid / designs`.
    #[serde(default)]
    pub validity_rate: Option<f64>,
    /// Playable pool size after the rollout.
    #[serde(default)]
    pub pool_size: Option<f64>,
    /// Environments played.
    #[serde(default)]
    pub games: usize,
    /// Win rate without the hint.
    #[serde(default)]
    pub win_rate: Option<f64>,
    /// Win rate with the hint.
    #[serde(default)]
    pub win_rate_hint: Option<f64>,
    /// Mean regret over played games.
    #[serde(default)]
    pub regret: Option<f64>,
    /// Games whose play hit a fuel or deadline limit.
    #[serde(default)]
    pub timeouts: usize,
    /// Per played env.
    #[serde(default)]
    pub envs: Vec<EnvRow>,
    /// GRPO loss (absent when no update ran).
    #[serde(default)]
    pub loss: Option<f64>,
    /// Fixed-env training: per environment played, its difficulty and window.
    #[serde(default)]
    pub fixed: Vec<FixedRow>,
}

/// One environment of fixed-env training in a metrics line.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct FixedRow {
    /// The environment (`rlve:Multiplication`).
    pub env: String,
    /// The difficulty played.
    #[serde(default)]
    pub difficulty: u64,
    /// Win rate of its plays.
    #[serde(default)]
    pub win_rate: Option<f64>,
    /// The controller's window after the rollout.
    #[serde(default)]
    pub low: u64,
    /// Highest difficulty reached.
    #[serde(default)]
    pub high: u64,
}

/// One played environment in a metrics line.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EnvRow {
    /// Pool id.
    pub id: String,
    /// Skill.
    #[serde(default)]
    pub skill: String,
    /// Win rate without the hint.
    #[serde(default)]
    pub win_rate: Option<f64>,
    /// Win rate with the hint.
    #[serde(default)]
    pub win_rate_hint: Option<f64>,
    /// Regret.
    #[serde(default)]
    pub regret: Option<f64>,
    /// Whether a play timed out.
    #[serde(default)]
    pub timeout: bool,
}

/// The rows of a run's metrics file.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsFile {
    /// `RUN/metrics.jsonl`.
    pub path: PathBuf,
    /// One row per rollout, in file order.
    pub rows: Vec<RolloutRow>,
    /// Whether an unparsable last line without a newline was skipped (a rollout still being
    /// written while the report ran).
    pub skipped_partial_line: bool,
}

/// Reads `run/metrics.jsonl`, checking first that `run` is a run directory.
pub fn read_metrics(run: &Path) -> Result<MetricsFile, ReportError> {
    if !run.exists() {
        return Err(ReportError::MissingRunDir {
            path: run.to_path_buf(),
        });
    }
    if !run.is_dir() {
        return Err(ReportError::NotADirectory {
            path: run.to_path_buf(),
        });
    }
    let path = run.join("metrics.jsonl");
    if !path.is_file() {
        return Err(ReportError::NotARunDir {
            path: run.to_path_buf(),
        });
    }
    let bytes = std::fs::read(&path)
        .map_err(|e| ReportError::io(format!("reading {}", path.display()), e))?;
    let (rows, skipped_partial_line) = parse_metrics(&bytes, &path)?;
    if rows.is_empty() {
        return Err(ReportError::NoRollouts { path });
    }
    Ok(MetricsFile {
        path,
        rows,
        skipped_partial_line,
    })
}

/// Parses metrics lines; blank lines are skipped, and so is an unparsable last line that has
/// no newline yet (the loop appends a line, then its newline). Returns the rows and whether
/// such a line was skipped.
pub fn parse_metrics(bytes: &[u8], path: &Path) -> Result<(Vec<RolloutRow>, bool), ReportError> {
    let mut rows = Vec::new();
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let last = lines.len() - 1;
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<RolloutRow>(line) {
            Ok(row) => rows.push(row),
            // `split` yields the text after the last newline as the last item.
            Err(_) if i == last => return Ok((rows, true)),
            Err(source) => {
                return Err(ReportError::MalformedMetrics {
                    path: path.to_path_buf(),
                    line: i + 1,
                    source,
                });
            }
        }
    }
    Ok((rows, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(Vec<RolloutRow>, bool), ReportError> {
        parse_metrics(text.as_bytes(), Path::new("m.jsonl"))
    }

    #[test]
    fn nulls_and_missing_numbers_read_as_none_and_unknown_fields_are_ignored() {
        let (rows, partial) =
            parse("{\"rollout\":0,\"win_rate\":null,\"future\":1,\"envs\":[{\"id\":\"e\"}]}\n")
                .unwrap();
        assert!(!partial);
        assert_eq!(rows[0].win_rate, None);
        assert_eq!(rows[0].regret, None);
        assert_eq!(rows[0].envs[0].id, "e");
        assert!(!rows[0].designed);
    }

    #[test]
    fn a_bad_line_is_named_by_number_but_an_unfinished_last_line_is_skipped() {
        let err = parse("{\"rollout\":0}\n\n{\"rollout\":\n{\"rollout\":2}\n").unwrap_err();
        assert!(
            matches!(err, ReportError::MalformedMetrics { line: 3, .. }),
            "{err}"
        );
        let (rows, partial) = parse("{\"rollout\":0}\n{\"rollout\":1,\"win").unwrap();
        assert_eq!((rows.len(), partial), (1, true));
        // A complete last line without a newline is kept.
        let (rows, partial) = parse("{\"rollout\":0}\n{\"rollout\":1}").unwrap();
        assert_eq!((rows.len(), partial), (2, false));
        // With its newline written, a bad last line is an error.
        let err = parse("{\"rollout\":0}\n{\"rollout\":1,\"win\n").unwrap_err();
        assert!(
            matches!(err, ReportError::MalformedMetrics { line: 2, .. }),
            "{err}"
        );
    }
}
