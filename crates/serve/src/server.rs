//! The server: configuration, shared state, routes, authentication and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
use spade_sandbox::{MemoryAccount, Runtime};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admission::Admission;
use crate::held::{HeldSessions, SharedSession};
use crate::registry::{Registry, Tenant};
use crate::session::{Session, SessionContext};
use crate::{http, ws};

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to listen on. Default `127.0.0.1:8000` (loopback only).
    pub bind: SocketAddr,
    /// Most sessions at once: WebSocket sessions and HTTP `/reset` and `/step` calls in
    /// flight; one more gets `CAPACITY_REACHED` at once. A plain cap: memory is bounded by the
    /// runtime's memory account (see [`crate::admission`]). Default 256; `spade serve`
    /// defaults it to what fits in its budget ([`crate::admission::default_sessions`]).
    pub max_sessions: usize,
    /// The budget of the memory account the runtime's sandboxes draw from
    /// ([`spade_sandbox::Config::memory_account`], which `spade serve` makes from
    /// `--memory-budget`, by default three quarters of the machine's memory). For information:
    /// the account itself is what bounds memory.
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
    /// Record every episode to `<dir>/<episode_id>.jsonl`.
    pub record_dir: Option<PathBuf>,
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
    /// Refuses a configuration that is unsafe: a non-loopback bind without a token (unless
    /// `insecure_no_auth`).
    pub fn validate(&self) -> Result<(), BindError> {
        if self.tokens.is_empty() && !self.bind.ip().is_loopback() && !self.insecure_no_auth {
            return Err(BindError::Config(format!(
                "refusing to serve on {} without a token: anyone who can reach it could run code and fill its memory; give --token-file FILE, bind to 127.0.0.1, or pass --insecure-no-auth if the network is trusted",
                self.bind
            )));
        }
        Ok(())
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
    /// The memory account every sandbox of the server draws from (the runtime's).
    pub memory: MemoryAccount,
    /// Sessions held between requests (created over `POST /mcp`).
    pub held: HeldSessions,
    pub shutdown: watch::Receiver<bool>,
    /// The sha256 of every token, in the order given (the index is the tenant).
    token_sha256: Vec<[u8; 32]>,
    next_session: AtomicU64,
    id_prefix: String,
}

impl AppState {
    /// A fresh session id, unique within this server's record directory across restarts
    /// (a per-process prefix plus a counter).
    pub fn new_session_id(&self) -> String {
        let n = self.next_session.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.id_prefix)
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
    /// Checks `config`, binds `config.bind` and prepares a server over `registry`. The
    /// runtime must have a memory account ([`spade_sandbox::Config::memory_account`]).
    pub async fn bind(
        runtime: Runtime,
        registry: Arc<Registry>,
        config: ServeConfig,
    ) -> Result<Server, BindError> {
        config.validate()?;
        let Some(memory) = runtime.config().memory_account.clone() else {
            return Err(BindError::Config(
                "the sandbox runtime has no memory account: a server runs other people's code, so every sandbox must draw from one budget (build the runtime with Config::memory_account, as spade serve does from --memory-budget)".to_owned(),
            ));
        };
        if let Some(dir) = &config.record_dir {
            std::fs::create_dir_all(dir).map_err(|source| BindError::RecordDir {
                dir: dir.clone(),
                source,
            })?;
        }
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
            record_dir: config.record_dir.clone(),
        });
        let stateless = Arc::new(SessionContext {
            registry,
            runtime,
            record_dir: None,
        });
        let token_sha256 = config.tokens.iter().map(|t| digest(t)).collect();
        let id_prefix = process_prefix();
        let state = Arc::new(AppState {
            admission: Admission::new(config.max_sessions),
            memory,
            held: HeldSessions::default(),
            config,
            sessions,
            stateless,
            shutdown,
            token_sha256,
            next_session: AtomicU64::new(0),
            id_prefix,
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
            let session = Session::new(state.new_session_id(), state.sessions.clone());
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
        .and_then(|v| v.strip_prefix("Bearer "));
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

/// A short prefix unique to this process: sha256 of the start time and the process id.
fn process_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = format!("{nanos}-{}", std::process::id());
    hex::encode(&Sha256::digest(seed.as_bytes())[..6])
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
}
