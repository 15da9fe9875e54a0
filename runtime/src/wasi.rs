//! The deterministic WASI context every sandbox gets: no files, sockets, environment variables
//! or arguments; randomness from a PRNG seeded by the host; clocks that advance by a fixed step
//! on every read; stdout and stderr captured into bounded buffers.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder};

/// Wall-clock time the sandbox starts at: 2025-01-01T00:00:00Z.
const VIRTUAL_EPOCH: Duration = Duration::from_secs(1_735_689_600);
/// How far each clock read advances the virtual clocks.
const CLOCK_STEP: Duration = Duration::from_micros(1000);

/// Builds the WASI context of one sandbox from its seed.
pub fn deterministic_ctx(seed: u64, stdout: CappedOutput, stderr: CappedOutput) -> WasiCtx {
    let clock = VirtualClock::default();
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(stdout)
        .stderr(stderr)
        .secure_random(SplitMix64::new(seed ^ 0x5EC0_5EC0_5EC0_5EC0))
        .insecure_random(SplitMix64::new(seed ^ 0x1A5E_C0DE_1A5E_C0DE))
        .insecure_random_seed(u128::from(seed) << 64 | u128::from(!seed))
        .wall_clock(clock.clone())
        .monotonic_clock(clock)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    builder.build()
}

/// SplitMix64 (Steele, Lea and Flood 2014): a tiny generator with a fixed, documented output
/// stream, so a recorded seed replays the same bytes with any spade build.
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl rand_core::TryRng for SplitMix64 {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok((self.next() >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.next())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
}

/// A clock that advances by [`CLOCK_STEP`] on every read, shared by the wall and monotonic
/// clocks of one sandbox. Reads are the only thing that moves it, so time is a function of
/// the program, not of the machine.
#[derive(Clone, Default)]
pub struct VirtualClock {
    reads: Arc<AtomicU64>,
}

impl VirtualClock {
    fn tick(&self) -> Duration {
        let n = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
        CLOCK_STEP * u32::try_from(n).unwrap_or(u32::MAX)
    }
}

impl HostWallClock for VirtualClock {
    fn resolution(&self) -> Duration {
        CLOCK_STEP
    }

    fn now(&self) -> Duration {
        VIRTUAL_EPOCH + self.tick()
    }
}

impl HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        CLOCK_STEP.as_nanos() as u64
    }

    fn now(&self) -> u64 {
        self.tick().as_nanos() as u64
    }
}

/// What a capped stream holds.
#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

/// An output stream that keeps the first `limit` bytes and counts the rest.
#[derive(Clone)]
pub struct CappedOutput {
    limit: usize,
    inner: Arc<Mutex<Captured>>,
}

impl CappedOutput {
    pub fn new(limit: usize) -> Self {
        CappedOutput {
            limit,
            inner: Arc::default(),
        }
    }

    /// Takes what was captured since the last call: (kept bytes, number of bytes dropped).
    pub fn take(&self) -> (Vec<u8>, u64) {
        let mut inner = self.inner.lock().expect("output lock");
        let taken = std::mem::take(&mut *inner);
        (taken.kept, taken.dropped)
    }

    fn push(&self, bytes: &[u8]) {
        let mut inner = self.inner.lock().expect("output lock");
        let room = self.limit.saturating_sub(inner.kept.len());
        let keep = room.min(bytes.len());
        inner.kept.extend_from_slice(&bytes[..keep]);
        inner.dropped += (bytes.len() - keep) as u64;
    }
}

#[async_trait::async_trait]
impl OutputStream for CappedOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        // Always accept a full chunk: excess bytes are dropped, never buffered.
        Ok(64 * 1024)
    }
}

#[async_trait::async_trait]
impl Pollable for CappedOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CappedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CappedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::TryRng;

    #[test]
    fn splitmix_matches_the_reference_stream() {
        // First outputs of SplitMix64 seeded with 0, as published with the algorithm.
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.try_next_u64().unwrap(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.try_next_u64().unwrap(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn capped_output_keeps_the_head_and_counts_the_rest() {
        let out = CappedOutput::new(4);
        out.push(b"abc");
        out.push(b"defg");
        assert_eq!(out.take(), (b"abcd".to_vec(), 3));
        assert_eq!(out.take(), (Vec::new(), 0));
    }

    #[test]
    fn virtual_clock_advances_per_read_only() {
        let clock = VirtualClock::default();
        let a = HostMonotonicClock::now(&clock);
        let b = HostMonotonicClock::now(&clock);
        assert_eq!(b - a, CLOCK_STEP.as_nanos() as u64);
        assert_eq!(HostWallClock::now(&clock), VIRTUAL_EPOCH + CLOCK_STEP * 3);
    }
}
