//! Typed outcomes of sandbox calls.
//!
//! Two families: errors the environment caused (`Load`, `Contract`, `Exception`), which a caller
//! shows to whoever wrote the environment, and limits the host enforced (`OutOfFuel`,
//! `Deadline`, `MemoryLimit`, `StackOverflow`, `GuestTrap`), after which the sandbox is dead.

use std::time::Duration;

/// Why a sandbox call did not return a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The source could not be loaded (syntax error, no or several `…Env` classes, an import
    /// the sandbox cannot satisfy, an exception while the module ran).
    #[error("load error: {0}")]
    Load(String),
    /// The environment returned a value of the wrong shape or type.
    #[error("contract error: {0}")]
    Contract(String),
    /// The environment raised; the text is the Python traceback.
    #[error("the environment raised an exception:\n{0}")]
    Exception(String),
    /// The call used all of its fuel (deterministic: the same call always stops here).
    #[error("out of fuel: the call used its whole budget of {budget} fuel")]
    OutOfFuel { budget: u64 },
    /// The call ran longer than the wall-clock deadline.
    #[error("deadline exceeded: the call ran longer than {0:?}")]
    Deadline(Duration),
    /// The sandbox needed more memory than its cap: the memory limiter denied a growth during
    /// the call. (A `MemoryError` the environment raises itself is an [`CallError::Exception`].)
    #[error("memory limit: {detail} (limit {limit} bytes)")]
    MemoryLimit { limit: usize, detail: String },
    /// The guest exhausted a stack: the engine's call stack (`Config::max_wasm_stack`), or
    /// the interpreter's native stack in its linear memory, which native recursion (comparing,
    /// printing or hashing containers nested deeper than Python's recursion limit checks)
    /// overflows; an overflow of that stack wraps out of the memory and traps (docs/sandbox.md).
    #[error("stack overflow: the environment recursed too deeply for the sandbox's stack")]
    StackOverflow,
    /// Any other WebAssembly trap (a bug in the interpreter, or an attack on it).
    #[error("guest trap: {0}")]
    GuestTrap(String),
    /// The sandbox hit a host limit earlier (or a call's future was dropped before it finished:
    /// [`ErrorKind::Cancelled`]) and cannot be used again; its store is already freed.
    #[error("this sandbox is dead after {}; create a new sandbox", dead_reason(*.0))]
    Dead(ErrorKind),
    /// The call was made in the wrong order (for example `step` after `close`).
    #[error("usage error: {0}")]
    Usage(String),
    /// No sandbox slot was free: the runtime's pool ([`Config::pool`]) holds as many live
    /// sandboxes as it has slots. Nothing ran; drop sandboxes, or build the runtime with more
    /// slots.
    ///
    /// [`Config::pool`]: crate::Config::pool
    #[error("no free sandbox slot: {0}")]
    Capacity(String),
}

/// The kind of a [`CallError`], stable for machines (`spade run --json`, trajectory files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Load,
    Contract,
    Exception,
    OutOfFuel,
    Deadline,
    MemoryLimit,
    StackOverflow,
    GuestTrap,
    Dead,
    Usage,
    Capacity,
    /// A call whose future was dropped before it finished (only ever the reason of a `Dead`).
    Cancelled,
}

/// "an earlier out_of_fuel error", or what a cancelled call means.
fn dead_reason(kind: ErrorKind) -> String {
    match kind {
        ErrorKind::Cancelled => {
            "an earlier call was cancelled (its future was dropped before it finished)".to_owned()
        }
        kind => format!("an earlier {kind} error"),
    }
}

impl ErrorKind {
    /// The snake_case name used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Load => "load",
            ErrorKind::Contract => "contract",
            ErrorKind::Exception => "exception",
            ErrorKind::OutOfFuel => "out_of_fuel",
            ErrorKind::Deadline => "deadline",
            ErrorKind::MemoryLimit => "memory_limit",
            ErrorKind::StackOverflow => "stack_overflow",
            ErrorKind::GuestTrap => "guest_trap",
            ErrorKind::Dead => "dead",
            ErrorKind::Usage => "usage",
            ErrorKind::Capacity => "capacity",
            ErrorKind::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl CallError {
    /// This error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CallError::Load(_) => ErrorKind::Load,
            CallError::Contract(_) => ErrorKind::Contract,
            CallError::Exception(_) => ErrorKind::Exception,
            CallError::OutOfFuel { .. } => ErrorKind::OutOfFuel,
            CallError::Deadline(_) => ErrorKind::Deadline,
            CallError::MemoryLimit { .. } => ErrorKind::MemoryLimit,
            CallError::StackOverflow => ErrorKind::StackOverflow,
            CallError::GuestTrap(_) => ErrorKind::GuestTrap,
            CallError::Dead(_) => ErrorKind::Dead,
            CallError::Usage(_) => ErrorKind::Usage,
            CallError::Capacity(_) => ErrorKind::Capacity,
        }
    }

    /// True for limits the host enforced; the sandbox cannot be used after one.
    pub fn kills_sandbox(&self) -> bool {
        matches!(
            self,
            CallError::OutOfFuel { .. }
                | CallError::Deadline(_)
                | CallError::MemoryLimit { .. }
                | CallError::StackOverflow
                | CallError::GuestTrap(_)
                | CallError::Capacity(_)
        )
    }

    /// The detail text without the kind prefix (the traceback, the contract message, ...).
    pub fn detail(&self) -> String {
        match self {
            CallError::Load(s)
            | CallError::Contract(s)
            | CallError::Exception(s)
            | CallError::Usage(s)
            | CallError::Capacity(s) => s.clone(),
            CallError::GuestTrap(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// Failures to set up the runtime itself (not caused by an environment).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("could not configure the WebAssembly engine: {0}")]
    Engine(String),
    #[error("could not prepare the guest component: {0}")]
    Guest(String),
    #[error("artifact cache at {path}: {message}")]
    Cache {
        path: std::path::PathBuf,
        message: String,
    },
}

/// Why a sandbox could not be forked ([`crate::Runtime::fork`]). The parent is unchanged by a
/// refusal; after [`ForkError::Call`] it is as that call left it (dead after a host limit).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ForkError {
    /// The sandbox is dead (a host limit, or a cancelled call): it has no state to copy.
    #[error("cannot fork: this sandbox is dead after {}; its state is gone", dead_reason(*.0))]
    Dead(ErrorKind),
    /// The guest holds a host resource (a WASI stream, a pollable) that a fork cannot
    /// duplicate: the copy would refer to a handle its own instance does not have.
    #[error(
        "cannot fork: the environment holds {0}, a host resource a fork cannot duplicate \
         (printing leaves the output stream open; fork before the environment prints)"
    )]
    HostResource(String),
    /// Capturing the parent's memory or writing it into a copy failed.
    #[error("cannot fork: {0}")]
    Call(#[from] CallError),
}
