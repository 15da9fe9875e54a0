//! Trajectory files: record an episode, replay it bit for bit, check it for tampering.

mod format;
mod raw;
mod read;
pub(crate) mod recorder;
mod replay;
mod tally;
mod writer;

pub use format::{
    CallKind, CallRecord, CallResult, FORMAT_VERSION, Footer, ForkOrigin, Header, Line, ReadCall,
    RecordedError, RecordedLimits, RecordedOptions, StepSummary, sha256_hex,
};
pub use read::{DEFAULT_MAX_FILE_BYTES, Trajectory, TrajectoryError, Truncation, Verified};
pub use recorder::{RecordMeta, RecordSummary};
pub use replay::{Divergence, ReplayOptions, ReplayReport, branch_from, parent_name, replay};
pub use writer::TrajectoryWriter;
