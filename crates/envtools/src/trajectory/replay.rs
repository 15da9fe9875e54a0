//! Re-executing a recorded episode and comparing every line byte for byte.
//!
//! A trajectory may come from anyone, so the limits it asks for are not taken on trust: each
//! is clamped to the local runtime's (unless the caller trusts the file).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use sha2::{Digest, Sha256};
use spade_sandbox::GUEST_SHA256;
use spade_sandbox::Runtime;

use super::format::{CallKind, ForkOrigin, Line, ReadCall, RecordedLimits, canonical, sha256_hex};
use super::raw;
use super::read::{DEFAULT_MAX_FILE_BYTES, Trajectory, TrajectoryError, Truncation};
use super::recorder::RecordMeta;
use crate::episode::{Branch, Episode, Record};

/// How to replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Use this source instead of the one embedded in the trajectory; it must hash to the
    /// recorded `env_sha256`.
    pub env_source: Option<String>,
    /// Replay even though the trajectory was recorded with a different guest build.
    pub allow_guest_mismatch: bool,
    /// Run under the limits the file records even where they exceed the runtime's own. By
    /// default each recorded limit (fuel, load fuel, memory, deadline, output) is clamped to
    /// the runtime's: a hostile file could otherwise ask for unbounded fuel and time.
    pub trust_limits: bool,
    /// The directory of the trajectory's file, against which a fork's parent file
    /// ([`ForkOrigin::parent`]) is resolved. A fork cannot be replayed without it.
    pub dir: Option<PathBuf>,
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
    /// `(recorded, used)` limits when the replay ran under lower limits than the file asks for
    /// (clamped to the runtime's). The header's `limits` and the hashes that cover it are then
    /// not compared; every call still is.
    pub clamped_limits: Option<(RecordedLimits, RecordedLimits)>,
    /// The recorded outcome (`terminated`, `truncated`, `error:<kind>`, `open`), if the file has a footer.
    pub outcome: Option<String>,
    /// The trace hash of the recorded lines.
    pub trace_sha256: String,
}

/// Re-executes `trajectory` in a fresh sandbox of `runtime` and compares every line byte for
/// byte. The sandbox runs under the recorded limits, each clamped to `runtime`'s own unless
/// `options.trust_limits`.
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
    let local = runtime.limits();
    let mut limits = header.limits.to_limits(local);
    if !options.trust_limits {
        limits = limits.clamp_to(local);
    }
    let used = RecordedLimits::from(&limits);
    let clamped_limits = (used != header.limits).then_some((header.limits, used));
    let runtime = runtime.with_limits(limits);
    let meta = RecordMeta {
        hint: header.hint.clone(),
        metadata: header.metadata.clone(),
    };
    let io = |e: std::io::Error| TrajectoryError::Corrupt {
        line: 0,
        message: format!("writing the replayed lines failed: {e}"),
    };
    // A header that differs on purpose (another guest, clamped limits) changes the hash chain
    // and the trace hash; those are then left out, and every other byte is still compared.
    let mut ignore: Vec<&str> = Vec::new();
    if guest_mismatch.is_some() {
        ignore.push("guest_sha256");
    }
    if clamped_limits.is_some() {
        ignore.push("limits");
    }
    if !ignore.is_empty() {
        ignore.push("prev_sha256");
        // A fork's prefix hash covers the parent's header, which differs the same way; the
        // recorded prefix is checked against the parent's file itself before it runs.
        ignore.push("fork");
    }
    let ignore = ignore.as_slice();
    // The replayed lines are compared as they are written and then dropped: only the last one
    // is kept, never a second copy of the file.
    let mut episode = match &header.fork {
        None => Episode::start(
            &runtime,
            &source,
            header.options.into(),
            Record::to(std::io::sink(), meta),
        )
        .await
        .map_err(io)?,
        Some(fork) => {
            let dir = options
                .dir
                .as_deref()
                .ok_or_else(|| TrajectoryError::ForkParent {
                    parent: fork.parent.clone(),
                    message: "this trajectory is a fork; replay it from its file, so that its \
                          parent can be read beside it"
                        .to_owned(),
                })?;
            replay_fork_point(
                &runtime,
                dir,
                fork,
                Record::to(std::io::sink(), meta),
                ignore,
            )
            .await?
        }
    };
    let mut report = ReplayReport {
        calls: 0,
        steps: 0,
        divergence: None,
        truncated: trajectory.truncated.clone(),
        guest_mismatch: guest_mismatch.clone(),
        clamped_limits,
        outcome: trajectory.footer.as_ref().map(|(_, f)| f.outcome.clone()),
        trace_sha256: String::new(),
    };
    report.divergence = compare(
        1,
        "header",
        &trajectory.header_text,
        episode.header_text().expect("the replay is recorded"),
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
        run_call(&mut episode, call).await;
        report.calls += 1;
        report.steps = step;
        let replayed = episode.last_line().expect("the replay is recorded");
        report.divergence = compare(i + 2, &what, text, replayed, ignore);
    }
    let footer = episode
        .finish()
        .map_err(io)?
        .summary
        .expect("the replay is recorded");
    report.trace_sha256 = footer.trace_sha256.clone();
    if report.divergence.is_none()
        && let Some((text, _)) = &trajectory.footer
    {
        let replayed = canonical(&Line::Footer(footer));
        let mut ignore_footer = ignore.to_vec();
        if !ignore.is_empty() {
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

/// Runs the recorded `call` in `episode`. Its result is in the line the episode writes, which
/// the caller compares with the recorded one.
async fn run_call(episode: &mut Episode, call: &ReadCall) {
    let _ = match call.call {
        CallKind::Load => Ok(()),
        CallKind::Reset => match &call.fields {
            Some(fields) => episode.reset_with(call.seed, fields).await.result.map(drop),
            None => episode.reset(call.seed).await.result.map(drop),
        },
        CallKind::Step => {
            let action = call.action.as_deref().unwrap_or_default();
            episode.step(action).await.result.map(drop)
        }
        CallKind::Solution => episode.solution().await.result.map(drop),
        CallKind::Close => episode.close().await.result.map(drop),
    };
}

/// The episode a fork's replay starts from: the parent's calls before the fork, replayed from
/// the parent's file (itself a fork or not) and compared line by line, then forked as
/// `fork` says, recorded with `meta`. Refused when the parent file is missing, its lines
/// before the fork hash differently from what the fork records, or their replay diverges.
fn replay_fork_point<'a>(
    runtime: &'a Runtime,
    dir: &'a Path,
    fork: &'a ForkOrigin,
    record: Record,
    ignore: &'a [&'a str],
) -> Pin<Box<dyn Future<Output = Result<Episode, TrajectoryError>> + Send + 'a>> {
    Box::pin(async move {
        let path = dir.join(&fork.parent);
        let refused = |message: String| TrajectoryError::ForkParent {
            parent: path.display().to_string(),
            message,
        };
        let parent =
            Trajectory::open(&path, DEFAULT_MAX_FILE_BYTES).map_err(|e| refused(e.to_string()))?;
        let first = parent.header.fork.as_ref().map_or(0, |f| f.at);
        let count = fork
            .at
            .checked_sub(first)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= parent.calls.len())
            .ok_or_else(|| {
                refused(format!(
                    "it holds calls {first} to {}, but the fork was made after call {}",
                    first + parent.calls.len() as u64,
                    fork.at
                ))
            })?;
        let hash = prefix_sha256(&parent, count);
        if hash != fork.prefix_sha256 {
            return Err(refused(format!(
                "its lines before the fork are not the ones the fork was made from (they hash \
                 to {hash}, the fork records {}): the parent was changed after the fork",
                fork.prefix_sha256
            )));
        }
        let parent_meta = RecordMeta {
            hint: parent.header.hint.clone(),
            metadata: parent.header.metadata.clone(),
        };
        let mut episode = match &parent.header.fork {
            None => Episode::start(
                runtime,
                &parent.header.env_source,
                parent.header.options.into(),
                Record::to(std::io::sink(), parent_meta),
            )
            .await
            .map_err(|e| refused(e.to_string()))?,
            Some(grandparent) => {
                let dir = path.parent().unwrap_or(Path::new("."));
                let record = Record::to(std::io::sink(), parent_meta);
                replay_fork_point(runtime, dir, grandparent, record, ignore).await?
            }
        };
        for (i, (text, call)) in parent.calls[..count].iter().enumerate() {
            run_call(&mut episode, call).await;
            let replayed = episode.last_line().expect("the prefix is recorded");
            if let Some(divergence) = compare(i + 2, "prefix", text, replayed, ignore) {
                return Err(refused(format!("its replay diverged at {divergence}")));
            }
        }
        let branch = Branch {
            reseed: fork.reseed,
            record,
            parent: fork.parent.clone(),
        };
        episode
            .fork(branch)
            .await
            .result
            .map_err(|e| refused(format!("forking after call {}: {e}", fork.at)))
    })
}

/// sha256 of the header and first `count` call lines of `trajectory`, each with its newline.
fn prefix_sha256(trajectory: &Trajectory, count: usize) -> String {
    let mut prefix = Sha256::new();
    let calls = trajectory.calls[..count].iter().map(|(text, _)| text);
    for line in std::iter::once(&trajectory.header_text).chain(calls) {
        prefix.update(line.as_bytes());
        prefix.update(b"\n");
    }
    hex::encode(prefix.finalize())
}

/// How a fork recorded at `fork` names its parent's file at `parent` ([`ForkOrigin::parent`]):
/// by its file name when both are in one directory (the pair can then be moved together),
/// else by the parent's absolute path.
pub fn parent_name(parent: &Path, fork: &Path) -> String {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (parent, fork) = (absolute(parent), absolute(fork));
    match parent.file_name() {
        Some(name) if parent.parent() == fork.parent() => name.to_string_lossy().into_owned(),
        _ => parent.display().to_string(),
    }
}

/// A branch of the recorded episode at `path`: its first `at` calls (counted from 0, the
/// load; a fork's file counts on from its parent's) replayed and compared line by line (its
/// parents' first, for a fork), then forked into a new episode that `record` records (naming
/// `path` as its parent, [`parent_name`]) and `reseed` reseeds. The sandbox runs under the
/// file's limits, clamped to `runtime`'s unless `options.trust_limits`.
pub async fn branch_from(
    runtime: &Runtime,
    path: &Path,
    at: u64,
    reseed: Option<u64>,
    record: (Record, Option<&Path>),
    options: &ReplayOptions,
) -> Result<Episode, TrajectoryError> {
    let trajectory = Trajectory::open(path, DEFAULT_MAX_FILE_BYTES)?;
    let header = &trajectory.header;
    if header.guest_sha256 != GUEST_SHA256 && !options.allow_guest_mismatch {
        return Err(TrajectoryError::GuestMismatch {
            recorded: header.guest_sha256.clone(),
            this: GUEST_SHA256.to_owned(),
        });
    }
    let first = header.fork.as_ref().map_or(0, |f| f.at);
    let last = first + trajectory.calls.len() as u64;
    if at <= first || at > last {
        return Err(TrajectoryError::ForkParent {
            parent: path.display().to_string(),
            message: format!(
                "it holds calls {first} to {}; a branch goes on after one of them (give {} to {last})",
                last.saturating_sub(1),
                first + 1
            ),
        });
    }
    let local = runtime.limits();
    let mut limits = header.limits.to_limits(local);
    if !options.trust_limits {
        limits = limits.clamp_to(local);
    }
    let clamped = RecordedLimits::from(&limits) != header.limits;
    let runtime = runtime.with_limits(limits);
    let mut ignore: Vec<&str> = Vec::new();
    if header.guest_sha256 != GUEST_SHA256 {
        ignore.push("guest_sha256");
    }
    if clamped {
        ignore.push("limits");
    }
    if !ignore.is_empty() {
        ignore.extend(["prev_sha256", "fork"]);
    }
    // The parent is named as the branch's file names it, and found from that file's
    // directory; an unrecorded branch names it from its own.
    let (record, record_path) = record;
    let absolute = std::path::absolute(path).map_err(|e| TrajectoryError::Io(e.to_string()))?;
    let (dir, parent) = match record_path {
        Some(fork) => {
            let fork = std::path::absolute(fork).map_err(|e| TrajectoryError::Io(e.to_string()))?;
            let dir = fork.parent().map(Path::to_path_buf).unwrap_or_default();
            (dir, parent_name(&absolute, &fork))
        }
        None => {
            let dir = absolute.parent().map(Path::to_path_buf).unwrap_or_default();
            let name = absolute.file_name().unwrap_or_default();
            (dir, name.to_string_lossy().into_owned())
        }
    };
    let origin = ForkOrigin {
        parent,
        at,
        prefix_sha256: prefix_sha256(&trajectory, (at - first) as usize),
        reseed,
    };
    replay_fork_point(&runtime, &dir, &origin, record, &ignore).await
}

/// Compares two lines byte for byte, except for the values of the named top-level fields.
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
    // The recorded values of ignored fields in place of the replayed ones.
    let spliced = if ignore.is_empty() {
        None
    } else {
        raw::replace_members(replayed, ignore, |field| {
            raw::member(recorded, field).map(str::to_owned)
        })
    };
    let replayed = spliced.as_deref().unwrap_or(replayed);
    if recorded == replayed {
        return None;
    }
    let (field, recorded, replayed) = first_difference("", recorded, replayed);
    Some(Divergence {
        line,
        what: what.to_owned(),
        field: if field.is_empty() {
            "(whole line)".to_owned()
        } else {
            field
        },
        recorded: clip(&recorded),
        replayed: clip(&replayed),
    })
}

/// At most 300 characters of `text`.
fn clip(text: &str) -> String {
    match text.char_indices().nth(300) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// The dotted path of the first difference between two different JSON texts `a` and `b`, and
/// the raw text of each side there. Members are compared in written order (a member in another
/// place is a difference), values by their exact text (`1.0` and `1` differ). Where the
/// difference is outside any member (spacing, a key's escapes), the path of the enclosing value.
fn first_difference(path: &str, a: &str, b: &str) -> (String, String, String) {
    let whole = || (path.to_owned(), a.to_owned(), b.to_owned());
    if let (Some(x), Some(y)) = (raw::members(a), raw::members(b)) {
        for i in 0..x.len().max(y.len()) {
            match (x.get(i), y.get(i)) {
                (Some((ka, va)), Some((kb, vb))) if ka == kb => {
                    if va.get() != vb.get() {
                        return first_difference(&join(path, ka), va.get(), vb.get());
                    }
                }
                (Some((ka, va)), Some((kb, vb))) => {
                    let entry = |k: &str, v: &str| format!("{}:{v}", serde_json::Value::from(k));
                    return (join(path, ka), entry(ka, va.get()), entry(kb, vb.get()));
                }
                (Some((ka, va)), None) => {
                    return (join(path, ka), va.get().to_owned(), "(absent)".to_owned());
                }
                (None, Some((kb, vb))) => {
                    return (join(path, kb), "(absent)".to_owned(), vb.get().to_owned());
                }
                (None, None) => break,
            }
        }
        return whole();
    }
    if let (Some(x), Some(y)) = (raw::elements(a), raw::elements(b)) {
        for i in 0..x.len().max(y.len()) {
            let at = join(path, &i.to_string());
            match (x.get(i), y.get(i)) {
                (Some(va), Some(vb)) if va.get() != vb.get() => {
                    return first_difference(&at, va.get(), vb.get());
                }
                (Some(_), Some(_)) => {}
                (Some(va), None) => return (at, va.get().to_owned(), "(absent)".to_owned()),
                (None, Some(vb)) => return (at, "(absent)".to_owned(), vb.get().to_owned()),
                (None, None) => break,
            }
        }
        return whole();
    }
    whole()
}
