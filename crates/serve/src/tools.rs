//! Tool calls of tool-use environments as OpenEnv's MCP mode sees them.
//!
//! A tool-use environment (one with `get_tools()`, like the reference's `ToolUseBaseEnv`
//! subclasses) takes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` and
//! `<answer>...</answer>` replies. OpenEnv's MCP clients instead list tools (`tools/list`, the
//! `list_tools` action) and call them by name (`tools/call`, the `call_tool` action). This
//! module maps one onto the other: the environment's OpenAI function schemas become MCP tools
//! (`name`, `description`, `inputSchema`), plus one tool `answer` for the final answer (unless
//! the environment has a tool of that name), and a call becomes the reply the environment's
//! `step` parses.

use serde_json::{Map, Value, json};

use crate::protocol::{FieldError, type_name};

/// The name of the tool that gives the final answer (`<answer>...</answer>`).
pub const ANSWER_TOOL: &str = "answer";

/// One call of a tool by name (OpenEnv's `CallToolAction`, MCP's `tools/call`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Map<String, Value>,
}

impl ToolCall {
    /// Reads OpenEnv's `CallToolAction` as a step's data:
    /// `{"type": "call_tool", "tool_name": ..., "arguments": {...}, "metadata"?: {...}}`.
    pub fn from_action(object: &Map<String, Value>) -> Result<ToolCall, FieldError> {
        let mut name = None;
        let mut arguments = Map::new();
        for (key, value) in object {
            match (key.as_str(), value) {
                ("type", _) => {}
                ("tool_name", Value::String(n)) => name = Some(n.clone()),
                ("arguments", Value::Object(a)) => arguments = a.clone(),
                ("metadata", Value::Object(_)) => {}
                ("tool_name" | "arguments" | "metadata", other) => {
                    let want = if key == "tool_name" {
                        "a string"
                    } else {
                        "an object"
                    };
                    return Err(FieldError::at(
                        &[key],
                        format!(
                            "call_tool field '{key}' must be {want}, not {}",
                            type_name(other)
                        ),
                    ));
                }
                (other, _) => {
                    return Err(FieldError::at(
                        &[other],
                        format!(
                            "unknown call_tool field '{other}' (the action is {{\"type\": \"call_tool\", \"tool_name\": ..., \"arguments\": {{...}}}})"
                        ),
                    ));
                }
            }
        }
        let name = name.ok_or_else(|| {
            FieldError::at(&["tool_name"], "a call_tool action needs 'tool_name'")
        })?;
        Ok(ToolCall { name, arguments })
    }

    /// Reads MCP's `tools/call` params: `{"name": ..., "arguments"?: {...}}` (other params,
    /// such as `session_id`, are the caller's).
    pub fn from_params(params: &Map<String, Value>) -> Result<ToolCall, String> {
        let name = match params.get("name") {
            Some(Value::String(name)) if !name.is_empty() => name.clone(),
            None | Some(Value::Null) => return Err("Missing 'name' in params".to_owned()),
            Some(other) => {
                return Err(format!(
                    "'name' in params must be a non-empty string, not {}",
                    type_name(other)
                ));
            }
        };
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(arguments)) => arguments.clone(),
            Some(other) => {
                return Err(format!(
                    "'arguments' in params must be an object, not {}",
                    type_name(other)
                ));
            }
        };
        Ok(ToolCall { name, arguments })
    }

    /// The reply that makes the environment run this call: `<answer>...</answer>` for
    /// [`ANSWER_TOOL`] (when the environment's `tools` have none of that name), else
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. A tool the environment does
    /// not have is passed on as well: the environment answers it as it answers a model.
    pub fn reply(&self, tools: &Value) -> Result<String, String> {
        if self.name == ANSWER_TOOL && !has_tool(tools, ANSWER_TOOL) {
            let answer = match self.arguments.get("answer") {
                Some(Value::String(text)) => text.clone(),
                Some(value @ Value::Number(_)) => value.to_string(),
                Some(other) => {
                    return Err(format!(
                        "the answer tool's argument 'answer' must be a string or a number, not {}",
                        type_name(other)
                    ));
                }
                None => {
                    return Err(
                        "the answer tool needs the argument 'answer' (the final answer)".to_owned(),
                    );
                }
            };
            if let Some(extra) = self.arguments.keys().find(|k| *k != "answer") {
                return Err(format!(
                    "the answer tool takes only 'answer', not '{extra}'"
                ));
            }
            return Ok(format!("<answer>{answer}</answer>"));
        }
        let call = json!({"name": self.name, "arguments": self.arguments});
        Ok(format!("<tool_call>{call}</tool_call>"))
    }
}

/// The function object of one OpenAI tool schema (`{"type": "function", "function": {...}}`,
/// or the function object itself).
fn function(tool: &Value) -> &Value {
    tool.get("function")
        .filter(|f| f.is_object())
        .unwrap_or(tool)
}

fn has_tool(tools: &Value, name: &str) -> bool {
    tools
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| function(t)["name"] == name)
}

/// The environment's tools (OpenAI function schemas, as `get_tools()` returns them) as MCP
/// tools, followed by [`ANSWER_TOOL`] unless the environment has one of that name.
pub fn mcp_tools(tools: &Value) -> Vec<Value> {
    let mut listed: Vec<Value> = tools
        .as_array()
        .into_iter()
        .flatten()
        .map(|tool| {
            let f = function(tool);
            json!({
                "name": f["name"],
                "description": f.get("description").cloned().unwrap_or(json!("")),
                "inputSchema": f
                    .get("parameters")
                    .cloned()
                    .unwrap_or(json!({"type": "object", "properties": {}})),
            })
        })
        .collect();
    if !has_tool(tools, ANSWER_TOOL) {
        listed.push(json!({
            "name": ANSWER_TOOL,
            "description": "Give the final answer (the environment's <answer>...</answer> reply); a correct one ends the episode.",
            "inputSchema": {
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "the final answer"}},
                "required": ["answer"],
            },
        }));
    }
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory_tools() -> Value {
        json!([
            {"type": "function", "function": {
                "name": "get_price", "description": "Price of one unit.",
                "parameters": {"type": "object", "properties": {"item": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "get_stock"}},
        ])
    }

    #[test]
    fn openai_schemas_become_mcp_tools_with_an_answer_tool() {
        let listed = mcp_tools(&inventory_tools());
        let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["get_price", "get_stock", "answer"]);
        assert_eq!(listed[0]["description"], "Price of one unit.");
        assert_eq!(
            listed[0]["inputSchema"]["properties"]["item"]["type"],
            "string"
        );
        assert_eq!(listed[1]["description"], "");
        assert_eq!(
            listed[1]["inputSchema"],
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(listed[2]["inputSchema"]["required"], json!(["answer"]));
        // An environment with its own `answer` tool keeps it, and gets no second one.
        let own = json!([{"name": "answer", "description": "mine"}]);
        let listed = mcp_tools(&own);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["description"], "mine");
    }

    #[test]
    fn calls_become_the_replies_the_environment_parses() {
        let tools = inventory_tools();
        let call = ToolCall::from_params(
            json!({"name": "get_price", "arguments": {"item": "plum"}, "session_id": "s"})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            call.reply(&tools).unwrap(),
            r#"<tool_call>{"name":"get_price","arguments":{"item":"plum"}}</tool_call>"#
        );
        let answer = |arguments: Value| ToolCall {
            name: "answer".into(),
            arguments: arguments.as_object().unwrap().clone(),
        };
        assert_eq!(
            answer(json!({"answer": "47.04"})).reply(&tools).unwrap(),
            "<answer>47.04</answer>"
        );
        assert_eq!(
            answer(json!({"answer": 12.5})).reply(&tools).unwrap(),
            "<answer>12.5</answer>"
        );
        assert!(
            answer(json!({}))
                .reply(&tools)
                .unwrap_err()
                .contains("needs the argument 'answer'")
        );
        assert!(
            answer(json!({"answer": "1", "why": "x"}))
                .reply(&tools)
                .unwrap_err()
                .contains("takes only 'answer', not 'why'")
        );
        // The environment's own `answer` tool is called like any other.
        let own = json!([{"name": "answer"}]);
        assert_eq!(
            answer(json!({"answer": "x"})).reply(&own).unwrap(),
            r#"<tool_call>{"name":"answer","arguments":{"answer":"x"}}</tool_call>"#
        );
    }

    #[test]
    fn malformed_calls_are_refused_with_the_field() {
        let params = |v: Value| ToolCall::from_params(v.as_object().unwrap());
        assert_eq!(
            params(json!({"arguments": {}})).unwrap_err(),
            "Missing 'name' in params"
        );
        assert!(
            params(json!({"name": "x", "arguments": [1]}))
                .unwrap_err()
                .contains("must be an object, not an array")
        );
        let action = |v: Value| ToolCall::from_action(v.as_object().unwrap());
        assert_eq!(
            action(json!({"type": "call_tool", "tool_name": "t", "arguments": {"a": 1}})).unwrap(),
            ToolCall {
                name: "t".into(),
                arguments: json!({"a": 1}).as_object().unwrap().clone(),
            }
        );
        assert_eq!(
            action(json!({"type": "call_tool"})).unwrap_err().loc,
            ["tool_name"]
        );
        let unknown = action(json!({"type": "call_tool", "tool_name": "t", "args": {}}));
        assert!(
            unknown
                .unwrap_err()
                .msg
                .contains("unknown call_tool field 'args'")
        );
    }
}
