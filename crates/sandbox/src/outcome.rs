//! How a guest call's raw outcome becomes a typed result: traps classified into host outcomes,
//! environment errors mapped, result sizes checked, output converted within its cap.

use wasmtime::{Store, Trap};

use crate::bindings::EnvError;
use crate::config::Limits;
use crate::error::{CallError, ErrorKind};
use crate::memory::{OVER_BUDGET, OverBudget};
use crate::sandbox::{CallOutput, Reply, SandboxState};

/// The smallest error limit the guest is given: its own message about an oversized error (the
/// value's name, size and first 200 bytes) must fit.
const MIN_ERROR_LIMIT: usize = 1 << 10;

/// The error-text limit in force: `Limits::error_limit`, at least [`MIN_ERROR_LIMIT`].
pub(crate) fn error_limit(limits: &Limits) -> usize {
    limits.error_limit.max(MIN_ERROR_LIMIT)
}

/// An error the environment caused, as the host reports it.
pub(crate) fn env_error(err: EnvError) -> CallError {
    match err {
        EnvError::Load(s) => CallError::Load(s),
        EnvError::Contract(s) => CallError::Contract(s),
        EnvError::Exception(s) => CallError::Exception(s),
        EnvError::Usage(s) => CallError::Usage(s),
    }
}

/// The outcome when the memory limiter denied a growth of `desired` bytes during the call
/// (`over_budget`: because the account shared by all sandboxes had not that much left).
pub(crate) fn memory_limit(
    limits: &Limits,
    desired: usize,
    over_budget: Option<OverBudget>,
) -> CallError {
    let detail = if desired == usize::MAX {
        "the environment tried to grow the sandbox memory beyond what it can address".to_owned()
    } else if let Some(over) = over_budget {
        format!(
            "the environment tried to grow the sandbox memory to {desired} bytes, {OVER_BUDGET} ({} of {} bytes in use)",
            over.charged, over.budget
        )
    } else {
        format!("the environment tried to grow the sandbox memory to {desired} bytes")
    };
    CallError::MemoryLimit {
        limit: limits.memory_limit,
        detail,
    }
}

/// The error of a call that did not start: the shared account could not cover its sandbox's
/// whole memory of `size` bytes within the call's deadline (see [`crate::MemoryAccount`]).
pub(crate) fn memory_not_covered(limits: &Limits, size: u64, over: OverBudget) -> CallError {
    CallError::MemoryLimit {
        limit: limits.memory_limit,
        detail: format!(
            "the sandbox memory ({size} bytes) must be covered while a call runs, and that is \
             {OVER_BUDGET} ({} of {} bytes in use, none given back within the call deadline \
             of {:?})",
            over.charged, over.budget, limits.call_deadline
        ),
    }
}

/// Whether a denied memory growth overrides `result`: it does unless fuel, the deadline or the
/// stack ended the call first (those are more specific and equally fatal).
pub(crate) fn memory_decides(result: &Result<Reply, CallError>) -> bool {
    match result {
        Ok(_) => true,
        Err(err) => !matches!(
            err.kind(),
            ErrorKind::OutOfFuel | ErrorKind::Deadline | ErrorKind::StackOverflow
        ),
    }
}

/// Turns a wasmtime error from a guest call into the host outcome it stands for.
pub(crate) fn classify_trap(
    store: &Store<SandboxState>,
    limits: &Limits,
    budget: u64,
    err: wasmtime::Error,
) -> CallError {
    if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return CallError::GuestTrap(format!(
            "the environment exited the interpreter (os._exit({})); the sandbox cannot continue",
            exit.0
        ));
    }
    if let Some(limit) = err.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
        return CallError::Capacity(format!(
            "{limit}; every slot of the runtime's pool (Config::pool.sandboxes) holds a live \
             sandbox. Drop sandboxes that are done, or build the runtime with more slots"
        ));
    }
    let trap = err.downcast_ref::<Trap>().copied();
    match trap {
        Some(Trap::OutOfFuel) => CallError::OutOfFuel { budget },
        Some(Trap::StackOverflow) => CallError::StackOverflow,
        // The guest's own stack, in linear memory below its data (a tested layout: see
        // `guest_layout`), overflowed: its pointer wrapped below address 0, outside the
        // memory. Safe Rust reaches outside its memory no other way.
        Some(Trap::MemoryOutOfBounds) => CallError::StackOverflow,
        Some(Trap::Interrupt) => CallError::Deadline(limits.call_deadline),
        _ => {
            // A guest panic prints its message to stderr before trapping: keep its tail.
            let (stderr, _) = store.data().stderr.take();
            let stderr = String::from_utf8_lossy(&stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let tail = tail.join("\n");
            let what = trap
                .map(|t| t.to_string())
                .unwrap_or_else(|| format!("{err:#}"));
            if tail.is_empty() {
                CallError::GuestTrap(what)
            } else {
                CallError::GuestTrap(format!("{what}\n{tail}"))
            }
        }
    }
}

/// The host's own check of a reply against the size limits. The guest measures every value
/// before it leaves Python, so this only trips for a guest that does not keep the contract.
pub(crate) fn check_sizes(reply: Reply, limits: &Limits) -> Result<Reply, CallError> {
    let check = |name: &str, field: &str, size: usize, limit: usize| {
        if size > limit {
            Err(CallError::Contract(format!(
                "{name} is {size} bytes, over the limit of {limit} bytes (Limits::{field})"
            )))
        } else {
            Ok(())
        }
    };
    match &reply {
        Reply::Loaded(info, _) => {
            if let Some(tools) = &info.tools {
                check(
                    "get_tools(): the tool schemas",
                    "tools_limit",
                    tools.len(),
                    limits.tools_limit,
                )?;
            }
        }
        Reply::Reset(r, _) => {
            check(
                "reset(): the observation",
                "observation_limit",
                r.observation.len(),
                limits.observation_limit,
            )?;
            check(
                "reset(): the info dict",
                "info_limit",
                r.info.len(),
                limits.info_limit,
            )?;
        }
        Reply::Step(r) => {
            check(
                "step(): the observation",
                "observation_limit",
                r.observation.len(),
                limits.observation_limit,
            )?;
            check(
                "step(): the info dict",
                "info_limit",
                r.info.len(),
                limits.info_limit,
            )?;
        }
        Reply::Solution(text) => check(
            "solution()'s str",
            "solution_limit",
            text.len(),
            limits.solution_limit,
        )?,
        Reply::Code(_) | Reply::Captured(_) | Reply::Done => {}
    }
    Ok(reply)
}

/// The host's check of an error's text against the error limit.
pub(crate) fn check_error(err: CallError, limits: &Limits) -> CallError {
    let limit = error_limit(limits);
    let size = match &err {
        CallError::Load(s)
        | CallError::Contract(s)
        | CallError::Exception(s)
        | CallError::Usage(s)
        | CallError::GuestTrap(s) => s.len(),
        _ => 0,
    };
    if size <= limit {
        return err;
    }
    CallError::Contract(format!(
        "the environment's {} text is {size} bytes, over the limit of {limit} bytes (Limits::error_limit)",
        err.kind()
    ))
}

/// What the guest printed during the call, as text of at most `limit` bytes each.
pub(crate) fn take_output(store: &Store<SandboxState>, limit: usize) -> CallOutput {
    let state = store.data();
    let (stdout, dropped_out) = state.stdout.take();
    let (stderr, dropped_err) = state.stderr.take();
    let (stdout, cut_out) = lossy_within(&stdout, limit);
    let (stderr, cut_err) = lossy_within(&stderr, limit);
    CallOutput {
        stdout,
        stderr,
        dropped_bytes: dropped_out + dropped_err + cut_out + cut_err,
    }
}

/// `bytes` as lossy UTF-8 (each invalid sequence becomes U+FFFD) cut to at most `limit` bytes
/// of text at a character boundary, and the number of input bytes left out by the cut.
pub(crate) fn lossy_within(bytes: &[u8], limit: usize) -> (String, u64) {
    const REPLACEMENT: &str = "\u{FFFD}";
    let mut text = String::new();
    let mut used = 0usize;
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        let room = limit - text.len();
        if valid.len() > room {
            let mut end = room;
            while !valid.is_char_boundary(end) {
                end -= 1;
            }
            text.push_str(&valid[..end]);
            used += end;
            return (text, (bytes.len() - used) as u64);
        }
        text.push_str(valid);
        used += valid.len();
        let invalid = chunk.invalid();
        if invalid.is_empty() {
            continue;
        }
        if REPLACEMENT.len() > limit - text.len() {
            return (text, (bytes.len() - used) as u64);
        }
        text.push_str(REPLACEMENT);
        used += invalid.len();
    }
    (text, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossy_output_stays_within_the_limit() {
        // 10 invalid bytes would become 30 bytes of U+FFFD: only 3 fit in 10 bytes.
        let (text, cut) = lossy_within(&[0xff; 10], 10);
        assert_eq!(text, "\u{FFFD}\u{FFFD}\u{FFFD}");
        assert_eq!(text.len(), 9);
        assert_eq!(cut, 7);
        // Valid text is cut at a character boundary, never inside 'é' (2 bytes).
        let (text, cut) = lossy_within("aé".as_bytes(), 2);
        assert_eq!(text, "a");
        assert_eq!(cut, 2);
        let (text, cut) = lossy_within(b"ok\xffok", 100);
        assert_eq!(text, "ok\u{FFFD}ok");
        assert_eq!(cut, 0);
    }
}
