//! The server: configuration, shared state, routes, authentication and graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{DefaultBodyLimit, Extension, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Map;
use sha2::{Digest, Sha256};
use spade_sandbox::{MemoryAccount, Runtime};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::admission::Admission;
use crate::deadlines::{BodyError, TimedBody, WriteDeadline, WriteDeadlineSwitch};
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
    /// A session with no message for this long is closed (`SESSION_ERROR`); pings and pongs
    /// are not messages. It is also the deadline of every frame the server sends: a client that
    /// stops reading ends its session when one cannot be sent within it. Default 300 s.
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
    /// A connection must send a request's whole header within this long, counted from when the
    /// server starts waiting for it: the first request's, and each next one on a keep-alive
    /// connection (so it is also the keep-alive idle timeout). Past it the connection is closed.
    /// Default 30 s (a client on a slow link sends a header in well under a second; a
    /// connection that trickles one, or idles, holds a file descriptor for nothing). `None`:
    /// no limit.
    pub header_read_timeout: Option<Duration>,
    /// A request's whole body must arrive within this long, counted from when its header was
    /// read; past it the request is answered `408` and the connection closed. Default 30 s,
    /// the header read timeout's order (a 1 MiB body, the largest by default, needs 35 KB/s):
    /// without it a client that sends a header and then trickles or withholds its body holds
    /// its connection and a task for ever. `None`: no limit.
    pub body_read_timeout: Option<Duration>,
    /// An answer whose client accepts no byte of it for this long is ended and its connection
    /// closed, which frees what the answer held (a trajectory download's slot among
    /// [`ServeConfig::max_downloads`] and its file). Any byte accepted starts the count again.
    /// Not for WebSocket sessions, whose sends have [`ServeConfig::idle_timeout`]. Default 30 s:
    /// the kernel's socket buffers hold megabytes, so only a client that stopped reading waits
    /// that long. `None`: no limit.
    pub write_stall_timeout: Option<Duration>,
    /// Most TCP connections open at once (HTTP, and WebSocket for their whole life); one more
    /// is answered `503` and closed at once, before its request is read. Default 1,024, at
    /// most half the process's open-file limit: without a cap, clients that open connections
    /// and send nothing (they need no token for that) exhaust the descriptors and lock every
    /// other client out.
    pub max_connections: usize,
    /// Most live sessions (WebSocket sessions and held ones) of one bearer token; one more is
    /// refused with `CAPACITY_REACHED` and a message naming this limit. `None`: all of
    /// `max_sessions` with one token or none, and half of them (rounded up) with several, so
    /// that one tenant cannot take every slot and lock the others out.
    pub max_sessions_per_token: Option<usize>,
    /// At shutdown, how long open calls and sessions get to finish and close; past it every
    /// remaining connection is dropped (its session's slot and sandbox released). Default 30 s.
    pub shutdown_grace: Duration,
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
            header_read_timeout: Some(Duration::from_secs(30)),
            body_read_timeout: Some(Duration::from_secs(30)),
            write_stall_timeout: Some(Duration::from_secs(30)),
            max_connections: default_max_connections(),
            shutdown_grace: Duration::from_secs(30),
            max_sessions_per_token: None,
        }
    }
}

/// The default [`ServeConfig::max_connections`]: 1,024, or half the process's open-file limit
/// (`RLIMIT_NOFILE`, read from `/proc/self/limits`) where that is lower, leaving the other half
/// to the caches, the recordings and the listener.
pub fn default_max_connections() -> usize {
    let soft_limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        });
    match soft_limit {
        Some(limit) => (limit / 2).clamp(1, 1024),
        None => 1024,
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
    /// [`ServeConfig::max_sessions_per_token`], its default applied.
    pub fn sessions_per_token(&self) -> usize {
        match self.max_sessions_per_token {
            Some(n) => n,
            None if self.tokens.len() > 1 => self.max_sessions.div_ceil(2),
            None => self.max_sessions,
        }
    }

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
    /// Set when the shutdown grace period is over: every connection still open is dropped.
    pub dropping: watch::Receiver<bool>,
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
    dropping_tx: watch::Sender<bool>,
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
        if config.max_downloads == 0 {
            return Err(BindError::Config(
                "--max-downloads must be at least 1".to_owned(),
            ));
        }
        let Some(memory) = runtime.config().memory_account.clone() else {
            return Err(BindError::Config(
                "the sandbox runtime has no memory account: a server runs other people's code, so every sandbox must draw from one budget (build the runtime with Config::memory_account, as spade serve does from --memory-budget)".to_owned(),
            ));
        };
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
        let (dropping_tx, dropping) = watch::channel(false);
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
            admission: Admission::new(config.max_sessions, config.sessions_per_token()),
            memory,
            held: HeldSessions::default(),
            config,
            sessions,
            stateless,
            shutdown,
            dropping,
            token_sha256,
        });
        Ok(Server {
            listener,
            state,
            shutdown_tx,
            dropping_tx,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `signal` completes, then stops accepting, tells every session to finish
    /// its call and close (its trajectory is completed), and waits for them up to
    /// [`ServeConfig::shutdown_grace`], past which every remaining connection is dropped.
    pub async fn run(
        self,
        signal: Pin<Box<dyn Future<Output = ()> + Send>>,
    ) -> std::io::Result<()> {
        let state = self.state.clone();
        let config = &state.config;
        let app = router(state.clone());
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(config.header_read_timeout);
        let slots = Arc::new(Semaphore::new(config.max_connections));
        let reaper = config.idle_timeout.map(|idle| {
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
        let mut connections = JoinSet::new();
        let mut signal = signal;
        loop {
            let tcp = tokio::select! {
                () = &mut signal => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                accepted = self.listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    // Out of file descriptors (or another error of the listener): wait a
                    // little rather than spin; connections that close free some.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                refuse_connection(tcp, config.max_connections);
                continue;
            };
            // Small request/answer frames: without TCP_NODELAY, Nagle's algorithm and delayed
            // ACKs add tens of milliseconds to a step.
            let _ = tcp.set_nodelay(true);
            let slot = ConnectionSlot(Arc::new(slot));
            let io = WriteDeadline::new(tcp, config.write_stall_timeout);
            let write_deadline = io.switch();
            let router = app.clone();
            let body_limit = config.body_read_timeout;
            let service = service_fn(move |request: Request<Incoming>| {
                let (parts, body) = request.into_parts();
                let body = TimedBody::new(body, body_limit);
                let timed_out = body.timed_out();
                let mut request = Request::from_parts(parts, body);
                request.extensions_mut().insert(slot.clone());
                request.extensions_mut().insert(write_deadline.clone());
                let mut router = router.clone();
                async move {
                    let response = tower_service::Service::call(&mut router, request).await?;
                    Ok::<_, Infallible>(match body_limit {
                        Some(limit) if timed_out.load(Ordering::SeqCst) => body_timed_out(limit),
                        _ => response,
                    })
                }
            });
            let conn = http
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades();
            let mut shutdown = state.shutdown.clone();
            connections.spawn(async move {
                tokio::pin!(conn);
                tokio::select! {
                    _ = conn.as_mut() => return,
                    _ = shutdown.wait_for(|down| *down) => {}
                }
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            });
        }
        drop(self.listener);
        let _ = self.shutdown_tx.send(true);
        if let Some(reaper) = reaper {
            reaper.abort();
        }
        // Held sessions end with the server (their trajectories are finished).
        state.held.clear();
        let deadline = tokio::time::Instant::now() + config.shutdown_grace;
        let finished = async {
            while connections.join_next().await.is_some() {}
            while state.admission.active() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout_at(deadline, finished).await.is_err() {
            // The grace period is over: drop every connection still open (WebSocket sessions
            // end where they are; their slots and sandboxes are released as they drop).
            let _ = self.dropping_tx.send(true);
            connections.abort_all();
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                while connections.join_next().await.is_some() {}
            })
            .await;
        }
        Ok(())
    }
}

/// The extension every request of a connection carries: its slot among
/// [`ServeConfig::max_connections`], which a WebSocket keeps for its whole life.
#[derive(Clone)]
struct ConnectionSlot(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

/// The answer to a request whose body did not arrive within [`ServeConfig::body_read_timeout`]:
/// 408, and the connection is closed (the rest of the body is never read).
fn body_timed_out(limit: Duration) -> Response {
    let mut response = http::error(
        StatusCode::REQUEST_TIMEOUT,
        BodyError::TimedOut(limit).to_string(),
        Map::new(),
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Answers a connection over [`ServeConfig::max_connections`] with a 503 and closes it, at once
/// (one write that does not wait: a client that does not read gets the close alone).
fn refuse_connection(tcp: TcpStream, max: usize) {
    let body = serde_json::json!({
        "detail": format!(
            "Server at its connection limit: {max} connections open (--max-connections); try again later"
        ),
        "code": "CONNECTION_LIMIT",
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.try_write(response.as_bytes());
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
/// holds (it has its slot already). The session is attached only once the upgrade completed
/// (an upgrade that fails leaves it as it was), and the connection's slot stays taken while the
/// WebSocket lives. When the shutdown grace period is over the session is dropped where it is.
async fn websocket(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    connection: Option<Extension<ConnectionSlot>>,
    write_deadline: Option<Extension<WriteDeadlineSwitch>>,
    Query(query): Query<WsQuery>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let hard_cap = state.config.max_message_bytes.saturating_mul(4);
    let upgrade = upgrade.max_message_size(hard_cap).max_frame_size(hard_cap);
    let deadline = state.config.idle_timeout;
    let mut dropping = state.dropping.clone();
    let held = query.session_id.filter(|id| !id.is_empty());
    // A new session's slot is taken now (an upgrade that fails drops it with the callback).
    let own = match held {
        Some(_) => None,
        None => Some(state.admission.admit_session(tenant)),
    };
    upgrade.on_upgrade(move |socket| async move {
        let _connection = connection;
        // A WebSocket's sends have the session's own deadline (the idle timeout).
        if let Some(Extension(switch)) = write_deadline {
            switch.turn_off();
        }
        let session = async {
            match (held, own) {
                (Some(id), _) => match state.held.attach(&id, tenant) {
                    Ok(attached) => {
                        let shared = attached.session().clone();
                        ws::run(socket, state, shared, ws::Attachment::Held(attached)).await
                    }
                    Err(err) => ws::refuse_attach(socket, err, deadline).await,
                },
                (None, Some(Ok(permit))) => {
                    let session =
                        Session::new(state.new_session_id(), state.sessions.clone(), tenant);
                    let shared = SharedSession::new(session, permit, tenant);
                    ws::run(socket, state, shared, ws::Attachment::Own).await
                }
                (None, Some(Err(full))) => ws::refuse(socket, full, deadline).await,
                (None, None) => {}
            }
        };
        tokio::select! {
            () = session => {}
            _ = dropping.wait_for(|dropping| *dropping) => {}
        }
    })
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
    // The connection ends with the refusal: a client without a token cannot keep a connection
    // slot (--max-connections) open by sending refused requests.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
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
    fn one_token_of_several_gets_half_the_sessions_by_default() {
        let mut config = ServeConfig {
            max_sessions: 5,
            ..ServeConfig::default()
        };
        assert_eq!(config.sessions_per_token(), 5);
        config.tokens = vec!["a".to_owned()];
        assert_eq!(config.sessions_per_token(), 5);
        config.tokens.push("b".to_owned());
        assert_eq!(config.sessions_per_token(), 3);
        config.max_sessions_per_token = Some(1);
        assert_eq!(config.sessions_per_token(), 1);
    }

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
