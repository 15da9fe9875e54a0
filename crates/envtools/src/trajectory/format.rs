//! The trajectory file format (JSON Lines), version [`FORMAT_VERSION`].
//!
//! ```text
//! {"type":"header","format":2,"spade_version":...,"guest_sha256":...,"env_sha256":...,"env_source":...,
//!  "options":{"seed":7,"max_turns":null},"limits":{...},"hint":null,"metadata":{}}
//! {"type":"call","index":0,"call":"load","ok":{"class_name":...},"fuel":123,"prev_sha256":"<sha256 of the header line>"}
//! {"type":"call","index":1,"call":"reset","seed":7,"ok":{"observation":...,"info":{...}},"fuel":456,"prev_sha256":...}
//! {"type":"call","index":2,"call":"step","action":"...","ok":{...},"fuel":789,"prev_sha256":...}
//! {"type":"footer","steps":1,"total_reward":1.0,"spade_return":1.0,"outcome":"terminated","lines":4,"trace_sha256":...}
//! ```
//!
//! Every line is written in one canonical form (field order fixed by these types, compact JSON,
//! info dicts and tool schemas embedded verbatim as the guest produced them, so numbers keep
//! their exact spelling, integers of any size included), and a replay compares lines byte for
//! byte. Each call line carries the sha256 of the line before it, which lets a tamper check
//! name the line that was changed. The footer's `trace_sha256` covers every line before it and
//! every other field of the footer itself: it is the sha256 of the lines before the footer
//! (newlines included) followed by the footer line with `trace_sha256` set to `""`.
//!
//! Version 2 (this one) differs from version 1 in two ways: the trace hash covers the footer,
//! and a non-finite `total_reward` (a sum of finite rewards can overflow) is written as the
//! string `"Infinity"`, `"-Infinity"` or `"NaN"`, where version 1 wrote `null` and could not
//! read it back. Version 1 files are refused with a message saying so.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use spade_sandbox::Limits;
use spade_sandbox::{CallError, ErrorKind};
use spade_sandbox::{CallOutput, ExtraFields, SandboxOptions};

/// The trajectory format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 2;

/// sha256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One line of a trajectory file, as written.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    Header(Header),
    Call(CallRecord),
    Footer(Footer),
}

/// A call line as read back: what a replay needs to re-execute the call and what the tamper
/// check needs to recompute the footer. The result itself stays in the line's text, which a
/// replay compares byte for byte.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadCall {
    pub index: u64,
    pub call: CallKind,
    pub seed: Option<u64>,
    /// A reset's extra fields (see [`CallRecord::fields`]).
    pub fields: Option<ExtraFields>,
    pub action: Option<String>,
    /// The reward and flags of a successful `step`.
    pub step: Option<StepSummary>,
    /// The kind of the recorded error, if the call failed.
    pub error: Option<ErrorKind>,
    pub fuel: u64,
    pub prev_sha256: String,
}

/// The parts of a successful step's result that the footer summarises.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct StepSummary {
    pub reward: f64,
    pub terminated: bool,
    pub truncated: bool,
}

/// The first line: everything needed to re-create the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: u32,
    pub spade_version: String,
    pub guest_sha256: String,
    pub env_sha256: String,
    pub env_source: String,
    pub options: RecordedOptions,
    pub limits: RecordedLimits,
    /// The privileged hint shown to the agent, if any.
    pub hint: Option<String>,
    /// Caller metadata (role, model, run id, ...).
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Set when the episode is a fork of another recorded episode: its calls go on from the
    /// parent's first [`ForkOrigin::at`] calls, which a replay runs first from the parent's
    /// file. Absent from the file otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkOrigin>,
}

/// Where a forked episode comes from: its parent's trajectory and the point it forked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// The parent's trajectory file, as the caller named it: a path relative to the directory
    /// of the fork's own file, or absolute.
    pub parent: String,
    /// The calls of the parent's that precede the fork (its load included): the fork's first
    /// call has this index.
    pub at: u64,
    /// sha256 of the parent's lines before the fork (its header and first `at` calls, each
    /// with its newline): a replay refuses a parent file whose prefix differs.
    pub prefix_sha256: String,
    /// The seed the fork's entropy and module-global `random` were seeded with anew, if any
    /// (`None`: an exact copy of the parent's state).
    pub reseed: Option<u64>,
}

/// [`SandboxOptions`] as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedOptions {
    pub seed: u64,
    pub max_turns: Option<u32>,
}

impl From<SandboxOptions> for RecordedOptions {
    fn from(o: SandboxOptions) -> Self {
        RecordedOptions {
            seed: o.seed,
            max_turns: o.max_turns,
        }
    }
}

impl From<RecordedOptions> for SandboxOptions {
    fn from(o: RecordedOptions) -> Self {
        SandboxOptions {
            seed: o.seed,
            max_turns: o.max_turns,
        }
    }
}

/// [`Limits`] as recorded (the deadline in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedLimits {
    pub fuel_per_call: u64,
    pub load_fuel: u64,
    pub memory_limit: u64,
    pub call_deadline_ms: u64,
    pub output_limit: u64,
}

impl From<&Limits> for RecordedLimits {
    fn from(l: &Limits) -> Self {
        RecordedLimits {
            fuel_per_call: l.fuel_per_call,
            load_fuel: l.load_fuel,
            memory_limit: l.memory_limit as u64,
            call_deadline_ms: l.call_deadline.as_millis() as u64,
            output_limit: l.output_limit as u64,
        }
    }
}

impl RecordedLimits {
    /// `base` with the recorded limits in place of its own (limits a trajectory does not record
    /// keep `base`'s values).
    pub fn to_limits(&self, base: &Limits) -> Limits {
        let mut limits = base.clone();
        limits.fuel_per_call = self.fuel_per_call;
        limits.load_fuel = self.load_fuel;
        limits.memory_limit = usize::try_from(self.memory_limit).unwrap_or(usize::MAX);
        limits.call_deadline = std::time::Duration::from_millis(self.call_deadline_ms);
        limits.output_limit = usize::try_from(self.output_limit).unwrap_or(usize::MAX);
        limits
    }
}

/// Which sandbox call a line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    Load,
    Reset,
    Step,
    Solution,
    Close,
}

/// One call: its arguments, its result or typed error, the fuel it used, what it printed.
#[derive(Debug, Clone, Serialize)]
pub struct CallRecord {
    pub index: u64,
    pub call: CallKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// A reset's extra fields (a JSON object), split by the environment's `reset` signature
    /// (`Sandbox::reset_with`); absent for a plain reset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<ExtraFields>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok: Option<CallResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RecordedError>,
    pub fuel: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_dropped_bytes: Option<u64>,
    /// sha256 of the previous line's bytes (header included).
    pub prev_sha256: String,
}

impl CallRecord {
    /// A record with no result yet.
    pub fn new(index: u64, call: CallKind, fuel: u64, output: &CallOutput) -> Self {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        CallRecord {
            index,
            call,
            seed: None,
            fields: None,
            action: None,
            ok: None,
            error: None,
            fuel,
            stdout: non_empty(&output.stdout),
            stderr: non_empty(&output.stderr),
            output_dropped_bytes: (output.dropped_bytes > 0).then_some(output.dropped_bytes),
            prev_sha256: String::new(),
        }
    }
}

/// The result of a successful call, shaped by the call.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum CallResult {
    Step {
        observation: String,
        reward: f64,
        terminated: bool,
        truncated: bool,
        info: Box<RawValue>,
    },
    Reset {
        observation: String,
        info: Box<RawValue>,
        /// The reset fields `reset` did not take (only on a reset with fields that dropped
        /// some).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        dropped: Vec<String>,
    },
    Load {
        class_name: String,
        max_turns: Option<u32>,
        tools: Option<Box<RawValue>>,
    },
    Solution {
        solution: String,
    },
    Close {},
}

/// A typed error as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedError {
    pub kind: ErrorKind,
    pub message: String,
}

impl From<&CallError> for RecordedError {
    fn from(err: &CallError) -> Self {
        RecordedError {
            kind: err.kind(),
            message: err.to_string(),
        }
    }
}

/// The last line: a summary and the trace hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Footer {
    /// Number of `step` calls.
    pub steps: u64,
    /// Sum of step rewards (infinite when the sum overflows; written as `"Infinity"`).
    #[serde(with = "float_or_name")]
    pub total_reward: f64,
    /// The SPADE episode return: the last reward clipped to [-1, 1] if the episode
    /// terminated, else 0.
    #[serde(with = "float_or_name")]
    pub spade_return: f64,
    /// `terminated`, `truncated`, `error:<kind>` or `open` (stopped before the episode ended).
    pub outcome: String,
    /// Lines before the footer.
    pub lines: u64,
    /// sha256 over every line before the footer (newlines included) and this line with this
    /// field set to `""`.
    pub trace_sha256: String,
}

/// An `f64` as a JSON number when finite, else as the name Python's `json` uses for it
/// (`"Infinity"`, `"-Infinity"`, `"NaN"`), which JSON numbers cannot spell.
mod float_or_name {
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
        if value.is_finite() {
            serializer.serialize_f64(*value)
        } else if value.is_nan() {
            serializer.serialize_str("NaN")
        } else if *value > 0.0 {
            serializer.serialize_str("Infinity")
        } else {
            serializer.serialize_str("-Infinity")
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        deserializer.deserialize_any(FloatOrName)
    }

    struct FloatOrName;

    impl Visitor<'_> for FloatOrName {
        type Value = f64;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number, \"Infinity\", \"-Infinity\" or \"NaN\"")
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
            match v {
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                "NaN" => Ok(f64::NAN),
                other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
            }
        }
    }
}

/// A JSON text embedded verbatim in a line.
pub fn raw_json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap_or_else(|_| {
        RawValue::from_string(serde_json::to_string(text).expect("strings serialise"))
            .expect("a JSON string")
    })
}

/// The footer line's text as the trace hash covers it: `footer` with `trace_sha256` empty.
pub fn unsigned_footer(footer: &Footer) -> String {
    let mut unsigned = footer.clone();
    unsigned.trace_sha256 = String::new();
    canonical(&Line::Footer(unsigned))
}

/// The canonical text of a line (no trailing newline).
pub fn canonical(line: &Line) -> String {
    serde_json::to_string(line).expect("trajectory lines always serialise")
}
