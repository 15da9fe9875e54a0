//! Streaming, crash-safe writing of trajectory lines.

use std::io::{self, Write};

use sha2::{Digest, Sha256};

use super::format::{CallRecord, Footer, Header, Line, canonical, sha256_hex, unsigned_footer};

/// Writes lines in canonical form, one `write` and `flush` per line, so a killed process
/// leaves only complete lines (plus at most one partial last line, which readers report as
/// truncation). Keeps the running trace hash and the hash chain between lines.
pub struct TrajectoryWriter<W: Write> {
    out: W,
    trace: Sha256,
    prev_sha256: String,
    lines: u64,
    header_text: String,
    last_line: String,
}

impl<W: Write> TrajectoryWriter<W> {
    /// Starts a trajectory by writing its header.
    pub fn new(out: W, header: &Header) -> io::Result<Self> {
        let header_text = canonical(&Line::Header(header.clone()));
        let mut writer = TrajectoryWriter {
            out,
            trace: Sha256::new(),
            prev_sha256: String::new(),
            lines: 0,
            header_text: header_text.clone(),
            last_line: String::new(),
        };
        writer.emit(header_text)?;
        Ok(writer)
    }

    /// Appends a call line, linking it to the previous line.
    pub fn call(&mut self, mut record: CallRecord) -> io::Result<()> {
        record.prev_sha256 = self.prev_sha256.clone();
        self.emit(canonical(&Line::Call(record)))
    }

    /// Writes the footer (filling in the line count and the trace hash, which covers every
    /// line before the footer and the footer's other fields) and returns it with the
    /// underlying writer.
    pub fn finish(mut self, mut footer: Footer) -> io::Result<(Footer, W)> {
        footer.lines = self.lines;
        self.trace.update(unsigned_footer(&footer).as_bytes());
        footer.trace_sha256 = hex::encode(self.trace.finalize());
        let mut text = canonical(&Line::Footer(footer.clone()));
        text.push('\n');
        self.out.write_all(text.as_bytes())?;
        self.out.flush()?;
        Ok((footer, self.out))
    }

    /// The header line as written (no newline).
    pub fn header_text(&self) -> &str {
        &self.header_text
    }

    /// The last line written (no newline).
    pub fn last_line(&self) -> &str {
        &self.last_line
    }

    /// sha256 of every line written so far, each with its newline (a fork's
    /// [`ForkOrigin::prefix_sha256`](super::ForkOrigin::prefix_sha256)).
    pub fn prefix_sha256(&self) -> String {
        hex::encode(self.trace.clone().finalize())
    }

    /// Lines written so far (header included, footer excluded).
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Writes `line` and its newline with one `write`, hashes it, and keeps it as the last line
    /// (moved, not copied).
    fn emit(&mut self, mut line: String) -> io::Result<()> {
        line.push('\n');
        self.out.write_all(line.as_bytes())?;
        self.out.flush()?;
        self.trace.update(line.as_bytes());
        line.pop();
        self.prev_sha256 = sha256_hex(line.as_bytes());
        self.last_line = line;
        self.lines += 1;
        Ok(())
    }
}
