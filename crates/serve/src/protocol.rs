//! The OpenEnv wire format, as `openenv` 0.10.0 speaks it (`openenv.core.env_server.types`,
//! `http_server.py`, `env_client.py`), and spade's fields inside it.
//!
//! WebSocket messages are JSON text frames `{"type": ..., "data": {...}}`. The client sends
//! `reset` (data: reset fields), `step` (data: the action), `state` and `close`; the server
//! answers `observation` (data: `{observation, reward, done, metadata}`), `state` (data: the
//! state) or `error` (data: `{message, code, ...}`), one answer per message.
//!
//! spade's action is one text field, `message` (the model's reply). Its observation carries
//! `text`, `info`, `terminated` and `truncated` as plain fields, with `reward` and `done`
//! (`terminated or truncated`) beside it where OpenEnv expects them.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use spade_sandbox::ExtraFields;

use crate::tools::ToolCall;

/// The error codes of OpenEnv's `WSErrorCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The message is not JSON.
    InvalidJson,
    /// The message's `type` is not one the protocol knows.
    UnknownType,
    /// The message is JSON of the wrong shape (missing, unknown or mistyped fields, an unknown
    /// environment id, a message over the size limit).
    ValidationError,
    /// The environment failed (a Python exception, a contract error, a sandbox limit).
    ExecutionError,
    /// The server has `--max-sessions` sessions open.
    CapacityReached,
    /// The environment could not be created.
    FactoryError,
    /// The session itself ended (idle too long, server shutting down).
    SessionError,
}

impl ErrorCode {
    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "INVALID_JSON",
            ErrorCode::UnknownType => "UNKNOWN_TYPE",
            ErrorCode::ValidationError => "VALIDATION_ERROR",
            ErrorCode::ExecutionError => "EXECUTION_ERROR",
            ErrorCode::CapacityReached => "CAPACITY_REACHED",
            ErrorCode::FactoryError => "FACTORY_ERROR",
            ErrorCode::SessionError => "SESSION_ERROR",
        }
    }
}

/// An `error` frame: `{"type":"error","data":{"message":...,"code":...,<extra>}}`.
pub fn error_frame(code: ErrorCode, message: &str, extra: Map<String, Value>) -> String {
    let mut data = Map::new();
    data.insert("message".to_owned(), Value::String(message.to_owned()));
    data.insert("code".to_owned(), Value::String(code.as_str().to_owned()));
    data.extend(extra);
    json!({"type": "error", "data": data}).to_string()
}

/// Per-observation metadata spade adds (OpenEnv's `Observation.metadata`).
#[derive(Debug, Clone, Serialize)]
pub struct ObservationMeta<'a> {
    /// The registered environment's id.
    pub env_id: &'a str,
    /// The episode (and trajectory) id.
    pub episode_id: &'a str,
    /// Steps taken in this episode so far.
    pub step_count: u64,
    /// Fuel the call used (deterministic).
    pub fuel: u64,
    /// Reset fields the environment's `reset` does not take, dropped (only on a reset that
    /// had some).
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub ignored_reset_fields: &'a [String],
}

/// spade's observation (the `observation` object of a result).
#[derive(Debug, Serialize)]
pub struct SpadeObservation<'a> {
    /// The tool called by name (OpenEnv's `CallToolObservation.tool_name`), on a `call_tool`
    /// step only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<&'a str>,
    /// The tool's result, the observation text (`CallToolObservation.result`), on a
    /// `call_tool` step only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<&'a str>,
    pub text: &'a str,
    /// The environment's info dict, verbatim as the sandbox produced it.
    pub info: &'a RawValue,
    pub terminated: bool,
    pub truncated: bool,
    pub metadata: ObservationMeta<'a>,
}

/// The payload OpenEnv's `serialize_observation` produces: the observation without reward and
/// done, which sit beside it, and its metadata repeated at the top level.
#[derive(Debug, Serialize)]
pub struct ObservationPayload<'a> {
    pub observation: SpadeObservation<'a>,
    pub reward: Option<f64>,
    pub done: bool,
    pub metadata: &'a ObservationMeta<'a>,
}

/// An `observation` frame around `payload`.
pub fn observation_frame(payload: &ObservationPayload<'_>) -> String {
    #[derive(Serialize)]
    struct Frame<'a, 'b> {
        r#type: &'static str,
        data: &'a ObservationPayload<'b>,
    }
    serde_json::to_string(&Frame {
        r#type: "observation",
        data: payload,
    })
    .expect("observations serialise")
}

/// A `state` frame around `state`.
pub fn state_frame(state: &Value) -> String {
    json!({"type": "state", "data": state}).to_string()
}

/// A request field that is missing, mistyped or invalid: where (`loc`, as pydantic writes it)
/// and why. VALIDATION_ERROR frames carry these in `errors`, as OpenEnv's server does.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The path to the field (`["data", "seed"]`); empty for the message as a whole.
    pub loc: Vec<String>,
    pub msg: String,
}

impl FieldError {
    /// An error at `loc`.
    pub fn at(loc: &[&str], msg: impl Into<String>) -> FieldError {
        FieldError {
            loc: loc.iter().map(|s| (*s).to_owned()).collect(),
            msg: msg.into(),
        }
    }

    /// The same error under `prefix` (`data` for a WebSocket message's payload).
    pub fn under(mut self, prefix: &str) -> FieldError {
        self.loc.insert(0, prefix.to_owned());
        self
    }

    /// Pydantic's error shape: `{"type": "value_error", "loc": [...], "msg": ...}`.
    pub fn to_json(&self) -> Value {
        json!({"type": "value_error", "loc": self.loc, "msg": self.msg})
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

/// The reset fields spade reads (OpenEnv's `ResetRequest` plus spade's extra fields).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResetFields {
    /// Seeds the sandbox and `reset(seed=...)`; default 0, as `spade run`.
    pub seed: Option<u64>,
    /// A caller-chosen episode id (letters, digits, `-`, `_`, `.`; at most 128).
    pub episode_id: Option<String>,
    /// The registered environment; optional when exactly one is registered.
    pub env_id: Option<String>,
    /// Appended to the first observation as `"{obs}\n\nHINT: {hint}"`, as in self-play.
    pub hint: Option<String>,
    /// Passed to the environment's constructor as `max_turns=`.
    pub max_turns: Option<u32>,
    /// Every other field: passed to the environment's `reset` as a keyword argument when its
    /// signature takes it (by name, or with `**kwargs`), dropped otherwise, as OpenEnv's
    /// server does (dataset rows carry extra columns). The dropped ones are named in the
    /// reset's metadata (`ignored_reset_fields`), so a typo is visible. Kept as the client's
    /// JSON text, so integers of any size reach `reset` as Python ints (as OpenEnv's server
    /// passes what `json.loads` gives).
    pub extra: ExtraFields,
}

/// The reset fields a client may send.
pub const RESET_FIELDS: &[&str] = &["seed", "episode_id", "env_id", "hint", "max_turns"];

impl ResetFields {
    /// Reads reset fields from a JSON object; mistyped fields are errors, the others are kept
    /// in [`ResetFields::extra`], as the client wrote them. A field given twice counts once,
    /// with its last value, as in a parsed JSON object.
    pub fn parse(data: &RawObject) -> Result<ResetFields, FieldError> {
        let mut fields = ResetFields::default();
        let mut extra = Vec::new();
        for (key, raw) in data.members() {
            if !RESET_FIELDS.contains(&key) {
                extra.push((key.to_owned(), raw));
                continue;
            }
            // spade's own fields are small values; a number beyond `f64` is none of them.
            let value = &serde_json::from_str::<Value>(raw.get()).map_err(|_| {
                FieldError::at(
                    &[key],
                    format!(
                        "reset field '{key}' is a number out of range: {}",
                        truncate(raw.get(), 60)
                    ),
                )
            })?;
            match key {
                "seed" => {
                    fields.seed = optional(value, key, Value::as_u64, "a non-negative integer")?
                }
                "episode_id" => {
                    fields.episode_id = optional(value, key, as_string, "a string")?;
                    if let Some(id) = &fields.episode_id {
                        check_id(id, "episode_id").map_err(|m| FieldError::at(&[key], m))?;
                    }
                }
                "env_id" => fields.env_id = optional(value, key, as_string, "a string")?,
                "hint" => fields.hint = optional(value, key, as_string, "a string")?,
                "max_turns" => {
                    fields.max_turns = optional(
                        value,
                        key,
                        |v| v.as_u64().and_then(|n| u32::try_from(n).ok()),
                        "an integer from 0 to 4294967295",
                    )?
                }
                _ => unreachable!("one of RESET_FIELDS"),
            }
        }
        fields.extra = ExtraFields::from_raw(extra);
        Ok(fields)
    }
}

/// A JSON object whose members keep their values' text: a message or request body read so that
/// a reset's extra fields reach the environment as the client wrote them
/// ([`ResetFields::extra`]). Every other value is parsed from its text where it is used.
#[derive(Debug)]
pub struct RawObject {
    members: Vec<(String, Box<RawValue>)>,
}

/// Why a text is not a [`RawObject`].
#[derive(Debug)]
pub enum NotAnObject {
    /// The text is not JSON.
    Json(serde_json::Error),
    /// The text is JSON of another type (its name, as [`type_name`] gives it).
    Other(&'static str),
}

impl RawObject {
    /// Reads a JSON text that should be an object.
    pub fn parse(text: &str) -> Result<RawObject, NotAnObject> {
        let raw: Box<RawValue> = serde_json::from_str(text).map_err(NotAnObject::Json)?;
        RawObject::from_raw(&raw).map_err(NotAnObject::Other)
    }

    /// Reads a JSON value's text that should be an object; else the name of its type.
    pub fn from_raw(raw: &RawValue) -> Result<RawObject, &'static str> {
        match raw_type_name(raw) {
            "an object" => spade_sandbox::object_members(raw.get())
                .map(|members| RawObject { members })
                .map_err(|_| "an object"),
            other => Err(other),
        }
    }

    /// An empty object.
    pub fn empty() -> RawObject {
        RawObject {
            members: Vec::new(),
        }
    }

    /// The members in order, a name given twice at each place.
    pub fn members(&self) -> impl Iterator<Item = (&str, &RawValue)> {
        self.members
            .iter()
            .map(|(name, raw)| (name.as_str(), raw.as_ref()))
    }

    /// The names in order (a name given twice, twice).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(name, _)| name.as_str())
    }

    /// The value's text of the member named `key` (the last one, if it is given twice).
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.members
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, raw)| raw.as_ref())
    }
}

/// The type of a JSON value's text, named as [`type_name`] names a parsed one.
pub fn raw_type_name(raw: &RawValue) -> &'static str {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// The action: one text field, `message`, and OpenEnv's optional `metadata`.
#[derive(Debug, Clone, PartialEq)]
pub struct SpadeAction {
    pub message: String,
}

impl SpadeAction {
    /// Reads an action from a JSON object; unknown or mistyped fields are errors.
    pub fn parse(data: &Value) -> Result<SpadeAction, FieldError> {
        let Some(object) = data.as_object() else {
            return Err(FieldError::at(
                &[],
                format!(
                    "the action must be an object like {{\"message\": \"...\"}}, not {}",
                    type_name(data)
                ),
            ));
        };
        let mut message = None;
        for (key, value) in object {
            match key.as_str() {
                "message" => match value {
                    Value::String(s) => message = Some(s.clone()),
                    other => {
                        return Err(FieldError::at(
                            &["message"],
                            format!(
                                "action field 'message' must be a string, not {}",
                                type_name(other)
                            ),
                        ));
                    }
                },
                "metadata" if value.is_object() => {}
                "metadata" => {
                    return Err(FieldError::at(
                        &["metadata"],
                        "action field 'metadata' must be an object",
                    ));
                }
                other => {
                    return Err(FieldError::at(
                        &[other],
                        format!(
                            "unknown action field '{other}' (the action is {{\"message\": \"<the model's reply>\"}})"
                        ),
                    ));
                }
            }
        }
        match message {
            Some(message) => Ok(SpadeAction { message }),
            None => Err(FieldError::at(
                &["message"],
                "the action has no 'message' field (the action is {\"message\": \"<the model's reply>\"})",
            )),
        }
    }
}

/// What a WebSocket `step` message's data asks for: the model's reply, or one of OpenEnv's MCP
/// actions, which its MCP clients send through `step` to get the reward with the result.
#[derive(Debug, Clone, PartialEq)]
pub enum StepAction {
    /// `{"message": ...}`.
    Reply(SpadeAction),
    /// `{"type": "call_tool", "tool_name": ..., "arguments": {...}}`.
    CallTool(ToolCall),
    /// `{"type": "list_tools"}`: answered without a step.
    ListTools,
}

impl StepAction {
    /// Reads a step's data.
    pub fn parse(data: &Value) -> Result<StepAction, FieldError> {
        let Some(object) = data.as_object() else {
            return SpadeAction::parse(data).map(StepAction::Reply);
        };
        match object.get("type") {
            None => SpadeAction::parse(data).map(StepAction::Reply),
            Some(Value::String(kind)) if kind == "call_tool" => {
                ToolCall::from_action(object).map(StepAction::CallTool)
            }
            Some(Value::String(kind)) if kind == "list_tools" => {
                match object
                    .keys()
                    .find(|k| !matches!(k.as_str(), "type" | "metadata"))
                {
                    Some(extra) => Err(FieldError::at(
                        &[extra],
                        format!("unknown list_tools field '{extra}'"),
                    )),
                    None => Ok(StepAction::ListTools),
                }
            }
            Some(other) => Err(FieldError::at(
                &["type"],
                format!(
                    "action 'type' must be \"call_tool\" or \"list_tools\" (OpenEnv's MCP actions), not {}; a reply is {{\"message\": \"...\"}} with no type",
                    show(other)
                ),
            )),
        }
    }
}

fn as_string(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

fn optional<T>(
    value: &Value,
    key: &str,
    get: impl Fn(&Value) -> Option<T>,
    what: &str,
) -> Result<Option<T>, FieldError> {
    if value.is_null() {
        return Ok(None);
    }
    get(value).map(Some).ok_or_else(|| {
        FieldError::at(
            &[key],
            format!("reset field '{key}' must be {what}, not {}", show(value)),
        )
    })
}

/// Checks an id used in URLs and file names: 1 to 128 of `A-Z a-z 0-9 - _ .`, not starting
/// with a dot.
pub fn check_id(id: &str, what: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} '{}' is not valid: use 1 to 128 letters, digits, '-', '_' or '.', not starting with '.'",
            truncate(id, 60)
        ))
    }
}

/// The JSON type of a value, for messages.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn show(value: &Value) -> String {
    truncate(&value.to_string(), 60)
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}...")
    }
}

/// The `/schema` response for one environment: the server's schemas, with the environment's
/// id and class, and for a tool-use environment its tool schemas (the action's `message` is
/// then a `<tool_call>{...}</tool_call>` naming one of them).
pub fn env_schema(id: &str, class_name: Option<&str>, tools: Option<&Value>) -> Value {
    let mut schema = schema();
    schema["env_id"] = json!(id);
    schema["class_name"] = json!(class_name);
    if let Some(tools) = tools {
        schema["tools"] = tools.clone();
        schema["action"]["properties"]["message"]["description"] = json!(
            "the model's reply, passed to step(): a tool call <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> naming one of `tools`, or a final answer"
        );
    }
    schema
}

/// The `/schema` response: JSON schemas of the action, observation and state.
pub fn schema() -> Value {
    let meta = json!({
        "type": "object",
        "properties": {
            "env_id": {"type": "string"},
            "episode_id": {"type": "string"},
            "step_count": {"type": "integer"},
            "fuel": {"type": "integer", "description": "fuel the call used (deterministic)"}
        }
    });
    let observation = json!({
        "title": "SpadeObservation",
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "the environment's observation"},
            "info": {"type": "object", "description": "the environment's info dict"},
            "terminated": {"type": "boolean"},
            "truncated": {"type": "boolean"},
            "done": {"type": "boolean", "description": "terminated or truncated"},
            "reward": {"anyOf": [{"type": "number"}, {"type": "null"}], "description": "null after reset"},
            "metadata": meta
        },
        "required": ["text", "info", "terminated", "truncated"]
    });
    json!({
        "action": {
            "title": "SpadeAction",
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": "the model's reply, passed to step()"},
                "metadata": {"type": "object"}
            },
            "required": ["message"],
            "additionalProperties": false
        },
        "observation": observation,
        "reset_observation": observation,
        "state": {
            "title": "SpadeState",
            "type": "object",
            "properties": {
                "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "step_count": {"type": "integer", "minimum": 0},
                "env_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "seed": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "done": {"type": "boolean"},
                "session_id": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 53 (Low): extra fields keep the client's text, so an integer beyond `u64` is not
    /// turned into a float and `10**400` is not refused; spade's own fields refuse a number out
    /// of range with a message that names the field.
    #[test]
    fn extra_reset_fields_keep_integers_of_any_size() {
        let ten_400 = format!("1{}", "0".repeat(400));
        let text = format!(
            "{{\"seed\": 2, \"n\": 18446744073709551617, \"m\": {ten_400}, \"x\": [ -1 ]}}"
        );
        let fields = ResetFields::parse(&RawObject::parse(&text).unwrap()).unwrap();
        assert_eq!(fields.seed, Some(2));
        assert_eq!(
            fields.extra.json(),
            format!("{{\"n\":18446744073709551617,\"m\":{ten_400},\"x\":[-1]}}")
        );
        let text = format!("{{\"seed\": {ten_400}}}");
        let err = ResetFields::parse(&RawObject::parse(&text).unwrap()).unwrap_err();
        assert_eq!(err.loc, ["seed"]);
        assert!(
            err.msg
                .starts_with("reset field 'seed' is a number out of range: 1000"),
            "{}",
            err.msg
        );
        assert!(err.msg.len() < 120, "{}", err.msg);
    }

    #[test]
    fn raw_objects_name_what_they_are_not() {
        for (text, kind) in [
            ("[1, 2]", "an array"),
            (" \"x\"", "a string"),
            ("true", "a boolean"),
            ("null", "null"),
            ("-3e999", "a number"),
        ] {
            match RawObject::parse(text) {
                Err(NotAnObject::Other(found)) => assert_eq!(found, kind, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(matches!(RawObject::parse("{"), Err(NotAnObject::Json(_))));
        let object = RawObject::parse(r#"{"a": 1, "b": 2, "a": [3]}"#).unwrap();
        assert_eq!(object.keys().collect::<Vec<_>>(), ["a", "b", "a"]);
        assert_eq!(object.get("a").map(RawValue::get), Some("[3]"));
        assert!(object.get("c").is_none());
    }

    #[test]
    fn reset_fields_reject_unknown_and_mistyped() {
        let parse = |v: Value| ResetFields::parse(&RawObject::parse(&v.to_string()).unwrap());
        assert_eq!(
            parse(json!({"seed": 3, "env_id": "a", "hint": "h"})).unwrap(),
            ResetFields {
                seed: Some(3),
                env_id: Some("a".into()),
                hint: Some("h".into()),
                ..ResetFields::default()
            }
        );
        // Other fields are kept, in their order, for the environment's reset to take or drop.
        assert_eq!(
            parse(json!({"sede": 3, "prompt": "x", "seed": 1})).unwrap(),
            ResetFields {
                seed: Some(1),
                extra: ExtraFields::parse(r#"{"sede": 3, "prompt": "x"}"#).unwrap(),
                ..ResetFields::default()
            }
        );
        assert_eq!(
            parse(json!({"seed": -1})).unwrap_err(),
            FieldError::at(
                &["seed"],
                "reset field 'seed' must be a non-negative integer, not -1"
            )
        );
        let bad_id = parse(json!({"episode_id": "../x"})).unwrap_err();
        assert_eq!(bad_id.loc, ["episode_id"]);
        assert!(bad_id.msg.contains("is not valid"));
        assert_eq!(
            bad_id.clone().under("data").to_json(),
            json!({"type": "value_error", "loc": ["data", "episode_id"], "msg": bad_id.msg})
        );
    }

    #[test]
    fn action_is_one_message_field() {
        assert_eq!(
            SpadeAction::parse(&json!({"message": "hi", "metadata": {}})).unwrap(),
            SpadeAction {
                message: "hi".into()
            }
        );
        assert!(
            SpadeAction::parse(&json!({}))
                .unwrap_err()
                .msg
                .contains("no 'message' field")
        );
        assert!(
            SpadeAction::parse(&json!({"message": 3}))
                .unwrap_err()
                .msg
                .contains("must be a string, not a number")
        );
        assert_eq!(
            StepAction::parse(&json!({"message": "hi"})).unwrap(),
            StepAction::Reply(SpadeAction {
                message: "hi".into()
            })
        );
        assert_eq!(
            StepAction::parse(&json!({"type": "list_tools", "metadata": {}})).unwrap(),
            StepAction::ListTools
        );
        assert!(matches!(
            StepAction::parse(&json!({"type": "call_tool", "tool_name": "t"})).unwrap(),
            StepAction::CallTool(call) if call.name == "t" && call.arguments.is_empty()
        ));
        let bad_type = StepAction::parse(&json!({"type": "reply", "message": "x"})).unwrap_err();
        assert_eq!(bad_type.loc, ["type"]);
        assert!(
            bad_type
                .msg
                .contains("must be \"call_tool\" or \"list_tools\"")
        );
        let unknown = SpadeAction::parse(&json!({"code": "x", "message": "y"})).unwrap_err();
        assert_eq!(unknown.loc, ["code"]);
        assert!(unknown.msg.contains("unknown action field 'code'"));
    }
}
