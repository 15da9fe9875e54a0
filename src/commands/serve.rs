//! `spade serve`: the sandbox as an OpenEnv-compatible server (WebSocket sessions and HTTP).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use spade_envtools::check::CheckOptions;
use spade_sandbox::{Config, Pool, Runtime};
use spade_serve::{Registry, ServeConfig, Server};

use super::{executor, read_text};

/// Serve environments over OpenEnv's wire protocol: one sandbox per session, environments
/// checked and registered by source, optional bearer token and trajectory recording.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Environment sources to check and register at start. The id is the file stem (the folder
    /// name for `<name>/env.py`). With exactly one registered, a reset without `env_id` uses it.
    pub envs: Vec<PathBuf>,
    /// Address to listen on (loopback by default; anything else should use --token-file).
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub bind: SocketAddr,
    /// Most WebSocket sessions open at once; one more gets OpenEnv's CAPACITY_REACHED error.
    #[arg(long, default_value_t = 256)]
    pub max_sessions: usize,
    /// Close a session after this many seconds without a message (0: never).
    #[arg(long, default_value_t = 300.0, value_name = "S")]
    pub session_idle_timeout: f64,
    /// A file holding the bearer token every request must carry (`Authorization: Bearer ...`).
    #[arg(long, value_name = "F")]
    pub token_file: Option<PathBuf>,
    /// Record every episode to `DIR/<episode_id>.jsonl` (replayable with `spade replay`,
    /// served at `/trajectories/<episode_id>`).
    #[arg(long, value_name = "DIR")]
    pub record_dir: Option<PathBuf>,
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
}

/// Pool slots beyond one per session: checks of registered sources and snapshot probes.
const CHECK_SLOTS: u32 = 64;

impl ServeArgs {
    pub fn execute(self) -> anyhow::Result<std::process::ExitCode> {
        let config = self.config()?;
        let sources = self.sources()?;
        // One slot per session, and room for the short-lived sandboxes that check sources and
        // take snapshots.
        let pool = Pool {
            sandboxes: u32::try_from(self.max_sessions)
                .unwrap_or(u32::MAX)
                .saturating_add(CHECK_SLOTS)
                .max(Pool::default().sandboxes),
            ..Pool::default()
        };
        let mut runtime = Runtime::new(Config {
            pool: Some(pool),
            ..Config::default()
        })
        .context("starting the sandbox runtime")?;
        if let Some(fuel) = self.fuel {
            if fuel == 0 {
                bail!("--fuel must be positive");
            }
            let mut limits = runtime.limits().clone();
            limits.fuel_per_call = fuel;
            runtime = runtime.with_limits(limits);
        }
        let check = CheckOptions {
            fuel_budget: Some(self.validation_fuel),
            ..CheckOptions::default()
        };
        executor()?.block_on(async move {
            let registry = Arc::new(Registry::new(runtime.clone(), check));
            register_all(&registry, sources).await?;
            warn_if_exposed(&config);
            let server = Server::bind(runtime, registry, config.clone())
                .await
                .with_context(|| format!("cannot listen on {}", config.bind))?;
            let addr = server.local_addr()?;
            say!("spade serve: listening on http://{addr} (WebSocket sessions at ws://{addr}/ws)");
            server
                .run(Box::pin(shutdown_signal()), Duration::from_secs(35))
                .await
                .context("serving")?;
            eprintln!("spade serve: shut down");
            Ok(std::process::ExitCode::SUCCESS)
        })
    }

    fn config(&self) -> anyhow::Result<ServeConfig> {
        if self.max_sessions == 0 {
            bail!("--max-sessions must be at least 1");
        }
        if !(self.session_idle_timeout.is_finite() && self.session_idle_timeout >= 0.0) {
            bail!("--session-idle-timeout must be a number of seconds, 0 or more");
        }
        if self.max_message_bytes < 1024 {
            bail!("--max-message-bytes must be at least 1024");
        }
        let token = match &self.token_file {
            None => None,
            Some(path) => {
                let text = read_text(path, "token file")?;
                let token = text.trim();
                if token.is_empty() {
                    bail!("token file '{}' is empty", path.display());
                }
                if token.contains(char::is_whitespace) {
                    bail!(
                        "token file '{}' must hold one token (no spaces or line breaks inside it)",
                        path.display()
                    );
                }
                Some(token.to_owned())
            }
        };
        Ok(ServeConfig {
            bind: self.bind,
            max_sessions: self.max_sessions,
            idle_timeout: (self.session_idle_timeout > 0.0)
                .then(|| Duration::from_secs_f64(self.session_idle_timeout)),
            token,
            record_dir: self.record_dir.clone(),
            max_message_bytes: self.max_message_bytes,
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

async fn register_all(registry: &Registry, sources: Vec<(String, String)>) -> anyhow::Result<()> {
    for (id, source) in sources {
        let registration = registry
            .register(Some(&id), &source)
            .await
            .with_context(|| format!("registering '{id}'"))?;
        let class = registration
            .class_name
            .as_deref()
            .unwrap_or("no environment class");
        if registration.accepted {
            eprintln!("spade serve: registered {id} ({class}): accepted");
        } else {
            eprintln!(
                "spade serve: registered {id} ({class}): REJECTED by spade check ({}); it cannot be played",
                registration.error_codes.join(", ")
            );
        }
    }
    Ok(())
}

fn warn_if_exposed(config: &ServeConfig) {
    if !config.bind.ip().is_loopback() && config.token.is_none() {
        eprintln!(
            "spade serve: warning: listening on {} without --token-file: anyone who can reach it can run sessions",
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
