//! Sandbox outcomes as Python exceptions.
//!
//! The classes live in Python (`spade/errors.py`), where users read and subclass them; this
//! module only chooses the class for a [`CallError`] and builds the instance with its message,
//! `kind` and `detail`.

use pyo3::prelude::*;
use spade_sandbox::{CallError, ErrorKind};

/// The `spade.errors` class for an error kind.
fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Load => "LoadError",
        ErrorKind::Contract => "ContractError",
        ErrorKind::Exception => "EnvException",
        ErrorKind::OutOfFuel => "OutOfFuel",
        ErrorKind::Deadline => "Deadline",
        ErrorKind::MemoryLimit => "MemoryLimit",
        ErrorKind::StackOverflow => "StackOverflow",
        ErrorKind::GuestTrap => "GuestTrap",
        ErrorKind::Dead | ErrorKind::Cancelled => "SandboxDead",
        ErrorKind::Usage => "UsageError",
        ErrorKind::Capacity => "CapacityError",
    }
}

/// Builds `spade.errors.<Class>(message, kind, detail)`.
fn build(py: Python<'_>, kind: ErrorKind, message: String, detail: String) -> PyErr {
    let made = py
        .import("spade.errors")
        .and_then(|module| module.getattr(class_name(kind)))
        .and_then(|class| class.call1((message, kind.as_str(), detail)));
    match made {
        Ok(instance) => PyErr::from_value(instance),
        Err(err) => err,
    }
}

/// The exception for a failed sandbox call.
pub fn call_error(py: Python<'_>, err: &CallError) -> PyErr {
    let detail = match err {
        // The reason the sandbox died, so that a caller can tell a fuel death from a cancel.
        CallError::Dead(reason) => reason.as_str().to_owned(),
        other => other.detail(),
    };
    build(py, err.kind(), err.to_string(), detail)
}

/// `spade.errors.UsageError` with `message`.
pub fn usage(py: Python<'_>, message: String) -> PyErr {
    build(py, ErrorKind::Usage, message.clone(), message)
}
