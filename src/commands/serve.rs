//! `spade serve`: the sandbox as an OpenEnv-compatible server (WebSocket sessions and HTTP).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use spade_envtools::check::CheckOptions;
use spade_sandbox::{Caches, Config, MemoryAccount, Pool, Runtime};
use spade_serve::admission::{
    CALLS_AT_ONCE, MAX_DEFAULT_SESSIONS, PLANNING_SANDBOXES, SANDBOX_OVERHEAD, TYPICAL_SESSION,
    default_budget, default_sessions, keep_resident, machine_memory, parse_size, show_bytes,
};
use spade_serve::{Registry, RegistryLimits, ServeConfig, Server};

use super::{executor, read_text};

/// Serve environments over OpenEnv's wire protocol: one sandbox per session, environments
/// checked and registered by source, optional bearer token and trajectory recording.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Environment sources to check and register at start. The id is the file stem (the folder
    /// name for `<name>/env.py`). With exactly one registered, a reset without `env_id` uses it.
    pub envs: Vec<PathBuf>,
    /// Address to listen on (loopback by default; anything else needs --token-file or
    /// --insecure-no-auth).
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub bind: SocketAddr,
    /// Serve on a non-loopback address without a token: anyone who can reach the port can run
    /// code on this machine. Only for a network you trust.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Most sessions at once (WebSocket sessions plus HTTP /reset and /step calls in flight);
    /// one more gets OpenEnv's CAPACITY_REACHED at once. Default: as many as fit in the memory
    /// budget at a typical session's cost (a fresh sandbox's memory, 29.5 MiB, plus 2 MiB).
    #[arg(long)]
    pub max_sessions: Option<usize>,
    /// Most live sessions (WebSocket and held) of one bearer token; one more gets
    /// CAPACITY_REACHED naming this limit. Default: all of --max-sessions with one token (or
    /// none), half of them with several tokens.
    #[arg(long, value_name = "N")]
    pub max_sessions_per_token: Option<usize>,
    /// Memory that every sandbox of the server draws its linear memory from (for example
    /// 16G): a growth past it fails that call with memory_limit. Default: 3/4 of the machine's
    /// memory.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_budget: Option<u64>,
    /// Largest linear memory of one sandbox (for example 256M). Default: the runtime's, 512 MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
    /// Most environments registered with POST /envs; past it, the least recently used one
    /// that no episode is playing is evicted.
    #[arg(long, default_value_t = RegistryLimits::default().max_registrations, value_name = "N")]
    pub max_registrations: usize,
    /// Most POST /envs registrations of one bearer token (each token of --token-file is a
    /// tenant); past it, that token's least recently used one that no episode plays is evicted.
    #[arg(long, default_value_t = RegistryLimits::default().max_per_token, value_name = "N")]
    pub max_registrations_per_token: usize,
    /// Most source bytes over all POST /envs registrations (for example 64M).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_registered_bytes: Option<u64>,
    /// Checks of registered sources that run at once (each holds one sandbox).
    #[arg(long, default_value_t = RegistryLimits::default().check_workers, value_name = "N")]
    pub check_workers: usize,
    /// Close a session after this many seconds without a message (pings do not count), or
    /// when an answer cannot be sent within it (a client that stopped reading; 0: never).
    #[arg(long, default_value_t = 300.0, value_name = "S")]
    pub session_idle_timeout: f64,
    /// A file holding the bearer tokens, one per line (blank lines and lines starting with '#'
    /// are skipped); every request must carry one (`Authorization: Bearer ...`). Each token is a
    /// tenant with its own registration quota, and only it can delete its registrations.
    #[arg(long, value_name = "F")]
    pub token_file: Option<PathBuf>,
    /// Record every episode to `DIR/<episode_id>.jsonl` (replayable with `spade replay`,
    /// served at `/trajectories/<episode_id>` to the token that played it); with
    /// --token-file, each token's under `DIR/tenant-<key>/`.
    #[arg(long, value_name = "DIR")]
    pub record_dir: Option<PathBuf>,
    /// Bytes of recordings one token may hold under --record-dir (for example 4G); a recorded
    /// reset, step or fork past it is refused before it runs. Default 4 GiB: thousands of
    /// typical episodes, and a bound on what one client can write to the disk.
    #[arg(long, value_name = "SIZE", value_parser = parse_size,
          default_value_t = spade_serve::recordings::DEFAULT_MAX_RECORD_BYTES)]
    pub max_record_bytes: u64,
    /// Trajectory downloads (GET /trajectories/ID) at once, each streamed; one more gets 503.
    #[arg(long, value_name = "N", default_value_t = spade_serve::recordings::DEFAULT_MAX_DOWNLOADS)]
    pub max_downloads: usize,
    /// Seconds a connection gets to send a request's whole header, counted from when the server
    /// waits for it (also the keep-alive idle timeout: a connection with no next request
    /// within it is closed; 0: no limit).
    #[arg(long, default_value_t = 30.0, value_name = "S")]
    pub header_read_timeout: f64,
    /// Seconds a request's whole body gets to arrive, counted from when its header was read;
    /// past it the request is answered 408 and the connection closed (0: no limit).
    #[arg(long, default_value_t = 30.0, value_name = "S")]
    pub body_read_timeout: f64,
    /// Seconds an HTTP answer (a trajectory download) may wait for a client that accepts none
    /// of its bytes; past it the answer is ended and the connection closed, freeing its
    /// download slot (0: no limit; WebSocket sends have --session-idle-timeout).
    #[arg(long, default_value_t = 30.0, value_name = "S")]
    pub write_stall_timeout: f64,
    /// Most TCP connections open at once (a WebSocket counts for its whole life); one more is
    /// answered 503 and closed at once. Default: 1024, or half the open-file limit if lower.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Seconds that open calls and sessions get to finish at shutdown (SIGTERM, Ctrl-C); past
    /// it every remaining connection is dropped.
    #[arg(long, default_value_t = 30.0, value_name = "S")]
    pub shutdown_grace: f64,
    /// Largest WebSocket message or HTTP request body, in bytes.
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    pub max_message_bytes: usize,
    /// Fuel per sandbox call (default: the runtime's, 10^10).
    #[arg(long)]
    pub fuel: Option<u64>,
    /// Fuel for checking one registered source, summed over the whole check (as
    /// `spade train`'s validation_fuel).
    #[arg(long, default_value_t = 50_000_000_000, value_name = "FUEL")]
    pub validation_fuel: u64,
    /// Bytes of compiled sources and their load snapshots kept in memory for reuse (for
    /// example 512M); past it, the least recently used source is dropped and compiled again
    /// when it is next played. Default 512 MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub cache_memory: Option<u64>,
    /// Bytes of snapshot files kept in the cache directory (for example 4G); past it, the least
    /// recently used files no loaded source uses are removed. Default 4 GiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub cache_disk: Option<u64>,
    /// Bytes of compiled bytecode files, and of check verdict files, kept in the cache
    /// directory, each (for example 256M): one file per distinct source; past it, the least
    /// recently used are removed (compiled or checked again when needed). Default 256 MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub cache_code_disk: Option<u64>,
    /// Load snapshots kept per source (one per `max_turns` a reset asks for); past it, the
    /// least recently used is dropped. Default 4.
    #[arg(long, default_value_t = Caches::default().plans_per_source, value_name = "N")]
    pub plans_per_source: usize,
}

/// Pool slots beyond one per session: checks of registered sources and snapshot probes.
const CHECK_SLOTS: u32 = 64;

/// Sandboxes one session can hold (see `spade_serve::admission`).
const SANDBOXES_PER_SESSION: u64 = spade_serve::admission::SANDBOXES_PER_SESSION;

impl ServeArgs {
    /// The runtime's cache bounds from --cache-memory, --cache-disk and --plans-per-source.
    fn caches(&self) -> anyhow::Result<Caches> {
        let defaults = Caches::default();
        if self.plans_per_source == 0 {
            bail!("--plans-per-source must be at least 1");
        }
        Ok(Caches {
            plans_per_source: self.plans_per_source,
            memory_bytes: match self.cache_memory {
                Some(bytes) => usize::try_from(bytes).context("--cache-memory is too large")?,
                None => defaults.memory_bytes,
            },
            disk_bytes: self.cache_disk.unwrap_or(defaults.disk_bytes),
            code_disk_bytes: self.cache_code_disk.unwrap_or(defaults.code_disk_bytes),
            ..defaults
        })
    }

    pub fn execute(self) -> anyhow::Result<std::process::ExitCode> {
        let limits = self.registry_limits()?;
        let mut config = self.config()?;
        let budget = config.memory_budget.unwrap_or_default();
        let sources = self.sources()?;
        // The most sessions there can be: the ones asked for, or as many idle sessions as the
        // budget holds (the default is fewer: see `default_sessions`).
        let most_sessions = match self.max_sessions {
            Some(n) => n as u64,
            None => (budget / TYPICAL_SESSION).min(MAX_DEFAULT_SESSIONS),
        };
        // Two slots per session, and room for the short-lived sandboxes that check sources and
        // take snapshots.
        let sandboxes = u32::try_from(most_sessions.saturating_mul(SANDBOXES_PER_SESSION))
            .unwrap_or(u32::MAX)
            .saturating_add(CHECK_SLOTS)
            .max(Pool::default().sandboxes);
        let pool = Pool {
            sandboxes,
            keep_resident: keep_resident(
                machine_memory(),
                budget,
                sandboxes,
                Pool::default().keep_resident,
            ),
            ..Pool::default()
        };
        let mut runtime = Runtime::new(Config {
            pool: Some(pool),
            memory_account: Some(MemoryAccount::with_overhead(budget, SANDBOX_OVERHEAD)),
            caches: self.caches()?,
            ..Config::default()
        })
        .context("starting the sandbox runtime")?;
        let mut sandbox_limits = runtime.limits().clone();
        if let Some(fuel) = self.fuel {
            if fuel == 0 {
                bail!("--fuel must be positive");
            }
            sandbox_limits.fuel_per_call = fuel;
        }
        sandbox_limits.memory_limit = self.memory_limit_bytes()? as usize;
        runtime = runtime.with_limits(sandbox_limits);
        let check = CheckOptions {
            fuel_budget: Some(self.validation_fuel),
            // Serving plays what a client registers; a plan in words in a multi-turn env does
            // not make it unplayable, so serve keeps the lenient solution judgement.
            require_winning_solution: false,
            ..CheckOptions::default()
        };
        executor()?.block_on(async move {
            if self.max_sessions.is_none() {
                let fresh = runtime
                    .fresh_memory_bytes()
                    .await
                    .context("measuring a fresh sandbox's memory")?;
                let fit = default_sessions(budget, fresh, limits.check_workers);
                if fit == 0 {
                    bail!(
                        "not one session fits in the memory budget of {}: an idle session needs about {}, and {} are set aside for {} whole sandbox memories ({} each with its overhead: {} check workers, the planning of a new source and {} calls running at once); give a larger --memory-budget",
                        show_bytes(budget),
                        show_bytes(TYPICAL_SESSION),
                        show_bytes((fresh + SANDBOX_OVERHEAD) * (limits.check_workers as u64 + PLANNING_SANDBOXES + CALLS_AT_ONCE)),
                        limits.check_workers as u64 + PLANNING_SANDBOXES + CALLS_AT_ONCE,
                        show_bytes(fresh + SANDBOX_OVERHEAD),
                        limits.check_workers,
                        CALLS_AT_ONCE
                    );
                }
                config.max_sessions = fit.min(most_sessions) as usize;
            }
            let registry = Arc::new(Registry::with_limits(runtime.clone(), check, limits));
            registry.expect_startup(sources.iter().map(|(id, _)| id.clone()));
            warn_if_exposed(&config);
            let server = Server::bind(runtime, registry.clone(), config.clone()).await?;
            let addr = server.local_addr()?;
            say!(
                "spade serve: listening on http://{addr} (WebSocket sessions at ws://{addr}/ws; {} sessions at most; memory budget {})",
                config.max_sessions,
                show_bytes(budget)
            );
            // The port is open while the start-up checks run, concurrently; each environment is
            // playable as soon as its check passes (`/health` counts them).
            let (served, ()) = tokio::join!(
                server.run(Box::pin(shutdown_signal())),
                register_all(&registry, sources),
            );
            served.context("serving")?;
            eprintln!("spade serve: shut down");
            Ok(std::process::ExitCode::SUCCESS)
        })
    }

    fn registry_limits(&self) -> anyhow::Result<RegistryLimits> {
        if self.check_workers == 0 {
            bail!("--check-workers must be at least 1");
        }
        if self.max_registrations_per_token == 0 {
            bail!("--max-registrations-per-token must be at least 1");
        }
        let defaults = RegistryLimits::default();
        Ok(RegistryLimits {
            max_registrations: self.max_registrations,
            max_per_token: self.max_registrations_per_token,
            max_source_bytes: self
                .max_registered_bytes
                .map(|b| usize::try_from(b).unwrap_or(usize::MAX))
                .unwrap_or(defaults.max_source_bytes),
            check_workers: self.check_workers,
        })
    }

    fn memory_limit_bytes(&self) -> anyhow::Result<u64> {
        let limit = self
            .memory_limit
            .unwrap_or(spade_sandbox::Limits::default().memory_limit as u64);
        if limit < 64 << 20 {
            bail!(
                "--memory-limit {} is too small: the interpreter alone needs tens of MiB; give at least 64M",
                show_bytes(limit)
            );
        }
        if limit > 4 << 30 {
            bail!(
                "--memory-limit {} is over 4 GiB, the most a 32-bit WebAssembly memory can hold",
                show_bytes(limit)
            );
        }
        Ok(limit)
    }

    /// The server's settings; without --max-sessions, `max_sessions` is worked out once the
    /// runtime can say what a fresh sandbox costs.
    fn config(&self) -> anyhow::Result<ServeConfig> {
        if self.max_sessions == Some(0) {
            bail!("--max-sessions must be at least 1");
        }
        self.memory_limit_bytes()?;
        let budget = match self.memory_budget.or_else(default_budget) {
            Some(budget) => budget,
            None => bail!(
                "cannot read the machine's memory (/proc/meminfo) for the default memory budget; give --memory-budget"
            ),
        };
        let max_sessions = self.max_sessions.unwrap_or(1);
        // 0 means none; a value a `Duration` cannot hold (NaN, negative, past ~5*10^11 years)
        // is refused rather than a panic.
        let seconds = |value: f64, flag: &str| -> anyhow::Result<Option<Duration>> {
            match Duration::try_from_secs_f64(value) {
                Ok(d) if d.is_zero() => Ok(None),
                Ok(d) => Ok(Some(d)),
                Err(_) => bail!("--{flag} must be a number of seconds, 0 or more"),
            }
        };
        let idle_timeout = seconds(self.session_idle_timeout, "session-idle-timeout")?;
        let header_read_timeout = seconds(self.header_read_timeout, "header-read-timeout")?;
        let body_read_timeout = seconds(self.body_read_timeout, "body-read-timeout")?;
        let write_stall_timeout = seconds(self.write_stall_timeout, "write-stall-timeout")?;
        let shutdown_grace =
            seconds(self.shutdown_grace, "shutdown-grace")?.unwrap_or(Duration::ZERO);
        if self.max_sessions_per_token == Some(0) {
            bail!("--max-sessions-per-token must be at least 1");
        }
        if self.max_connections == Some(0) {
            bail!("--max-connections must be at least 1");
        }
        if self.max_message_bytes < 1024 {
            bail!("--max-message-bytes must be at least 1024");
        }
        let tokens = match &self.token_file {
            None => Vec::new(),
            Some(path) => read_tokens(path)?,
        };
        Ok(ServeConfig {
            bind: self.bind,
            max_sessions,
            memory_budget: Some(budget),
            insecure_no_auth: self.insecure_no_auth,
            idle_timeout,
            tokens,
            record_dir: self.record_dir.clone(),
            max_record_bytes: self.max_record_bytes,
            max_downloads: self.max_downloads,
            max_message_bytes: self.max_message_bytes,
            header_read_timeout,
            body_read_timeout,
            write_stall_timeout,
            max_connections: self
                .max_connections
                .unwrap_or_else(spade_serve::default_max_connections),
            shutdown_grace,
            max_sessions_per_token: self.max_sessions_per_token,
        })
    }

    /// `(id, source)` of every file on the command line; two files with one id are an error.
    fn sources(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut sources: Vec<(String, String)> = Vec::new();
        for path in &self.envs {
            let source = read_text(path, "environment file")?;
            let id = env_id(path);
            if let Err(message) = spade_serve::protocol::check_id(&id, "environment id") {
                bail!("{} gives {message}", path.display());
            }
            if sources.iter().any(|(known, _)| *known == id) {
                bail!(
                    "two environment files have the id '{id}' (the id is the file stem, or the folder name for env.py)"
                );
            }
            sources.push((id, source));
        }
        Ok(sources)
    }
}

/// The id of an env file: its stem, or the folder name for `<name>/env.py`.
fn env_id(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "env".to_owned());
    if stem == "env"
        && let Some(parent) = path
            .canonicalize()
            .ok()
            .as_deref()
            .and_then(Path::parent)
            .and_then(Path::file_name)
    {
        return parent.to_string_lossy().into_owned();
    }
    stem
}

/// Checks and registers the command-line environments concurrently (at most
/// `--check-workers` at once), reporting each, then prints one line when all are done.
/// The tokens of a token file: one per line, blank lines and `#` comments skipped.
fn read_tokens(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = read_text(path, "token file")?;
    let mut tokens: Vec<String> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let token = line.trim();
        if token.is_empty() || token.starts_with('#') {
            continue;
        }
        if token.contains(char::is_whitespace) {
            bail!(
                "token file '{}', line {}: a token has no spaces inside it (one token per line)",
                path.display(),
                number + 1
            );
        }
        if tokens.iter().any(|t| t == token) {
            bail!(
                "token file '{}', line {}: the same token is on an earlier line",
                path.display(),
                number + 1
            );
        }
        tokens.push(token.to_owned());
    }
    if tokens.is_empty() {
        bail!("token file '{}' is empty", path.display());
    }
    Ok(tokens)
}

async fn register_all(registry: &Arc<Registry>, sources: Vec<(String, String)>) {
    let total = sources.len();
    let mut checks = tokio::task::JoinSet::new();
    for (id, source) in sources {
        let registry = registry.clone();
        checks.spawn(async move {
        let result = registry.register_startup(&id, &source).await;
        match &result {
            Ok(r) => {
                let class = r.class_name.as_deref().unwrap_or("no environment class");
                let cached = if r.verdict_from_cache {
                    " (verdict from the cache)"
                } else {
                    ""
                };
                if r.accepted {
                    eprintln!("spade serve: registered {id} ({class}): accepted{cached}");
                } else {
                    eprintln!(
                        "spade serve: registered {id} ({class}): REJECTED by spade check ({}){cached}; it cannot be played",
                        r.error_codes.join(", ")
                    );
                }
            }
            Err(err) => {
                eprintln!("spade serve: registering {id} FAILED: {err}; it cannot be played")
            }
        }
        result.map(|r| r.accepted).unwrap_or(false)
        });
    }
    let mut accepted = 0;
    while let Some(done) = checks.join_next().await {
        match done {
            Ok(true) => accepted += 1,
            Ok(false) => {}
            Err(err) => eprintln!("spade serve: a start-up check failed: {err}"),
        }
    }
    say!(
        "spade serve: {total} environments checked ({accepted} accepted, {} not playable)",
        total - accepted
    );
}

fn warn_if_exposed(config: &ServeConfig) {
    if !config.bind.ip().is_loopback() && config.tokens.is_empty() {
        eprintln!(
            "spade serve: warning: listening on {} without a token (--insecure-no-auth): anyone who can reach it can run sessions",
            config.bind
        );
    }
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("spade serve: shutting down: finishing open calls and closing sessions");
}
