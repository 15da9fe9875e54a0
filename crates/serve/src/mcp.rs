//! OpenEnv's MCP mode: JSON-RPC 2.0 requests over `POST /mcp` and in WebSocket `mcp` messages,
//! as `openenv` 0.10's server answers them (`http_server.py`, `mcp_handler`) and its
//! `MCPToolClient` sends them.
//!
//! Methods: `tools/list` and `tools/call` (on the tools of a tool-use environment, see
//! [`crate::tools`]), and OpenEnv's session methods `openenv/session/create` (a session the
//! server holds, which a WebSocket attaches to with `/ws?session_id=`) and
//! `openenv/session/close`. A request names its session with `params.session_id`; in a
//! WebSocket `mcp` message the connection's session is used. Without a session, `tools/list`
//! reads the registration of `params.env_id` (or the only environment), and `tools/call` runs on
//! a fresh sandbox, as `POST /step` does.

use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::held::{Closed, SharedSession};
use crate::protocol::{ErrorCode, ObservationPayload, SpadeAction, type_name};
use crate::registry::Tenant;
use crate::server::AppState;
use crate::session::{Outcome, Session, SessionError, env_tools, stateless_step, tool_schemas};
use crate::tools::ToolCall;

/// JSON-RPC 2.0's error codes, as OpenEnv's `JsonRpcErrorCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcCode {
    ParseError = -32700,
    InvalidRequest = -32600,
    MethodNotFound = -32601,
    InvalidParams = -32602,
    InternalError = -32603,
    ServerError = -32000,
}

/// One JSON-RPC request.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcRequest {
    /// `null`, a string or an integer, echoed in the response; `None` for a notification (a
    /// request without `id`), which JSON-RPC 2.0 says is never answered.
    pub id: Option<Value>,
    pub method: String,
    pub params: Map<String, Value>,
}

/// A JSON document as text. Responses are text, not [`Value`]s: a `tools/call` result carries
/// the environment's info verbatim, and an environment controls its numbers (`math.factorial(200)`
/// is beyond what a `Value` holds without losing it).
pub type Json = Box<RawValue>;

/// `value` as JSON text.
fn encode(value: &impl Serialize) -> Json {
    // Serialising `Value`s, strings, numbers and `RawValue`s into a `String` cannot fail: every
    // map key is a string and no `Serialize` impl here returns an error.
    serde_json::value::to_raw_value(value).expect("responses are values, strings and raw JSON")
}

/// A success response.
pub fn success(id: &Value, result: &RawValue) -> Json {
    #[derive(Serialize)]
    struct Success<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a RawValue,
    }
    encode(&Success {
        jsonrpc: "2.0",
        id,
        result,
    })
}

/// A success response whose result is `result`.
fn ok(id: &Value, result: Value) -> Json {
    success(id, &encode(&result))
}

/// An error response (`data` only when given).
pub fn failure(id: &Value, code: RpcCode, message: &str, data: Option<Value>) -> Json {
    let mut error = json!({"code": code as i32, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    encode(&json!({"jsonrpc": "2.0", "id": id, "error": error}))
}

impl RpcRequest {
    /// Reads a request, as OpenEnv's `JsonRpcRequest` (`jsonrpc` "2.0", `method`, `params` an
    /// object, `id` null, a string or an integer, nothing else); the error is the response.
    pub fn parse(value: &Value) -> Result<RpcRequest, Json> {
        let invalid = |message: String| {
            failure(
                &Value::Null,
                RpcCode::InvalidRequest,
                &format!("Invalid request: {message}"),
                None,
            )
        };
        let Some(object) = value.as_object() else {
            return Err(invalid(format!(
                "a JSON-RPC request is an object, not {}",
                type_name(value)
            )));
        };
        let id = match object.get("id") {
            None => None,
            Some(id @ (Value::Null | Value::String(_))) => Some(id.clone()),
            Some(id @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(id.clone()),
            Some(other) => {
                return Err(invalid(format!(
                    "'id' must be a string, an integer or null, not {}",
                    type_name(other)
                )));
            }
        };
        if object.get("jsonrpc") != Some(&json!("2.0")) {
            return Err(invalid("'jsonrpc' must be \"2.0\"".to_owned()));
        }
        let method = match object.get("method") {
            Some(Value::String(method)) => method.clone(),
            _ => return Err(invalid("'method' must be a string".to_owned())),
        };
        let params = match object.get("params") {
            None => Map::new(),
            Some(Value::Object(params)) => params.clone(),
            Some(other) => {
                return Err(failure(
                    id.as_ref().unwrap_or(&Value::Null),
                    RpcCode::InvalidParams,
                    &format!("Params must be an object, not {}", type_name(other)),
                    None,
                ));
            }
        };
        if let Some(extra) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "jsonrpc" | "method" | "params" | "id"))
        {
            return Err(invalid(format!("unknown field '{extra}'")));
        }
        Ok(RpcRequest { id, method, params })
    }
}

/// Runs one request of `tenant` and answers it; a notification runs and gets no answer.
/// `current` is the session of the WebSocket the request came on, if any.
pub async fn dispatch(
    state: &Arc<AppState>,
    request: RpcRequest,
    current: Option<&Arc<SharedSession>>,
    tenant: Tenant,
) -> Option<Json> {
    let id = request.id.clone();
    if id.is_none() && request.method == "openenv/session/create" {
        // A session created by a notification could never be named: its id is the answer.
        return None;
    }
    let response = answer(
        state,
        &request,
        id.as_ref().unwrap_or(&Value::Null),
        current,
        tenant,
    );
    let response = response.await;
    id.map(|_| response)
}

async fn answer(
    state: &Arc<AppState>,
    request: &RpcRequest,
    id: &Value,
    current: Option<&Arc<SharedSession>>,
    tenant: Tenant,
) -> Json {
    match request.method.as_str() {
        "openenv/session/create" => create_session(state, id, current, tenant),
        "openenv/session/close" => close_session(state, id, &request.params, current, tenant),
        "tools/list" | "tools/call" => {
            let session = match target(state, &request.params, current, tenant) {
                Ok(session) => session,
                Err(response) => return response_for(id, response),
            };
            let result = if request.method == "tools/list" {
                list_tools(state, &request.params, session.as_ref()).await
            } else {
                call_tool(state, &request.params, session.as_ref(), tenant).await
            };
            match result {
                Ok(result) => success(id, &result),
                Err(err) => response_for(id, err),
            }
        }
        other => failure(
            id,
            RpcCode::MethodNotFound,
            &format!(
                "Method not found: {other} (spade answers tools/list, tools/call, openenv/session/create and openenv/session/close)"
            ),
            None,
        ),
    }
}

/// A failed method: its code, message and data.
struct RpcError(RpcCode, String, Option<Value>);

fn response_for(id: &Value, RpcError(code, message, data): RpcError) -> Json {
    failure(id, code, &message, data)
}

impl From<SessionError> for RpcError {
    fn from(err: SessionError) -> RpcError {
        let (code, wire) = match &err {
            SessionError::Invalid(_) => (RpcCode::InvalidParams, ErrorCode::ValidationError),
            SessionError::NoEpisodeYet(_) => (RpcCode::InvalidRequest, ErrorCode::SessionError),
            _ => (RpcCode::InternalError, ErrorCode::ExecutionError),
        };
        let mut data = json!({"code": wire.as_str()});
        if let Some(kind) = err.kind() {
            data["kind"] = json!(kind.as_str());
        }
        RpcError(code, err.to_string(), Some(data))
    }
}

fn create_session(
    state: &Arc<AppState>,
    id: &Value,
    current: Option<&Arc<SharedSession>>,
    tenant: Tenant,
) -> Json {
    if let Some(current) = current {
        return ok(id, json!({"session_id": current.id()}));
    }
    let slot = match state.admission.admit_session(tenant) {
        Ok(slot) => slot,
        Err(full) => {
            return failure(
                id,
                RpcCode::ServerError,
                &full.message(),
                Some(json!({"active_sessions": full.active, "max_sessions": full.max})),
            );
        }
    };
    let session = Session::new(state.new_session_id(), state.sessions.clone(), tenant);
    let shared = SharedSession::new(session, slot, tenant);
    let session_id = shared.id().to_owned();
    state.held.insert(shared);
    ok(id, json!({"session_id": session_id}))
}

fn close_session(
    state: &Arc<AppState>,
    id: &Value,
    params: &Map<String, Value>,
    current: Option<&Arc<SharedSession>>,
    tenant: Tenant,
) -> Json {
    let Some(Value::String(target)) = params.get("session_id") else {
        return failure(
            id,
            RpcCode::InvalidParams,
            "Invalid params - 'session_id' is required",
            None,
        );
    };
    if current.is_some_and(|c| c.id() == target) {
        return failure(
            id,
            RpcCode::InvalidRequest,
            "Cannot close active WebSocket-managed session via MCP method",
            None,
        );
    }
    match state.held.close(target, tenant) {
        Some(Closed::Now) => ok(id, json!({"session_id": target, "closed": true})),
        Some(Closed::WhenDetached) => ok(
            id,
            json!({"session_id": target, "closed": false, "closing": true}),
        ),
        None => failure(
            id,
            RpcCode::InvalidParams,
            &format!("Unknown session_id: {target}"),
            None,
        ),
    }
}

/// The session a tools request runs in: the WebSocket's, the one `params.session_id` names, or
/// none.
fn target(
    state: &Arc<AppState>,
    params: &Map<String, Value>,
    current: Option<&Arc<SharedSession>>,
    tenant: Tenant,
) -> Result<Option<Arc<SharedSession>>, RpcError> {
    if let Some(current) = current {
        return Ok(Some(current.clone()));
    }
    match params.get("session_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(requested)) => match state.held.get(requested, tenant) {
            Some(session) => Ok(Some(session)),
            None => Err(RpcError(
                RpcCode::InvalidParams,
                format!("Unknown session_id: {requested}"),
                None,
            )),
        },
        Some(other) => Err(RpcError(
            RpcCode::InvalidParams,
            format!("'session_id' must be a string, not {}", type_name(other)),
            None,
        )),
    }
}

fn env_id(params: &Map<String, Value>) -> Result<Option<&str>, RpcError> {
    match params.get("env_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) => Ok(Some(id)),
        Some(other) => Err(RpcError(
            RpcCode::InvalidParams,
            format!("'env_id' must be a string, not {}", type_name(other)),
            None,
        )),
    }
}

async fn list_tools(
    state: &Arc<AppState>,
    params: &Map<String, Value>,
    session: Option<&Arc<SharedSession>>,
) -> Result<Json, RpcError> {
    let env_id = env_id(params)?;
    let (env, tools) = match session {
        Some(session) => session.lock().await.tools(env_id)?,
        None => {
            let registration = state.sessions.playable(env_id)?;
            env_tools(&registration)?
        }
    };
    Ok(encode(&json!({"tools": tools, "env_id": env})))
}

async fn call_tool(
    state: &Arc<AppState>,
    params: &Map<String, Value>,
    session: Option<&Arc<SharedSession>>,
    tenant: Tenant,
) -> Result<Json, RpcError> {
    let call = ToolCall::from_params(params)
        .map_err(|message| RpcError(RpcCode::InvalidParams, message, None))?;
    let outcome = match session {
        Some(session) => session.lock().await.call_tool(&call).await?,
        None => stateless_call(state, params, &call, tenant).await?,
    };
    Ok(call_result(&outcome))
}

/// A tool call on a fresh sandbox (seeded with `params.seed`, default 0; no reset), as
/// `POST /step` runs a step. It takes a session slot while it runs.
async fn stateless_call(
    state: &Arc<AppState>,
    params: &Map<String, Value>,
    call: &ToolCall,
    tenant: Tenant,
) -> Result<Outcome, RpcError> {
    let _slot = state.admission.admit_session(tenant).map_err(|full| {
        RpcError(
            RpcCode::ServerError,
            full.message(),
            Some(json!({"active_sessions": full.active, "max_sessions": full.max})),
        )
    })?;
    let env_id = env_id(params)?;
    let seed = match params.get("seed") {
        None | Some(Value::Null) => 0,
        Some(value) => value.as_u64().ok_or_else(|| {
            RpcError(
                RpcCode::InvalidParams,
                format!("'seed' must be a non-negative integer, not {value}"),
                None,
            )
        })?,
    };
    let ctx = state.sessions_without_recording();
    let registration = ctx.playable(env_id)?;
    let reply = call
        .reply(tool_schemas(&registration)?)
        .map_err(SessionError::Invalid)?;
    let action = SpadeAction { message: reply };
    let mut outcome = stateless_step(&ctx, Some(&registration.id), seed, action).await?;
    outcome.tool_name = Some(call.name.clone());
    Ok(outcome)
}

/// MCP's `CallToolResult` for a step: the observation as text content, the whole OpenEnv
/// payload (observation, reward, done, metadata) as structured content, and `data`, the text,
/// which OpenEnv's `MCPToolClient.call_tool` returns. The payload's info is the environment's
/// JSON verbatim, never converted to a [`Value`].
fn call_result(outcome: &Outcome) -> Json {
    #[derive(Serialize)]
    struct Text<'a> {
        r#type: &'static str,
        text: &'a str,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct CallResult<'a, 'b> {
        content: [Text<'a>; 1],
        structured_content: &'a ObservationPayload<'b>,
        is_error: bool,
        data: &'a str,
    }
    outcome.with_payload(|payload| {
        encode(&CallResult {
            content: [Text {
                r#type: "text",
                text: &outcome.text,
            }],
            structured_content: payload,
            is_error: false,
            data: &outcome.text,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_follow_openenv_json_rpc() {
        let parse = |v: Value| RpcRequest::parse(&v);
        assert_eq!(
            parse(json!({"jsonrpc": "2.0", "method": "tools/list", "id": 3})).unwrap(),
            RpcRequest {
                id: Some(json!(3)),
                method: "tools/list".into(),
                params: Map::new()
            }
        );
        let error = |v: Value| value(&parse(v).unwrap_err())["error"].clone();
        assert_eq!(
            error(json!({"jsonrpc": "1.0", "method": "x"}))["code"],
            -32600
        );
        assert_eq!(error(json!({"jsonrpc": "2.0"}))["code"], -32600);
        let params = error(json!({"jsonrpc": "2.0", "method": "x", "params": [1], "id": "a"}));
        assert_eq!(params["code"], -32602);
        assert_eq!(params["message"], "Params must be an object, not an array");
        let extra = error(json!({"jsonrpc": "2.0", "method": "x", "extra": 1}));
        assert!(
            extra["message"]
                .as_str()
                .unwrap()
                .contains("unknown field 'extra'")
        );
        assert_eq!(
            error(json!({"jsonrpc": "2.0", "method": "x", "id": 1.5}))["code"],
            -32600
        );
    }

    fn value(json: &RawValue) -> Value {
        serde_json::from_str(json.get()).unwrap()
    }

    #[test]
    fn a_request_without_id_is_a_notification() {
        let notification = json!({"jsonrpc": "2.0", "method": "tools/list"});
        assert_eq!(RpcRequest::parse(&notification).unwrap().id, None);
        let null_id = json!({"jsonrpc": "2.0", "method": "tools/list", "id": null});
        assert_eq!(RpcRequest::parse(&null_id).unwrap().id, Some(Value::Null));
    }

    #[test]
    fn responses_carry_result_or_error() {
        assert_eq!(
            value(&ok(&json!(1), json!({"a": 1}))),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"a": 1}})
        );
        assert_eq!(
            value(&failure(&Value::Null, RpcCode::MethodNotFound, "no", None)),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32601, "message": "no"}})
        );
        let err: RpcError = SessionError::NoEpisodeYet("new".into()).into();
        assert_eq!(err.0, RpcCode::InvalidRequest);
        assert_eq!(err.2, Some(json!({"code": "SESSION_ERROR"})));
    }
}
