//! Size limits on everything the guest hands back to the host.
//!
//! The host sets them with `compile` and `load`. A value over its limit never leaves Python:
//! the call answers with a `contract` error naming the value and its size, so the host never
//! copies more than the limit out of the sandbox. Sizes are measured without building the
//! oversized text (see [`Capped`]).

use std::cell::Cell;
use std::fmt;

use crate::exports::spade::env::environment::{EnvError, SizeLimits};

/// No limit until the host sets them (only wizer's boot runs before that).
const UNLIMITED: SizeLimits = SizeLimits {
    observation: u64::MAX,
    info: u64::MAX,
    solution: u64::MAX,
    tools: u64::MAX,
    error: u64::MAX,
};

thread_local! {
    static LIMITS: Cell<SizeLimits> = const { Cell::new(UNLIMITED) };
}

/// Sets the limits for this and every later call.
pub fn set(limits: SizeLimits) {
    LIMITS.with(|cell| cell.set(limits));
}

/// One limit: its size in bytes and the host's name for it (for messages).
#[derive(Clone, Copy)]
pub struct Limit {
    pub bytes: u64,
    pub name: &'static str,
}

impl Limit {
    /// True when `size` bytes fit.
    pub fn allows(self, size: usize) -> bool {
        (size as u64) <= self.bytes
    }

    /// ", over the limit of N bytes (Limits::name)".
    pub fn over(self) -> String {
        format!(
            "over the limit of {} bytes (Limits::{})",
            self.bytes, self.name
        )
    }
}

fn limit(pick: fn(&SizeLimits) -> u64, name: &'static str) -> Limit {
    Limit {
        bytes: LIMITS.with(|cell| pick(&cell.get())),
        name,
    }
}

pub fn observation() -> Limit {
    limit(|l| l.observation, "observation_limit")
}

pub fn info() -> Limit {
    limit(|l| l.info, "info_limit")
}

pub fn solution() -> Limit {
    limit(|l| l.solution, "solution_limit")
}

pub fn tools() -> Limit {
    limit(|l| l.tools, "tools_limit")
}

pub fn error() -> Limit {
    limit(|l| l.error, "error_limit")
}

/// Bytes of an oversized value kept to quote its beginning in the error.
const HEAD: usize = 200;

/// Text written under a limit: the first `limit` bytes are kept; past the limit only the size
/// is counted (and the first [`HEAD`] bytes kept to quote), so measuring a huge value costs no
/// memory.
pub struct Capped {
    bytes: Vec<u8>,
    size: usize,
    limit: Limit,
}

impl Capped {
    pub fn new(limit: Limit) -> Self {
        Capped {
            bytes: Vec::new(),
            size: 0,
            limit,
        }
    }

    /// Appends `piece` (counted; kept while the total is within the limit).
    pub fn push(&mut self, piece: &[u8]) {
        self.size = self.size.saturating_add(piece.len());
        if self.limit.allows(self.size) {
            self.bytes.extend_from_slice(piece);
        } else if self.bytes.len() < HEAD {
            let room = HEAD - self.bytes.len();
            self.bytes
                .extend_from_slice(&piece[..room.min(piece.len())]);
        } else if self.bytes.len() > HEAD {
            self.bytes.truncate(HEAD);
            self.bytes.shrink_to_fit();
        }
    }

    /// Whether `more` bytes would still fit within the limit.
    pub fn fits(&self, more: usize) -> bool {
        self.limit.allows(self.size.saturating_add(more))
    }

    /// Counts `n` bytes that are not kept (only valid once over the limit).
    pub fn count(&mut self, n: usize) {
        self.size = self.size.saturating_add(n);
        if self.bytes.len() > HEAD {
            self.bytes.truncate(HEAD);
            self.bytes.shrink_to_fit();
        }
    }

    /// Appends again the `len` bytes written from `start` (a value written before); over the
    /// limit they are only counted. Every byte written within the limit is kept, so the range
    /// is there whenever it still fits.
    pub fn repeat(&mut self, start: usize, len: usize) {
        if self.fits(len) {
            self.bytes.extend_from_within(start..start + len);
            self.size += len;
        } else {
            self.count(len);
        }
    }

    /// Whether what was written is already over the limit (a writer can stop: the value is
    /// refused whatever follows).
    pub fn over(&self) -> bool {
        !self.limit.allows(self.size)
    }

    /// Bytes written so far, kept or not.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The text, or `Err((size, its beginning))` when it went over the limit.
    pub fn finish(self) -> Result<String, (usize, String)> {
        let over = !self.limit.allows(self.size);
        // Every piece is UTF-8 (whole `str`s, JSON escapes split at ASCII bytes); only a cut
        // head can end inside a character.
        let text = match String::from_utf8(self.bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        if over {
            Err((self.size, text))
        } else {
            Ok(text)
        }
    }
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

impl rustpython_vm::py_io::Write for Capped {
    type Error = fmt::Error;

    fn write_fmt(&mut self, args: fmt::Arguments<'_>) -> fmt::Result {
        fmt::Write::write_fmt(self, args)
    }
}

/// The first `max` bytes of `text`, cut at a character boundary.
pub fn head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// An error whose text is over the error limit becomes a `contract` error that says so.
pub fn bound_error(err: EnvError) -> EnvError {
    let limit = error();
    let (what, text) = match &err {
        EnvError::Load(s) => ("load error", s),
        EnvError::Contract(s) => ("contract error", s),
        EnvError::Exception(s) => ("traceback", s),
        EnvError::Usage(s) => ("usage error", s),
    };
    if limit.allows(text.len()) {
        return err;
    }
    too_long(what, text.len(), text, limit)
}

/// The contract error for error text of `size` bytes that starts with `start`.
pub fn too_long(what: &str, size: usize, start: &str, limit: Limit) -> EnvError {
    let start = head(start, HEAD);
    EnvError::Contract(format!(
        "the environment's {what} is {size} bytes, {}; it begins: {start}",
        limit.over()
    ))
}
