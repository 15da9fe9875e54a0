//! The deterministic WASI context every sandbox gets: no files, sockets, environment variables
//! or arguments; randomness from a PRNG seeded by the host; a virtual clock that advances by a
//! fixed step on every read and by the full duration of every wait (so `time.sleep` returns at
//! once); stdout and stderr captured into bounded buffers. [`add_to_linker`] links the WASI
//! interfaces the guest imports, and nothing else.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use wasmtime::component::{Component, HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream, WasiCli, WasiCliView as _};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView as _};
use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView as _};
use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, io, random};
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamError, subscribe};
use wasmtime_wasi::random::{WasiRandom, WasiRandomView as _};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder};

use crate::sandbox::SandboxState;

/// Wall-clock time the sandbox starts at: 2025-01-01T00:00:00Z.
const VIRTUAL_EPOCH: Duration = Duration::from_secs(1_735_689_600);
/// How far each clock read advances the virtual clocks.
const CLOCK_STEP: Duration = Duration::from_micros(1000);
/// Largest single request for random bytes (`os.urandom`): the host allocates it.
const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// Builds the WASI context of one sandbox, drawing entropy from `streams` (seeded by the
/// sandbox's seed), reading time from `clock` and counting every read of entropy in `entropy`.
pub fn deterministic_ctx(
    streams: &EntropyStreams,
    clock: VirtualClock,
    stdout: CappedOutput,
    stderr: CappedOutput,
    entropy: &EntropyReads,
) -> WasiCtx {
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(stdout)
        .stderr(stderr)
        .secure_random(Counted {
            rng: streams.secure.clone(),
            reads: entropy.clone(),
        })
        .insecure_random(Counted {
            rng: streams.insecure.clone(),
            reads: entropy.clone(),
        })
        .max_random_size(MAX_RANDOM_BYTES)
        .wall_clock(clock.clone())
        .monotonic_clock(clock)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    builder.build()
}

/// The seed `wasi:random/insecure-seed` returns for a sandbox seeded with `seed`.
pub(crate) fn insecure_seed(seed: u64) -> (u64, u64) {
    (seed, !seed)
}

/// The two WASI entropy streams of a sandbox (`wasi:random/random` and
/// `wasi:random/insecure`), each a [`SplitMix64`] whose position the host can read and set: a
/// fork copies its parent's positions, so that it goes on drawing the very bytes the parent
/// would have drawn.
#[derive(Clone)]
pub struct EntropyStreams {
    secure: SplitMix64,
    insecure: SplitMix64,
}

impl EntropyStreams {
    /// The streams of a sandbox seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        EntropyStreams {
            secure: SplitMix64::new(seed ^ 0x5EC0_5EC0_5EC0_5EC0),
            insecure: SplitMix64::new(seed ^ 0x1A5E_C0DE_1A5E_C0DE),
        }
    }

    /// Independent streams at this one's positions (a clone would share them).
    pub(crate) fn snapshot(&self) -> EntropyStreams {
        EntropyStreams {
            secure: SplitMix64::new(self.secure.state()),
            insecure: SplitMix64::new(self.insecure.state()),
        }
    }

    /// Moves both streams to the positions of `other`'s.
    pub(crate) fn copy_from(&self, other: &EntropyStreams) {
        self.secure.set_state(other.secure.state());
        self.insecure.set_state(other.insecure.state());
    }
}

/// Reads of a sandbox's entropy (WASI random bytes and the insecure seed). A load that reads
/// none is independent of the sandbox's seed as far as WASI goes.
#[derive(Clone, Default)]
pub struct EntropyReads(Arc<AtomicU64>);

impl EntropyReads {
    /// Reads so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the count (a fork starts with its parent's).
    pub(crate) fn set(&self, reads: u64) {
        self.0.store(reads, Ordering::Relaxed);
    }

    fn count(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A generator whose every use is counted.
struct Counted<R> {
    rng: R,
    reads: EntropyReads,
}

impl<R: rand_core::TryRng<Error = Infallible>> rand_core::TryRng for Counted<R> {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        self.reads.count();
        self.rng.try_next_u32()
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        self.reads.count();
        self.rng.try_next_u64()
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.reads.count();
        self.rng.try_fill_bytes(dst)
    }
}

/// `wasi:random/insecure-seed`, counted.
pub(crate) struct SeedView<'a> {
    seed: u64,
    reads: &'a EntropyReads,
}

impl random::insecure_seed::Host for SeedView<'_> {
    fn insecure_seed(&mut self) -> wasmtime::Result<(u64, u64)> {
        self.reads.count();
        Ok(insecure_seed(self.seed))
    }
}

struct Seeds;

impl HasData for Seeds {
    type Data<'a> = SeedView<'a>;
}

/// SplitMix64 (Steele, Lea and Flood 2014): a tiny generator with a fixed, documented output
/// stream, so a recorded seed replays the same bytes with any spade build. Its state is shared
/// by its clones (the WASI context holds one, the sandbox another, to read and set it).
#[derive(Clone)]
pub struct SplitMix64 {
    state: Arc<AtomicU64>,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 {
            state: Arc::new(AtomicU64::new(seed)),
        }
    }

    fn state(&self) -> u64 {
        self.state.load(Ordering::Relaxed)
    }

    fn set_state(&self, state: u64) {
        self.state.store(state, Ordering::Relaxed);
    }

    fn next(&mut self) -> u64 {
        // One sandbox draws from one thread at a time: a load and a store are enough.
        let state = self.state().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.set_state(state);
        let mut z = state;
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

/// A clock that advances by [`CLOCK_STEP`] on every read and jumps forward to the end of every
/// wait, shared by the wall and monotonic clocks of one sandbox. Only the program moves it, so
/// time is a function of the program, not of the machine.
#[derive(Clone, Default)]
pub struct VirtualClock {
    /// Nanoseconds since the sandbox started.
    nanos: Arc<AtomicU64>,
}

impl VirtualClock {
    fn tick(&self) -> u64 {
        let step = CLOCK_STEP.as_nanos() as u64;
        let before = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(step))
            })
            .unwrap_or_else(|n| n);
        before.saturating_add(step)
    }

    /// The clock without advancing it.
    pub(crate) fn peek(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }

    /// Moves the clock forward to `nanos` (never back).
    pub(crate) fn advance_to(&self, nanos: u64) {
        self.nanos.fetch_max(nanos, Ordering::Relaxed);
    }
}

impl HostWallClock for VirtualClock {
    fn resolution(&self) -> Duration {
        CLOCK_STEP
    }

    fn now(&self) -> Duration {
        VIRTUAL_EPOCH + Duration::from_nanos(self.tick())
    }
}

impl HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        CLOCK_STEP.as_nanos() as u64
    }

    fn now(&self) -> u64 {
        self.tick()
    }
}

/// A wait on the virtual clock: ready at once, and moves the clock to its end when waited on.
/// Every clock wait of the guest (`time.sleep`, `select`/`poll` timeouts) reaches the host as
/// one of these.
struct ClockWait {
    clock: VirtualClock,
    until: u64,
}

#[async_trait::async_trait]
impl Pollable for ClockWait {
    async fn ready(&mut self) {
        self.clock.advance_to(self.until);
    }
}

/// `wasi:clocks/monotonic-clock` on the sandbox's virtual clock.
pub(crate) struct VirtualClockView<'a> {
    clock: &'a VirtualClock,
    table: &'a mut ResourceTable,
}

impl VirtualClockView<'_> {
    fn wait_until(&mut self, until: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let wait = self.table.push(ClockWait {
            clock: self.clock.clone(),
            until,
        })?;
        subscribe(self.table, wait)
    }
}

impl clocks::monotonic_clock::Host for VirtualClockView<'_> {
    fn now(&mut self) -> wasmtime::Result<u64> {
        Ok(self.clock.tick())
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        Ok(CLOCK_STEP.as_nanos() as u64)
    }

    fn subscribe_instant(&mut self, when: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.wait_until(when)
    }

    fn subscribe_duration(&mut self, duration: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let until = self.clock.peek().saturating_add(duration);
        self.wait_until(until)
    }
}

struct VirtualClocks;

impl HasData for VirtualClocks {
    type Data<'a> = VirtualClockView<'a>;
}

struct Table;

impl HasData for Table {
    type Data<'a> = &'a mut ResourceTable;
}

/// The WASI interfaces spade provides, by name without version. Anything else the guest
/// imports (sockets, HTTP) is linked as a function that traps, so it is never reachable.
pub(crate) const PROVIDED: &[&str] = &[
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:cli/exit",
    "wasi:cli/environment",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "spade:env/snapshot-host",
];

/// The interfaces `component` imports, by name without version (`wasi:io/poll`).
pub(crate) fn imported_interfaces(component: &Component) -> Vec<String> {
    let engine = component.engine();
    let mut names: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.split('@').next().unwrap_or(name).to_owned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Links into `linker` the WASI interfaces `component` imports that spade provides, with the
/// monotonic clock replaced by the sandbox's virtual clock; every other import (sockets above
/// all) becomes a trapping stub. Returns the interfaces stubbed out.
pub(crate) fn add_to_linker(
    linker: &mut Linker<SandboxState>,
    component: &Component,
) -> wasmtime::Result<Vec<String>> {
    type T = SandboxState;
    let imported = imported_interfaces(component);
    let l = linker;
    for name in &imported {
        match name.as_str() {
            "wasi:io/error" => io::error::add_to_linker::<T, Table>(l, |t| &mut t.table)?,
            "wasi:io/poll" => io::poll::add_to_linker::<T, Table>(l, |t| &mut t.table)?,
            "wasi:io/streams" => io::streams::add_to_linker::<T, Table>(l, |t| &mut t.table)?,
            "wasi:clocks/wall-clock" => {
                clocks::wall_clock::add_to_linker::<T, WasiClocks>(l, T::clocks)?
            }
            "wasi:clocks/monotonic-clock" => clocks::monotonic_clock::add_to_linker::<
                T,
                VirtualClocks,
            >(l, |t| VirtualClockView {
                clock: &t.clock,
                table: &mut t.table,
            })?,
            "wasi:random/random" => random::random::add_to_linker::<T, WasiRandom>(l, T::random)?,
            "wasi:random/insecure" => {
                random::insecure::add_to_linker::<T, WasiRandom>(l, T::random)?
            }
            "wasi:random/insecure-seed" => {
                random::insecure_seed::add_to_linker::<T, Seeds>(l, |t| SeedView {
                    seed: t.seed,
                    reads: &t.entropy,
                })?
            }
            "wasi:cli/exit" => cli::exit::add_to_linker::<T, WasiCli>(l, T::cli)?,
            "wasi:cli/environment" => cli::environment::add_to_linker::<T, WasiCli>(l, T::cli)?,
            "wasi:cli/stdin" => cli::stdin::add_to_linker::<T, WasiCli>(l, T::cli)?,
            "wasi:cli/stdout" => cli::stdout::add_to_linker::<T, WasiCli>(l, T::cli)?,
            "wasi:cli/stderr" => cli::stderr::add_to_linker::<T, WasiCli>(l, T::cli)?,
            "wasi:cli/terminal-input" => {
                cli::terminal_input::add_to_linker::<T, WasiCli>(l, T::cli)?
            }
            "wasi:cli/terminal-output" => {
                cli::terminal_output::add_to_linker::<T, WasiCli>(l, T::cli)?
            }
            "wasi:cli/terminal-stdin" => {
                cli::terminal_stdin::add_to_linker::<T, WasiCli>(l, T::cli)?
            }
            "wasi:cli/terminal-stdout" => {
                cli::terminal_stdout::add_to_linker::<T, WasiCli>(l, T::cli)?
            }
            "wasi:cli/terminal-stderr" => {
                cli::terminal_stderr::add_to_linker::<T, WasiCli>(l, T::cli)?
            }
            "wasi:filesystem/types" => {
                filesystem::types::add_to_linker::<T, WasiFilesystem>(l, T::filesystem)?
            }
            "wasi:filesystem/preopens" => {
                filesystem::preopens::add_to_linker::<T, WasiFilesystem>(l, T::filesystem)?
            }
            _ => {}
        }
    }
    crate::cache::snapshot::add_to_linker(l)?;
    let stubbed: Vec<String> = imported
        .into_iter()
        .filter(|name| !PROVIDED.contains(&name.as_str()))
        .collect();
    if !stubbed.is_empty() {
        l.define_unknown_imports_as_traps(component)?;
    }
    Ok(stubbed)
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
    fn virtual_clock_advances_per_read_and_jumps_over_waits() {
        let clock = VirtualClock::default();
        let a = HostMonotonicClock::now(&clock);
        let b = HostMonotonicClock::now(&clock);
        assert_eq!(b - a, CLOCK_STEP.as_nanos() as u64);
        assert_eq!(HostWallClock::now(&clock), VIRTUAL_EPOCH + CLOCK_STEP * 3);
        let week = 7 * 24 * 3600 * 1_000_000_000u64;
        clock.advance_to(clock.peek() + week);
        assert_eq!(
            HostWallClock::now(&clock),
            VIRTUAL_EPOCH + CLOCK_STEP * 4 + Duration::from_nanos(week)
        );
        // Never backwards, and saturating rather than wrapping.
        clock.advance_to(0);
        clock.advance_to(u64::MAX);
        assert_eq!(HostMonotonicClock::now(&clock), u64::MAX);
    }
}
