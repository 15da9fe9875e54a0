//! The HTTP endpoints: OpenEnv's `/health`, `/metadata`, `/schema`, `/state`, `/reset` and
//! `/step` (stateless, as in OpenEnv's server: every request gets a fresh environment), and
//! spade's `/envs` (registration) and `/trajectories/{id}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::admission::AtCapacity;
use crate::fork::{ForkFailure, ForkRequest, Forked};
use crate::protocol::{FieldError, RawObject, ResetFields, SpadeAction, check_id, type_name};
use crate::registry::{RegistryError, Tenant};
use crate::server::AppState;
use crate::session::{Outcome, Session, SessionError, stateless_step};

/// A JSON error response `{"detail": message, ...}`, as FastAPI's `HTTPException` gives.
pub fn error(
    status: StatusCode,
    message: impl Into<String>,
    extra: Map<String, Value>,
) -> Response {
    let mut body = Map::new();
    body.insert("detail".to_owned(), Value::String(message.into()));
    body.extend(extra);
    (status, axum::Json(Value::Object(body))).into_response()
}

fn plain_error(status: StatusCode, message: impl Into<String>) -> Response {
    error(status, message, Map::new())
}

/// FastAPI's answer to a request body that does not validate: 422 with `detail` a list of
/// `{type, loc, msg}`, each `loc` starting at `body`.
fn invalid_body(err: FieldError) -> Response {
    let detail = json!([err.under("body").to_json()]);
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        axum::Json(json!({ "detail": detail })),
    )
        .into_response()
}

/// `GET /health`: OpenEnv's `{"status": "healthy"}`, with how many environments are ready,
/// rejected and still being checked (the port opens before the start-up checks end), the
/// sessions in use, the bytes of sandbox memory charged to the memory budget now (see
/// [`crate::admission`]), and what the runtime's source cache holds (docs/serve.md, "Limits").
pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    let envs = state.sessions.registry.readiness();
    let caches = state.sessions.runtime.cache_stats();
    axum::Json(json!({
        "status": "healthy",
        "envs": {"ready": envs.ready, "rejected": envs.rejected, "checking": envs.checking},
        "sessions": {"active": state.admission.active(), "max": state.admission.max()},
        "memory": {"charged": state.memory.charged(), "budget": state.memory.budget()},
        "caches": {
            "sources": caches.sources,
            "plans": caches.plans,
            "snapshot_bytes": caches.snapshot_bytes,
            "bytes": caches.bytes,
        },
    }))
    .into_response()
}

/// OpenEnv's capacity refusal over HTTP: 503 with the code and the counts.
fn at_capacity(full: AtCapacity) -> Response {
    let mut extra = Map::new();
    extra.insert("code".to_owned(), json!("CAPACITY_REACHED"));
    extra.insert("active_sessions".to_owned(), json!(full.active));
    extra.insert("max_sessions".to_owned(), json!(full.max));
    error(StatusCode::SERVICE_UNAVAILABLE, full.message(), extra)
}

/// `GET /metadata`: OpenEnv's `EnvironmentMetadata` of the server, or with `?env_id=ID` of one
/// environment (its id, class, verdict and tools).
pub async fn metadata(
    State(state): State<Arc<AppState>>,
    Query(query): Query<EnvQuery>,
) -> Response {
    if let Some(id) = query.env_id {
        return match state.sessions.registry.resolve(Some(&id)) {
            Ok(r) => axum::Json(env_metadata(&r)).into_response(),
            Err(err) => registry_error(err),
        };
    }
    let envs: Vec<String> = state
        .sessions
        .registry
        .list()
        .iter()
        .map(|r| {
            let verdict = if r.accepted { "accepted" } else { "rejected" };
            format!("{} ({verdict})", r.id)
        })
        .collect();
    let description = format!(
        "spade: model-written Python environments in a WebAssembly sandbox. Environments: {}. \
         Reset fields: seed, env_id, hint, max_turns, episode_id; action: {{\"message\": \"...\"}}.",
        if envs.is_empty() {
            "none".to_owned()
        } else {
            envs.join(", ")
        }
    );
    axum::Json(json!({
        "name": "spade",
        "description": description,
        "readme_content": null,
        "version": env!("CARGO_PKG_VERSION"),
        "author": null,
        "documentation_url": null,
    }))
    .into_response()
}

/// OpenEnv's `EnvironmentMetadata` of one registered environment.
fn env_metadata(r: &crate::registry::Registration) -> Value {
    let class = r.class_name.as_deref().unwrap_or("no environment class");
    let verdict = if r.accepted {
        "accepted by spade check".to_owned()
    } else {
        format!("rejected by spade check ({})", r.error_codes.join(", "))
    };
    let kind = match r.tools.as_ref().and_then(Value::as_array) {
        Some(tools) => format!(
            "a tool-use environment with {} tools (MCP: tools/list, tools/call)",
            tools.len()
        ),
        None => "a plain environment (action {\"message\": \"...\"})".to_owned(),
    };
    json!({
        "name": r.id,
        "description": format!("{class}: {kind}; {verdict}. Source sha256 {}.", r.sha256),
        "readme_content": null,
        "version": env!("CARGO_PKG_VERSION"),
        "author": null,
        "documentation_url": null,
    })
}

/// `GET /schema`, or `GET /schema?env_id=ID` for one environment (with its tool schemas when
/// it is a tool-use environment).
pub async fn schema(State(state): State<Arc<AppState>>, Query(query): Query<EnvQuery>) -> Response {
    let Some(id) = query.env_id else {
        return axum::Json(crate::protocol::schema()).into_response();
    };
    match state.sessions.registry.resolve(Some(&id)) {
        Ok(r) => axum::Json(crate::protocol::env_schema(
            &r.id,
            r.class_name.as_deref(),
            r.tools.as_ref(),
        ))
        .into_response(),
        Err(err) => registry_error(err),
    }
}

/// The query of the per-environment endpoints.
#[derive(Debug, serde::Deserialize)]
pub struct EnvQuery {
    env_id: Option<String>,
}

/// `GET /state`: the state of a fresh environment, as OpenEnv's stateless endpoint, in the
/// shape `/schema` advertises (no episode, no session).
pub async fn state() -> Response {
    axum::Json(json!({
        "episode_id": null, "step_count": 0, "env_id": null, "seed": null, "done": false,
        "session_id": null,
    }))
    .into_response()
}

/// Parses a request body as a JSON object (empty body: `{}` when `empty_ok`).
/// The request body's bytes, or the answer to a body that could not be read.
fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, Box<Response>> {
    body.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            plain_error(
                status,
                "request body is over the size limit (--max-message-bytes)",
            )
        } else {
            plain_error(status, format!("cannot read the request body: {rejection}"))
        }
    })
    .map_err(Box::new)
}

/// The request body as a JSON object whose values keep their text (a reset's extra fields
/// reach the environment as the client wrote them); an empty body is `{}` when `empty_ok`.
fn body_raw_object(
    body: Result<Bytes, BytesRejection>,
    empty_ok: bool,
) -> Result<RawObject, Box<Response>> {
    let bytes = body_bytes(body)?;
    if empty_ok && bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(RawObject::empty());
    }
    let raw: Box<RawValue> = serde_json::from_slice(&bytes)
        .map_err(|err| invalid_body(FieldError::at(&[], format!("Invalid JSON: {err}"))))?;
    RawObject::from_raw(&raw).map_err(|kind| {
        Box::new(invalid_body(FieldError::at(
            &[],
            format!("the request body must be a JSON object, not {kind}"),
        )))
    })
}

/// The request body as a parsed JSON object; an empty body is `{}` when `empty_ok`.
fn body_object(
    body: Result<Bytes, BytesRejection>,
    empty_ok: bool,
) -> Result<Map<String, Value>, Box<Response>> {
    let bytes = body_bytes(body)?;
    if empty_ok && bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|err| invalid_body(FieldError::at(&[], format!("Invalid JSON: {err}"))))?;
    match value {
        Value::Object(object) => Ok(object),
        other => Err(Box::new(invalid_body(FieldError::at(
            &[],
            format!(
                "the request body must be a JSON object, not {}",
                type_name(&other)
            ),
        )))),
    }
}

fn outcome_response(result: Result<Outcome, SessionError>) -> Response {
    match result {
        Ok(outcome) => outcome.with_payload(|payload| axum::Json(payload).into_response()),
        Err(err) => session_error(err),
    }
}

fn session_error(err: SessionError) -> Response {
    let mut extra = Map::new();
    if let Some(kind) = err.kind() {
        extra.insert("kind".to_owned(), json!(kind.as_str()));
    }
    let status = match &err {
        SessionError::Invalid(_) | SessionError::NoEpisodeYet(_) => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        SessionError::RecordQuota(_) => StatusCode::INSUFFICIENT_STORAGE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, err.to_string(), extra)
}

/// `POST /reset`: a fresh environment, reset, returned, dropped (OpenEnv's semantics). It
/// takes a session slot while it runs. The episode is not recorded; an `episode_id` given is
/// the one the answer names.
pub async fn reset(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let _slot = match state.admission.admit_session(tenant) {
        Ok(slot) => slot,
        Err(full) => return at_capacity(full),
    };
    let object = match body_raw_object(body, true) {
        Ok(object) => object,
        Err(response) => return *response,
    };
    let fields = match ResetFields::parse(&object) {
        Ok(fields) => fields,
        Err(err) => return invalid_body(err),
    };
    // Not recorded, so the tenant does not matter.
    let mut session = Session::new(
        state.new_session_id(),
        state.sessions_without_recording(),
        Tenant(0),
    );
    outcome_response(session.reset(fields).await)
}

/// `POST /step`: `{"action": {"message": ...}, "env_id"?, "seed"?}` on a fresh environment
/// (OpenEnv's semantics: no reset first). It takes a session slot while it runs.
pub async fn step(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let _slot = match state.admission.admit_session(tenant) {
        Ok(slot) => slot,
        Err(full) => return at_capacity(full),
    };
    let object = match body_object(body, false) {
        Ok(object) => object,
        Err(response) => return *response,
    };
    let mut action = None;
    let mut env_id = None;
    let mut seed = 0;
    for (key, value) in &object {
        match (key.as_str(), value) {
            ("action", value) => match SpadeAction::parse(value) {
                Ok(a) => action = Some(a),
                Err(err) => return invalid_body(err.under("action")),
            },
            ("env_id", Value::String(id)) => env_id = Some(id.clone()),
            ("seed", value) if value.as_u64().is_some() => seed = value.as_u64().unwrap_or(0),
            ("timeout_s" | "request_id", _) => {}
            (other, _) => {
                return invalid_body(FieldError::at(
                    &[other],
                    format!(
                        "unknown or mistyped step field '{other}' (spade accepts action, env_id, seed, timeout_s, request_id)"
                    ),
                ));
            }
        }
    }
    let Some(action) = action else {
        return invalid_body(FieldError::at(
            &["action"],
            "the request has no 'action' (send {\"action\": {\"message\": \"...\"}})",
        ));
    };
    outcome_response(stateless_step(&state.sessions, env_id.as_deref(), seed, action).await)
}

/// `POST /sessions/{id}/fork` (a spade extension, see [`crate::fork`]): copies of held
/// session `id`'s running episode, as new held sessions of the same tenant. 200 with
/// `{"sessions": [{session_id, episode_id}, ...]}`; 404 for an unknown session (or another
/// tenant's); 422 for a bad body or a session that cannot be forked; 503 when the copies do
/// not all fit in the free session slots.
pub async fn fork_session(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let object = match body_object(body, true) {
        Ok(object) => object,
        Err(response) => return *response,
    };
    let request = match ForkRequest::parse(&object) {
        Ok(request) => request,
        Err(err) => return invalid_body(err),
    };
    let Some(parent) = state.held.get(&id, tenant) else {
        return plain_error(
            StatusCode::NOT_FOUND,
            format!(
                "Unknown session_id: {id} (sessions to fork over HTTP are held ones: created with openenv/session/create or by a fork)"
            ),
        );
    };
    match crate::fork::fork(&state, &parent, tenant, &request).await {
        Ok(copies) => axum::Json(json!({"sessions": Forked::to_json(&copies)})).into_response(),
        Err(ForkFailure::Capacity(full)) => at_capacity(full),
        Err(ForkFailure::Session(err)) => session_error(err),
    }
}

/// `POST /mcp`: one JSON-RPC request of OpenEnv's MCP mode (see [`crate::mcp`]). As in
/// OpenEnv's server, every answer is HTTP 200 with a JSON-RPC result or error.
pub async fn mcp(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let bytes = match body {
        Ok(bytes) => bytes,
        Err(rejection) => {
            return plain_error(
                rejection.status(),
                format!("cannot read the request body: {rejection}"),
            );
        }
    };
    let response = match serde_json::from_slice::<Value>(&bytes) {
        Err(err) => Some(crate::mcp::failure(
            &Value::Null,
            crate::mcp::RpcCode::ParseError,
            &format!("Parse error: {err}"),
            None,
        )),
        Ok(value) => match crate::mcp::RpcRequest::parse(&value) {
            Ok(request) => crate::mcp::dispatch(&state, request, None, tenant).await,
            Err(response) => Some(response),
        },
    };
    match response {
        // A notification: JSON-RPC 2.0 never answers one; 202 as MCP's HTTP transport does.
        None => StatusCode::ACCEPTED.into_response(),
        Some(response) => (
            [(header::CONTENT_TYPE, "application/json")],
            String::from(Box::<str>::from(response)),
        )
            .into_response(),
    }
}

/// `GET /envs`: every registered environment and its verdict.
pub async fn list_envs(State(state): State<Arc<AppState>>) -> Response {
    let envs: Vec<Value> = state
        .sessions
        .registry
        .list()
        .iter()
        .map(|r| r.summary())
        .collect();
    axum::Json(json!({"envs": envs})).into_response()
}

/// `GET /envs/{id}`: one registration with its full check report.
pub async fn get_env(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match state.sessions.registry.resolve(Some(&id)) {
        Ok(r) => axum::Json(r.to_json()).into_response(),
        Err(err) => registry_error(err),
    }
}

/// `DELETE /envs/{id}`: removes a registration of the caller's token (running episodes of it
/// go on).
pub async fn delete_env(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Response {
    match state.sessions.registry.delete(tenant, &id) {
        Ok(r) => axum::Json(json!({"deleted": r.id, "sha256": r.sha256})).into_response(),
        Err(err) => registry_error(err),
    }
}

fn registry_error(err: RegistryError) -> Response {
    let status = match &err {
        RegistryError::Unknown { .. } | RegistryError::None => StatusCode::NOT_FOUND,
        RegistryError::Conflict { .. } => StatusCode::CONFLICT,
        RegistryError::Checking { .. } => StatusCode::SERVICE_UNAVAILABLE,
        RegistryError::Full { .. } | RegistryError::QuotaFull { .. } => {
            StatusCode::INSUFFICIENT_STORAGE
        }
        RegistryError::Forbidden(_) => StatusCode::FORBIDDEN,
        RegistryError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    plain_error(status, err.to_string())
}

/// `POST /envs` `{"source": "...", "id"?: "..."}`: checks and registers a source; answers its id
/// and the `spade check` verdict (201 when new, 200 when already registered).
pub async fn register_env(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let object = match body_object(body, false) {
        Ok(object) => object,
        Err(response) => return *response,
    };
    let mut source = None;
    let mut id = None;
    for (key, value) in &object {
        match (key.as_str(), value) {
            ("source", Value::String(s)) => source = Some(s.clone()),
            ("id", Value::String(s)) => id = Some(s.clone()),
            ("id", Value::Null) => {}
            (other, value) => {
                return plain_error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "unknown or mistyped field '{other}' ({}); send {{\"source\": \"<python>\", \"id\": \"<optional id>\"}}",
                        type_name(value)
                    ),
                );
            }
        }
    }
    let Some(source) = source else {
        return plain_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the request has no 'source' (send {\"source\": \"<python>\", \"id\": \"<optional id>\"})",
        );
    };
    match state
        .sessions
        .registry
        .register(tenant, id.as_deref(), &source)
        .await
    {
        Ok((r, new)) => {
            let status = if new {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            (status, axum::Json(r.to_json())).into_response()
        }
        Err(err) => registry_error(err),
    }
}

/// `GET /trajectories/{episode_id}`: the caller's episode's trajectory file (JSON Lines),
/// complete once the episode ended (terminated, truncated, the sandbox died, the next reset, or
/// the session closed). Only the tenant whose session played the episode gets it: for another
/// token it is 404 with the same body as an id never used (see [`crate::recordings`]). The
/// file is streamed, as much of it as was written when the request came; with
/// `--max-downloads` downloads running, one more is 503 at once.
pub async fn trajectory(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Response {
    let Some(recordings) = &state.sessions.recordings else {
        return plain_error(
            StatusCode::NOT_FOUND,
            "sessions are not recorded: start `spade serve` with --record-dir DIR",
        );
    };
    if let Err(message) = check_id(&id, "episode id") {
        return plain_error(StatusCode::UNPROCESSABLE_ENTITY, message);
    }
    let missing = || {
        plain_error(
            StatusCode::NOT_FOUND,
            format!("no trajectory for episode '{id}'"),
        )
    };
    let Some(path) = recordings.path(tenant, &id) else {
        return missing();
    };
    let Some(slot) = recordings.download_slot() else {
        let mut response = plain_error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} trajectory downloads are running, the most at once (--max-downloads); retry when one has finished",
                recordings.max_downloads()
            ),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return response;
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return missing(),
        Err(err) => {
            return plain_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the trajectory of '{id}': {err}"),
            );
        }
    };
    let len = match file.metadata().await {
        Ok(meta) if meta.is_file() => meta.len(),
        Ok(_) => return missing(),
        Err(err) => {
            return plain_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the trajectory of '{id}': {err}"),
            );
        }
    };
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_owned()),
            (header::CONTENT_LENGTH, len.to_string()),
        ],
        axum::body::Body::from_stream(file_chunks(file, len, slot)),
    )
        .into_response()
}

/// The first `len` bytes of `file` in [`crate::recordings::DOWNLOAD_CHUNK`] pieces, holding
/// the download slot `slot` until the last one is sent (or the client goes away).
fn file_chunks(
    file: tokio::fs::File,
    len: u64,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    use tokio::io::AsyncReadExt;
    let reader = file.take(len);
    futures_util::stream::unfold(Some((reader, slot)), |state| async move {
        let (mut reader, slot) = state?;
        let mut chunk = vec![0u8; crate::recordings::DOWNLOAD_CHUNK];
        match reader.read(&mut chunk).await {
            Ok(0) => None,
            Ok(n) => {
                chunk.truncate(n);
                Some((Ok(Bytes::from(chunk)), Some((reader, slot))))
            }
            Err(err) => Some((Err(err), None)),
        }
    })
}

/// Any other path.
pub async fn not_found() -> Response {
    plain_error(StatusCode::NOT_FOUND, "Not Found")
}
