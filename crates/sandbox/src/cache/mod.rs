//! What the sandbox keeps between processes and between sandboxes: the pre-initialised, compiled
//! guest ([`artifact`]), compiled environment bytecode ([`code`]), and load snapshots
//! ([`snapshot`]: how a sandbox is loaded, what a snapshot holds; [`snapshot_file`]: snapshots
//! on disk; [`snapshot_restore`]: writing one into a fresh sandbox's memory).
//!
//! Every file is written under a temporary name and renamed, never changed in place, and read
//! back only after its checksum and length check.

pub(crate) mod artifact;
pub(crate) mod code;
pub(crate) mod snapshot;
pub(crate) mod snapshot_file;
pub(crate) mod snapshot_restore;
