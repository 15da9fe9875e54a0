//! Trajectory files: record an episode, replay it bit for bit, check it for tampering.

mod format;
mod read;
mod recorder;
mod replay;
mod writer;

pub use format::{
    CallKind, CallRecord, CallResult, FORMAT_VERSION, Footer, Header, Line, ReadCall, ReadLine,
    RecordedError, RecordedLimits, RecordedOptions, sha256_hex,
};
pub use read::{Trajectory, TrajectoryError, Truncation, Verified};
pub use recorder::{RecordError, RecordMeta, RecordSummary, Recorder};
pub use replay::{Divergence, ReplayOptions, ReplayReport, replay};
pub use writer::TrajectoryWriter;
