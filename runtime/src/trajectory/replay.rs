//! Re-executing a recorded episode and comparing every field.

use serde_json::Value;

use super::format::{CallKind, sha256_hex};
use super::read::{Trajectory, TrajectoryError, Truncation};
use super::recorder::{RecordMeta, Recorder};
use crate::GUEST_SHA256;
use crate::runtime::Runtime;

/// How to replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Use this source instead of the one embedded in the trajectory; it must hash to the
    /// recorded `env_sha256`.
    pub env_source: Option<String>,
    /// Replay even though the trajectory was recorded with a different guest build.
    pub allow_guest_mismatch: bool,
}

/// The first place where the replay differs from the recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// 1-based line number in the trajectory file.
    pub line: usize,
    /// What the line records (`step 3`, `reset`, `footer`, ...).
    pub what: String,
    /// Dotted path of the first differing field (`ok.reward`, `fuel`, ...).
    pub field: String,
    pub recorded: String,
    pub replayed: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} ({}), field {}:\n  recorded: {}\n  replayed: {}",
            self.line, self.what, self.field, self.recorded, self.replayed
        )
    }
}

/// The result of a replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// Calls re-executed (load included).
    pub calls: usize,
    /// Steps among them.
    pub steps: usize,
    /// The first difference, if any.
    pub divergence: Option<Divergence>,
    /// Set when the file was cut short; the complete lines were still replayed.
    pub truncated: Option<Truncation>,
    /// `(recorded, this build)` guest hashes when they differ and the replay went ahead.
    pub guest_mismatch: Option<(String, String)>,
    /// The recorded outcome (`terminated`, `truncated`, `error:<kind>`, `open`), if the file has a footer.
    pub outcome: Option<String>,
    /// The trace hash of the recorded lines.
    pub trace_sha256: String,
}

/// Re-executes `trajectory` in a fresh sandbox of `runtime` (under the recorded limits) and
/// compares every line.
pub async fn replay(
    runtime: &Runtime,
    trajectory: &Trajectory,
    options: &ReplayOptions,
) -> Result<ReplayReport, TrajectoryError> {
    let header = &trajectory.header;
    let guest_mismatch = (header.guest_sha256 != GUEST_SHA256)
        .then(|| (header.guest_sha256.clone(), GUEST_SHA256.to_owned()));
    if let Some((recorded, this)) = &guest_mismatch
        && !options.allow_guest_mismatch
    {
        return Err(TrajectoryError::GuestMismatch {
            recorded: recorded.clone(),
            this: this.clone(),
        });
    }
    let source = match &options.env_source {
        Some(source) => {
            let given = sha256_hex(source.as_bytes());
            if given != header.env_sha256 {
                return Err(TrajectoryError::EnvMismatch {
                    recorded: header.env_sha256.clone(),
                    given,
                });
            }
            source.clone()
        }
        None => {
            let embedded = sha256_hex(header.env_source.as_bytes());
            if embedded != header.env_sha256 {
                return Err(TrajectoryError::Tampered(format!(
                    "the embedded environment source was altered: the header records sha256 {}, the source hashes to {embedded}",
                    header.env_sha256
                )));
            }
            header.env_source.clone()
        }
    };
    let runtime = runtime.with_limits(header.limits.into());
    let meta = RecordMeta {
        hint: header.hint.clone(),
        metadata: header.metadata.clone(),
    };
    let io = |e: std::io::Error| TrajectoryError::Corrupt {
        line: 0,
        message: format!("in-memory write failed: {e}"),
    };
    let mut recorder = Recorder::start(&runtime, &source, header.options.into(), meta, Vec::new())
        .await
        .map_err(io)?;
    let mut report = ReplayReport {
        calls: 0,
        steps: 0,
        divergence: None,
        truncated: trajectory.truncated.clone(),
        guest_mismatch: guest_mismatch.clone(),
        outcome: trajectory.footer.as_ref().map(|(_, f)| f.outcome.clone()),
        trace_sha256: String::new(),
    };
    let ignore: &[&str] = if guest_mismatch.is_some() {
        &["guest_sha256", "prev_sha256"]
    } else {
        &[]
    };
    report.divergence = compare(
        1,
        "header",
        &trajectory.header_text,
        recorder.header_text(),
        ignore,
    );
    let mut step = 0;
    for (i, (text, call)) in trajectory.calls.iter().enumerate() {
        if report.divergence.is_some() {
            break;
        }
        let what = match call.call {
            CallKind::Load => "load".to_owned(),
            CallKind::Reset => "reset".to_owned(),
            CallKind::Step => {
                step += 1;
                format!("step {step}")
            }
            CallKind::Solution => "solution".to_owned(),
            CallKind::Close => "close".to_owned(),
        };
        let _ = match call.call {
            CallKind::Load => Ok(()),
            CallKind::Reset => recorder.reset(call.seed).await.map(drop),
            CallKind::Step => recorder
                .step(call.action.as_deref().unwrap_or_default())
                .await
                .map(drop),
            CallKind::Solution => recorder.solution().await.map(drop),
            CallKind::Close => recorder.close().await.map(drop),
        };
        report.calls += 1;
        report.steps = step;
        let replayed = recorder.last_line().to_owned();
        report.divergence = compare(i + 2, &what, text, &replayed, ignore);
    }
    let (footer, _) = recorder.finish().map_err(io)?;
    report.trace_sha256 = footer.trace_sha256.clone();
    if report.divergence.is_none()
        && let Some((text, _)) = &trajectory.footer
    {
        let replayed =
            serde_json::to_string(&super::format::Line::Footer(footer)).expect("footer serialises");
        let mut ignore_footer = ignore.to_vec();
        if guest_mismatch.is_some() {
            ignore_footer.push("trace_sha256");
        }
        report.divergence = compare(
            trajectory.calls.len() + 2,
            "footer",
            text,
            &replayed,
            &ignore_footer,
        );
    }
    Ok(report)
}

/// Compares two lines as JSON, ignoring the named top-level fields.
fn compare(
    line: usize,
    what: &str,
    recorded: &str,
    replayed: &str,
    ignore: &[&str],
) -> Option<Divergence> {
    if recorded == replayed {
        return None;
    }
    let parse = |text: &str| {
        let mut value: Value = serde_json::from_str(text).unwrap_or(Value::String(text.to_owned()));
        if let Some(object) = value.as_object_mut() {
            for field in ignore {
                object.remove(*field);
            }
        }
        value
    };
    let (a, b) = (parse(recorded), parse(replayed));
    let (field, x, y) = first_difference(&a, &b, String::new())?;
    Some(Divergence {
        line,
        what: what.to_owned(),
        field: if field.is_empty() {
            "(whole line)".to_owned()
        } else {
            field
        },
        recorded: show(x),
        replayed: show(y),
    })
}

fn show(value: Option<&Value>) -> String {
    let text = match value {
        None => "(absent)".to_owned(),
        Some(v) => v.to_string(),
    };
    if text.chars().count() > 300 {
        format!("{}...", text.chars().take(300).collect::<String>())
    } else {
        text
    }
}

fn first_difference<'a>(
    a: &'a Value,
    b: &'a Value,
    path: String,
) -> Option<(String, Option<&'a Value>, Option<&'a Value>)> {
    if a == b {
        return None;
    }
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            // Field order of the canonical line: walk the recorded object's keys, then extras.
            for (key, va) in x {
                match y.get(key) {
                    Some(vb) => {
                        if let Some(found) = first_difference(va, vb, join(key)) {
                            return Some(found);
                        }
                    }
                    None => return Some((join(key), Some(va), None)),
                }
            }
            y.iter()
                .find(|(k, _)| !x.contains_key(*k))
                .map(|(k, vb)| (join(k), None, Some(vb)))
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                if let Some(found) = first_difference(va, vb, join(&i.to_string())) {
                    return Some(found);
                }
            }
            let i = x.len().min(y.len());
            Some((join(&i.to_string()), x.get(i), y.get(i)))
        }
        _ => Some((path, Some(a), Some(b))),
    }
}
