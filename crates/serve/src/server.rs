//! The server: configuration, shared state, routes, authentication and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{DefaultBodyLimit, Extension, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use serde_json::Map;
use sha2::{Digest, Sha256};
use spade_sandbox::Runtime;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admission::{Admission, check_budget, default_budget};
use crate::held::{HeldSessions, SharedSession};
use crate::recordings::{DEFAULT_MAX_DOWNLOADS, DEFAULT_MAX_RECORD_BYTES, Recordings};
use crate::registry::{Registry, Tenant};
use crate::session::{Session, SessionContext};
use crate::{http, ws};

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to listen on. Default `127.0.0.1:8000` (loopback only).
    pub bind: SocketAddr,
    /// Most sessions at once: WebSocket sessions and HTTP `/reset` and `/step` calls in
    /// flight; one more gets `CAPACITY_REACHED` at once. Default 256, and it must fit in
    /// `memory_budget` (see [`crate::admission`]).
    pub max_sessions: usize,
    /// Bytes that every sandbox the server may run at once, at its memory limit, must fit in.
    /// `None`: three quarters of the machine's memory. The server does not start when
    /// `max_sessions` does not fit.
    pub memory_budget: Option<u64>,
    /// Allow a bind to an address other than loopback without a token. Default `false`: such a
    /// server would run any code that anyone who can reach it sends.
    pub insecure_no_auth: bool,
    /// A session with no message for this long is closed (`SESSION_ERROR`). Default 300 s.
    pub idle_timeout: Option<Duration>,
    /// With tokens, every request needs `Authorization: Bearer <one of them>` or gets 401.
    /// Each token is a tenant: its HTTP registrations are counted against
    /// [`crate::RegistryLimits::max_per_token`], and only it can delete them.
    pub tokens: Vec<String>,
    /// Record every episode to `<dir>/<episode_id>.jsonl`, each token's in its own
    /// directory under it (see [`crate::recordings`]).
    pub record_dir: Option<PathBuf>,
    /// Bytes of recordings one tenant may hold; a recorded call past it is refused
    /// ([`crate::SessionError::RecordQuota`]). Default
    /// [`DEFAULT_MAX_RECORD_BYTES`] (4 GiB).
    pub max_record_bytes: u64,
    /// Trajectory downloads at once; one more gets 503. Default [`DEFAULT_MAX_DOWNLOADS`]
    /// (16).
    pub max_downloads: usize,
    /// Largest WebSocket message or HTTP body, in bytes. A larger WebSocket message gets a
    /// `VALIDATION_ERROR` and the session goes on, up to 4x this, past which the connection is
    /// closed with code 1009. Default 1 MiB.
    pub max_message_bytes: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 8000)),
            max_sessions: 256,
            memory_budget: None,
            insecure_no_auth: false,
            idle_timeout: Some(Duration::from_secs(300)),
            tokens: Vec::new(),
            record_dir: None,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            max_downloads: DEFAULT_MAX_DOWNLOADS,
            max_message_bytes: 1 << 20,
        }
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The configuration is refused (budget, security); the message says what to change.
    #[error("{0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot create the record directory '{}': {source}", .dir.display())]
    RecordDir {
        dir: PathBuf,
        source: std::io::Error,
    },
}

impl ServeConfig {
    /// Refuses a configuration that is unsafe or over the memory budget: a non-loopback bind
    /// without a token (unless `insecure_no_auth`), and `max_sessions` that do not fit in the
    /// budget with sandboxes of `memory_limit` bytes and `check_workers` checks.
    pub fn validate(&self, memory_limit: u64, check_workers: usize) -> Result<(), BindError> {
        if self.tokens.is_empty() && !self.bind.ip().is_loopback() && !self.insecure_no_auth {
            return Err(BindError::Config(format!(
                "refusing to serve on {} without a token: anyone who can reach it could run code and fill its memory; give --token-file FILE, bind to 127.0.0.1, or pass --insecure-no-auth if the network is trusted",
                self.bind
            )));
        }
        let budget = match self.memory_budget.or_else(default_budget) {
            Some(budget) => budget,
            None => {
                return Err(BindError::Config(
                    "cannot read the machine's memory (/proc/meminfo) for the default memory budget; give --memory-budget".to_owned(),
                ));
            }
        };
        check_budget(self.max_sessions, check_workers, memory_limit, budget)
            .map_err(BindError::Config)
    }
}

/// What every handler shares.
pub struct AppState {
    pub config: ServeConfig,
    pub sessions: Arc<SessionContext>,
    /// The same context with recording off (for OpenEnv's stateless HTTP endpoints).
    stateless: Arc<SessionContext>,
    /// The session slots every sandbox-creating request takes.
    pub admission: Admission,
    /// Sessions held between requests (created over `POST /mcp`).
    pub held: HeldSessions,
    pub shutdown: watch::Receiver<bool>,
    /// The sha256 of every token, in the order given (the index is the tenant).
    token_sha256: Vec<[u8; 32]>,
}

impl AppState {
    /// A fresh session id: 128 random bits from the operating system, in hex, so that no id
    /// says anything of another (a session's default episode ids are `<session id>-<n>`).
    ///
    /// # Panics
    ///
    /// When the operating system's random source fails (it does not on a booted Linux).
    pub fn new_session_id(&self) -> String {
        crate::recordings::random_id().expect("the operating system's random source failed")
    }

    /// The session context with recording off.
    pub fn sessions_without_recording(&self) -> Arc<SessionContext> {
        self.stateless.clone()
    }
}

/// A bound server, ready to run.
pub struct Server {
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown_tx: watch::Sender<bool>,
}

impl Server {
    /// Checks `config` against the runtime's limits and the registry's, binds `config.bind`
    /// and prepares a server over `registry`.
    pub async fn bind(
        runtime: Runtime,
        registry: Arc<Registry>,
        config: ServeConfig,
    ) -> Result<Server, BindError> {
        config.validate(
            runtime.limits().memory_limit as u64,
            registry.limits().check_workers,
        )?;
        if config.max_downloads == 0 {
            return Err(BindError::Config(
                "--max-downloads must be at least 1".to_owned(),
            ));
        }
        let recordings = match &config.record_dir {
            None => None,
            Some(dir) => Some(
                Recordings::open(
                    dir,
                    &config.tokens,
                    config.max_record_bytes,
                    config.max_downloads,
                )
                .map_err(|source| BindError::RecordDir {
                    dir: dir.clone(),
                    source,
                })?,
            ),
        };
        let listener =
            TcpListener::bind(config.bind)
                .await
                .map_err(|source| BindError::Listen {
                    addr: config.bind,
                    source,
                })?;
        let (shutdown_tx, shutdown) = watch::channel(false);
        let sessions = Arc::new(SessionContext {
            registry: registry.clone(),
            runtime: runtime.clone(),
            recordings,
        });
        let stateless = Arc::new(SessionContext {
            registry,
            runtime,
            recordings: None,
        });
        let token_sha256 = config.tokens.iter().map(|t| digest(t)).collect();
        let state = Arc::new(AppState {
            admission: Admission::new(config.max_sessions),
            held: HeldSessions::default(),
            config,
            sessions,
            stateless,
            shutdown,
            token_sha256,
        });
        Ok(Server {
            listener,
            state,
            shutdown_tx,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `signal` completes, then stops accepting, tells every session to finish
    /// its call and close (its trajectory is completed), and waits up to `drain` for them.
    pub async fn run(
        self,
        signal: Pin<Box<dyn Future<Output = ()> + Send>>,
        drain: Duration,
    ) -> std::io::Result<()> {
        let state = self.state.clone();
        let app = router(state.clone());
        let tx = self.shutdown_tx;
        // Small request/answer frames: without TCP_NODELAY, Nagle's algorithm and delayed ACKs
        // add tens of milliseconds to a step.
        let listener = self.listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
            signal.await;
            let _ = tx.send(true);
        });
        let reaper = state.config.idle_timeout.map(|idle| {
            let state = state.clone();
            tokio::spawn(async move {
                let period = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
                let mut tick = tokio::time::interval(period);
                loop {
                    tick.tick().await;
                    state.held.reap(idle);
                }
            })
        });
        let result = serve.await;
        if let Some(reaper) = reaper {
            reaper.abort();
        }
        // Held sessions end with the server (their trajectories are finished).
        state.held.clear();
        let deadline = tokio::time::Instant::now() + drain;
        while state.admission.active() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        result
    }
}

fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_message_bytes;
    Router::new()
        .route("/health", get(http::health))
        .route("/openapi.json", get(crate::openapi::openapi))
        .route("/metadata", get(http::metadata))
        .route("/schema", get(http::schema))
        .route("/state", get(http::state))
        .route("/reset", post(http::reset))
        .route("/mcp", post(http::mcp))
        .route("/step", post(http::step))
        .route("/envs", get(http::list_envs).post(http::register_env))
        .route("/envs/{id}", get(http::get_env).delete(http::delete_env))
        .route("/trajectories/{id}", get(http::trajectory))
        .route("/sessions/{id}/fork", post(http::fork_session))
        .route("/ws", get(websocket))
        .fallback(http::not_found)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state)
}

/// The query of `/ws`: a session to attach to.
#[derive(Debug, serde::Deserialize)]
struct WsQuery {
    session_id: Option<String>,
}

/// `/ws`: a new session (it takes a session slot), or with `?session_id=` a session the server
/// holds (it has its slot already).
async fn websocket(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Query(query): Query<WsQuery>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let hard_cap = state.config.max_message_bytes.saturating_mul(4);
    let upgrade = upgrade.max_message_size(hard_cap).max_frame_size(hard_cap);
    if let Some(id) = query.session_id.filter(|id| !id.is_empty()) {
        return match state.held.attach(&id, tenant) {
            Ok(shared) => upgrade
                .on_upgrade(move |socket| ws::run(socket, state, shared, ws::Attachment::Held)),
            Err(err) => upgrade.on_upgrade(move |socket| ws::refuse_attach(socket, err)),
        };
    }
    match state.admission.admit() {
        Ok(permit) => {
            let session = Session::new(state.new_session_id(), state.sessions.clone(), tenant);
            let shared = SharedSession::new(session, permit, tenant);
            upgrade.on_upgrade(move |socket| ws::run(socket, state, shared, ws::Attachment::Own))
        }
        Err(full) => upgrade.on_upgrade(move |socket| ws::refuse(socket, full)),
    }
}

/// With tokens configured, every request needs `Authorization: Bearer <token>`; the token is
/// compared in constant time with every configured one (as sha256 digests, so lengths do not
/// leak either), and the request carries its [`Tenant`].
async fn authenticate(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    if state.token_sha256.is_empty() {
        request.extensions_mut().insert(Tenant(0));
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let message = match given {
        None => {
            "missing bearer token: send 'Authorization: Bearer <token>' (the server runs with --token-file)"
        }
        Some(token) => match matching_token(&digest(token.trim()), &state.token_sha256) {
            Some(tenant) => {
                request.extensions_mut().insert(Tenant(tenant));
                return next.run(request).await;
            }
            None => "invalid bearer token",
        },
    };
    let mut response = http::error(StatusCode::UNAUTHORIZED, message, Map::new());
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response.into_response()
}

/// The token of an `Authorization` value with the `Bearer` scheme. Schemes are
/// case-insensitive (RFC 9110, section 11.1): `bearer` and `BEARER` are the same scheme.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// The index of the token whose digest is `given`, comparing with every one (the time does not
/// depend on which matched).
fn matching_token(given: &[u8; 32], tokens: &[[u8; 32]]) -> Option<usize> {
    let mut found = None;
    for (index, token) in tokens.iter().enumerate() {
        if constant_time_eq(given, token) && found.is_none() {
            found = Some(index);
        }
    }
    found
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_compare() {
        assert!(constant_time_eq(&digest("abc"), &digest("abc")));
        assert!(!constant_time_eq(&digest("abc"), &digest("abd")));
        assert!(!constant_time_eq(&digest("abc"), &digest("abcd")));
        let tokens = [digest("first"), digest("second")];
        assert_eq!(matching_token(&digest("second"), &tokens), Some(1));
        assert_eq!(matching_token(&digest("first"), &tokens), Some(0));
        assert_eq!(matching_token(&digest("third"), &tokens), None);
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
        assert_eq!(bearer_token("Bearer"), None);
    }
}
