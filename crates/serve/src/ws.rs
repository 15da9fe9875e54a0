//! The WebSocket session endpoint (`/ws`): one session per connection (or, with
//! `?session_id=`, a session the server holds, created over `POST /mcp`), one sandbox per
//! episode, one answer per message.

use std::sync::Arc;
use std::time::Duration;

use crate::admission::AtCapacity;
use crate::fork::{self, ForkFailure, ForkRequest, Forked};
use crate::held::{AttachError, Attached, SharedSession};
use crate::mcp::{self, RpcRequest};
use crate::protocol::{
    ErrorCode, FieldError, NotAnObject, RawObject, ResetFields, StepAction, error_frame,
    observation_frame, state_frame, type_name,
};
use crate::server::AppState;
use crate::session::SessionError;
use axum::extract::ws::{CloseFrame, Message, WebSocket, close_code};
use serde_json::{Map, Value, json};

/// What the loop does after answering a message.
enum Next {
    Continue,
    /// Close the connection with this code and reason.
    Close(u16, String),
    /// The connection is gone or cannot take a frame (the client stopped reading): end the
    /// session without a closing handshake.
    Drop,
}

/// A frame could not be sent within the deadline, or the connection broke.
struct Unsendable;

/// Refuses a connection when the server is full: OpenEnv's capacity error, then a close. Each
/// frame gets `deadline` to be sent (see [`send`]).
pub async fn refuse(mut socket: WebSocket, full: AtCapacity, deadline: Option<Duration>) {
    let mut extra = Map::new();
    extra.insert("active_sessions".to_owned(), json!(full.active));
    extra.insert("max_sessions".to_owned(), json!(full.max));
    let message = full.message();
    let frame = error_frame(ErrorCode::CapacityReached, &message, extra);
    if send(&mut socket, frame, deadline).await.is_ok() {
        close(
            &mut socket,
            close_code::AGAIN,
            "server at capacity",
            deadline,
        )
        .await;
    }
}

/// Refuses `/ws?session_id=` for a session that is unknown or already attached: OpenEnv's
/// `SESSION_ERROR`, then a close.
pub async fn refuse_attach(mut socket: WebSocket, err: AttachError, deadline: Option<Duration>) {
    let frame = error_frame(ErrorCode::SessionError, &err.to_string(), Map::new());
    if send(&mut socket, frame, deadline).await.is_ok() {
        close(
            &mut socket,
            close_code::POLICY,
            "cannot attach to the session",
            deadline,
        )
        .await;
    }
}

/// Whose session a connection runs.
pub enum Attachment {
    /// The connection's own: its episode ends when the connection does.
    Own,
    /// A session the server holds (`/ws?session_id=`): it outlives the connection, until
    /// `openenv/session/close` or the idle timeout. The guard detaches it when dropped.
    Held(Attached),
}

/// Runs one session until the client closes it, it idles out, its sandbox dies, the client
/// stops reading (a frame not sent within the idle timeout) or the server shuts down.
pub async fn run(
    mut socket: WebSocket,
    state: Arc<AppState>,
    shared: Arc<SharedSession>,
    attachment: Attachment,
) {
    let mut shutdown = state.shutdown.clone();
    let idle = state.config.idle_timeout;
    let next = loop {
        if *shutdown.borrow() {
            break shutting_down(&mut socket, idle).await;
        }
        let received = tokio::select! {
            received = recv(&mut socket, idle) => Some(received),
            _ = shutdown.changed() => None,
        };
        let Some(received) = received else {
            break shutting_down(&mut socket, idle).await;
        };
        let text = match received {
            // A held session may have been used over HTTP meanwhile (tools/call).
            Received::Idle if idle.is_some_and(|limit| shared.idle_for() < limit) => continue,
            Received::Idle => {
                let seconds = idle.map(|d| d.as_secs_f64()).unwrap_or(0.0);
                let message = format!(
                    "session idle for more than {seconds} s (--session-idle-timeout); it is closed"
                );
                let frame = error_frame(ErrorCode::SessionError, &message, Map::new());
                match send(&mut socket, frame, idle).await {
                    Ok(()) => break Next::Close(close_code::NORMAL, "idle timeout".to_owned()),
                    Err(Unsendable) => break Next::Drop,
                }
            }
            Received::Gone => break Next::Drop,
            Received::TooBig => {
                break Next::Close(
                    close_code::SIZE,
                    "message over 4x --max-message-bytes".to_owned(),
                );
            }
            Received::Text(text) => text,
            Received::Binary => {
                let message =
                    "binary frames are not supported: send each message as a JSON text frame";
                let frame = error_frame(ErrorCode::InvalidJson, message, Map::new());
                match send(&mut socket, frame, idle).await {
                    Ok(()) => continue,
                    Err(Unsendable) => break Next::Drop,
                }
            }
        };
        let (answer, next) = handle(&state, &shared, &text).await;
        if let Some(answer) = answer
            && send(&mut socket, answer, idle).await.is_err()
        {
            break Next::Drop;
        }
        match next {
            Next::Continue => {}
            close => break close,
        }
    };
    let finished = match attachment {
        Attachment::Own => shared.lock().await.finish(),
        // Dropping the guard detaches the session.
        Attachment::Held(attached) => {
            drop(attached);
            Ok(())
        }
    };
    if let Next::Close(code, reason) = next {
        if let Err(err) = finished {
            let frame = error_frame(ErrorCode::SessionError, &err.to_string(), Map::new());
            if send(&mut socket, frame, idle).await.is_err() {
                return;
            }
        }
        close(&mut socket, code, &reason, idle).await;
    }
}

async fn shutting_down(socket: &mut WebSocket, deadline: Option<Duration>) -> Next {
    let message = "the server is shutting down; this session is closed";
    let frame = error_frame(ErrorCode::SessionError, message, Map::new());
    match send(socket, frame, deadline).await {
        Ok(()) => Next::Close(close_code::AWAY, "server shutting down".to_owned()),
        Err(Unsendable) => Next::Drop,
    }
}

enum Received {
    Text(String),
    Binary,
    Idle,
    /// The client closed the connection or it broke.
    Gone,
    /// A message over the hard size cap (4x the limit): the connection is closed with 1009.
    TooBig,
}

/// The next message, or [`Received::Idle`] when none came within `idle`. Only messages count:
/// pings and pongs are answered (by the WebSocket layer) but do not move the deadline, so a
/// client library that pings on its own does not keep an abandoned session alive.
async fn recv(socket: &mut WebSocket, idle: Option<Duration>) -> Received {
    let deadline = idle.map(|limit| tokio::time::Instant::now() + limit);
    loop {
        let next = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, socket.recv()).await {
                Ok(next) => next,
                Err(_) => return Received::Idle,
            },
            None => socket.recv().await,
        };
        match next {
            Some(Ok(Message::Text(text))) => return Received::Text(text.as_str().to_owned()),
            Some(Ok(Message::Binary(_))) => return Received::Binary,
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Err(err)) if is_capacity(&err) => return Received::TooBig,
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return Received::Gone,
        }
    }
}

/// Whether a receive failed on a message or frame over the size cap.
fn is_capacity(err: &axum::Error) -> bool {
    let inner = std::error::Error::source(err);
    matches!(
        inner.and_then(|e| e.downcast_ref::<tungstenite::Error>()),
        Some(tungstenite::Error::Capacity(_))
    )
}

/// Sends one text frame. A frame that cannot be sent within `deadline` (the idle timeout: a
/// client that stopped reading fills the socket's buffers) or on a broken connection is
/// [`Unsendable`], and the session ends.
async fn send(
    socket: &mut WebSocket,
    text: String,
    deadline: Option<Duration>,
) -> Result<(), Unsendable> {
    within(deadline, socket.send(Message::Text(text.into()))).await
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str, deadline: Option<Duration>) {
    let frame = Message::Close(Some(CloseFrame {
        code,
        reason: reason.to_owned().into(),
    }));
    let _ = within(deadline, socket.send(frame)).await;
}

async fn within(
    deadline: Option<Duration>,
    sending: impl std::future::Future<Output = Result<(), axum::Error>>,
) -> Result<(), Unsendable> {
    let sent = match deadline {
        Some(limit) => tokio::time::timeout(limit, sending)
            .await
            .map_err(|_| Unsendable)?,
        None => sending.await,
    };
    sent.map_err(|_| Unsendable)
}

/// Answers one message.
async fn handle(
    state: &Arc<AppState>,
    shared: &Arc<SharedSession>,
    text: &str,
) -> (Option<String>, Next) {
    let limit = state.config.max_message_bytes;
    let error = |code, message: String| {
        let mut extra = Map::new();
        if code == ErrorCode::ValidationError {
            extra.insert(
                "errors".to_owned(),
                json!([FieldError::at(&[], message.clone()).to_json()]),
            );
        }
        (Some(error_frame(code, &message, extra)), Next::Continue)
    };
    // A field's error: OpenEnv's "Invalid message" with pydantic's `errors` list.
    let invalid = |err: FieldError| {
        let mut extra = Map::new();
        extra.insert(
            "errors".to_owned(),
            json!([err.clone().under("data").to_json()]),
        );
        let message = format!("Invalid message: {}", err.msg);
        (
            Some(error_frame(ErrorCode::ValidationError, &message, extra)),
            Next::Continue,
        )
    };
    if text.len() > limit {
        return error(
            ErrorCode::ValidationError,
            format!(
                "message of {} bytes is over the limit of {limit} bytes (--max-message-bytes)",
                text.len()
            ),
        );
    }
    // Kept as text, so that a reset's extra fields reach the environment as written.
    let object = match RawObject::parse(text) {
        Ok(object) => object,
        Err(NotAnObject::Json(err)) => {
            return error(ErrorCode::InvalidJson, format!("Invalid JSON: {err}"));
        }
        Err(NotAnObject::Other(kind)) => {
            return error(
                ErrorCode::ValidationError,
                format!("a message must be a JSON object with a 'type', not {kind}"),
            );
        }
    };
    // Every member but a reset's data is parsed where it is used; only a number beyond
    // `f64` fails to parse, and it is refused as JSON that cannot be read.
    let parsed = |raw: &serde_json::value::RawValue| serde_json::from_str::<Value>(raw.get());
    let kind = match object.get("type").map(parsed) {
        Some(Err(err)) => return error(ErrorCode::InvalidJson, format!("Invalid JSON: {err}")),
        Some(Ok(kind)) => kind,
        None => {
            return error(
                ErrorCode::UnknownType,
                "Unknown message type: (no 'type' field)".to_owned(),
            );
        }
    };
    let kind = match &kind {
        Value::String(kind) => kind.as_str(),
        other => {
            return error(
                ErrorCode::ValidationError,
                format!(
                    "the message's 'type' must be a string, not {}",
                    type_name(other)
                ),
            );
        }
    };
    if !matches!(kind, "reset" | "step" | "state" | "close" | "mcp" | "fork") {
        return error(
            ErrorCode::UnknownType,
            format!(
                "Unknown message type: {kind} (expected reset, step, state, mcp, fork or close)"
            ),
        );
    }
    let allowed: &[&str] = if matches!(kind, "reset" | "step" | "mcp" | "fork") {
        &["type", "data"]
    } else {
        &["type"]
    };
    if let Some(extra) = object.keys().find(|k| !allowed.contains(k)) {
        return error(
            ErrorCode::ValidationError,
            format!("Invalid message: unknown field '{extra}' in a {kind} message"),
        );
    }
    // A reset's data stays text (above); the others are parsed here.
    let data = match object.get("data").filter(|_| kind != "reset").map(parsed) {
        Some(Err(err)) => return error(ErrorCode::InvalidJson, format!("Invalid JSON: {err}")),
        Some(Ok(data)) => Some(data),
        None => None,
    };
    match kind {
        "reset" => {
            let data = match object.get("data").map(RawObject::from_raw) {
                None | Some(Err("null")) => RawObject::empty(),
                Some(Ok(data)) => data,
                Some(Err(other)) => {
                    return error(
                        ErrorCode::ValidationError,
                        format!("Invalid message: reset 'data' must be an object, not {other}"),
                    );
                }
            };
            let fields = match ResetFields::parse(&data) {
                Ok(fields) => fields,
                Err(err) => return invalid(err),
            };
            answer(shared.lock().await.reset(fields).await)
        }
        "step" => {
            let Some(data) = data.as_ref() else {
                return error(
                    ErrorCode::ValidationError,
                    "Invalid message: a step message needs 'data' (the action, {\"message\": \"...\"})".to_owned(),
                );
            };
            let action = match StepAction::parse(data) {
                Ok(action) => action,
                Err(err) => return invalid(err),
            };
            let mut session = shared.lock().await;
            match action {
                StepAction::Reply(action) => answer(session.step(action).await),
                StepAction::CallTool(call) => answer(session.call_tool(&call).await),
                StepAction::ListTools => match session.tools(None) {
                    Ok((_, tools)) => {
                        let done = session.episode_over();
                        let frame = json!({"type": "observation", "data": {
                            "observation": {"tools": tools},
                            "reward": null, "done": done, "metadata": {},
                        }});
                        (Some(frame.to_string()), Next::Continue)
                    }
                    Err(err) => answer(Err(err)),
                },
            }
        }
        "mcp" => {
            let response = match data.as_ref() {
                Some(data) => match RpcRequest::parse(data) {
                    Ok(request) => {
                        mcp::dispatch(state, request, Some(shared), shared.owner()).await
                    }
                    Err(response) => Some(response),
                },
                None => {
                    return invalid(FieldError::at(
                        &[],
                        "an mcp message needs 'data' (a JSON-RPC request)",
                    ));
                }
            };
            // A notification gets no answer.
            let frame =
                response.map(|response| format!(r#"{{"type":"mcp","data":{}}}"#, response.get()));
            (frame, Next::Continue)
        }
        "fork" => {
            let empty = Map::new();
            let data = match data.as_ref() {
                None | Some(Value::Null) => &empty,
                Some(Value::Object(data)) => data,
                Some(other) => {
                    return invalid(FieldError::at(
                        &[],
                        format!("fork 'data' must be an object, not {}", type_name(other)),
                    ));
                }
            };
            let request = match ForkRequest::parse(data) {
                Ok(request) => request,
                Err(err) => return invalid(err),
            };
            match fork::fork(state, shared, shared.owner(), &request).await {
                Ok(copies) => {
                    let frame =
                        json!({"type": "fork", "data": {"sessions": Forked::to_json(&copies)}});
                    (Some(frame.to_string()), Next::Continue)
                }
                Err(ForkFailure::Capacity(full)) => {
                    let mut extra = Map::new();
                    extra.insert("active_sessions".to_owned(), json!(full.active));
                    extra.insert("max_sessions".to_owned(), json!(full.max));
                    (
                        Some(error_frame(
                            ErrorCode::CapacityReached,
                            &full.message(),
                            extra,
                        )),
                        Next::Continue,
                    )
                }
                // A fork's failure leaves the session as it was, whatever it was.
                Err(ForkFailure::Session(err)) => {
                    let code = match err {
                        SessionError::Invalid(_) => ErrorCode::ValidationError,
                        _ => ErrorCode::ExecutionError,
                    };
                    error(code, err.to_string())
                }
            }
        }
        "state" => (
            Some(state_frame(&shared.lock().await.state())),
            Next::Continue,
        ),
        _ => (
            None,
            Next::Close(close_code::NORMAL, "closed by the client".to_owned()),
        ),
    }
}

fn answer(result: Result<crate::session::Outcome, SessionError>) -> (Option<String>, Next) {
    match result {
        Ok(outcome) => (
            Some(outcome.with_payload(observation_frame)),
            Next::Continue,
        ),
        Err(err) => {
            let mut extra = Map::new();
            if let Some(kind) = err.kind() {
                extra.insert("kind".to_owned(), json!(kind.as_str()));
            }
            let code = match &err {
                SessionError::Invalid(_) => ErrorCode::ValidationError,
                SessionError::NoEpisodeYet(_) => ErrorCode::SessionError,
                _ => ErrorCode::ExecutionError,
            };
            let frame = error_frame(code, &err.to_string(), extra);
            let next = match (&err, err.kind()) {
                (SessionError::Dead { .. }, Some(kind)) => {
                    Next::Close(close_code::NORMAL, format!("sandbox died: {kind}"))
                }
                _ => Next::Continue,
            };
            (Some(frame), next)
        }
    }
}
