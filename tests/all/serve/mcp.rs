//! OpenEnv's MCP mode for tool-use environments: `POST /mcp` (tools/list, tools/call,
//! openenv/session/create and close), `/ws?session_id=` attaching to a held session, the
//! WebSocket `mcp` message and the `call_tool`/`list_tools` step actions; with the stock
//! `MCPToolClient`.

use std::time::Duration;

use serde_json::{Value, json};

use super::env_path;
use super::harness::{ServeProcess, Ws, assert_error, http_json, run_python, ws_call, ws_next};
use crate::common::{spade, stdout};

/// One JSON-RPC request on `POST /mcp`; OpenEnv answers every one with HTTP 200.
fn rpc(server: &ServeProcess, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": 1});
    let (status, answer) = http_json(server.addr, "POST", "/mcp", &[], Some(&body.to_string()));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["jsonrpc"], "2.0");
    answer
}

/// A JSON-RPC error's code and message.
#[track_caller]
fn rpc_error(answer: &Value) -> (i64, String) {
    let error = &answer["error"];
    assert!(error.is_object(), "expected an error, got {answer}");
    (
        error["code"].as_i64().unwrap(),
        error["message"].as_str().unwrap().to_owned(),
    )
}

fn tool_names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn active_sessions(server: &ServeProcess) -> u64 {
    let (_, health) = http_json(server.addr, "GET", "/health", &[], None);
    health["sessions"]["active"].as_u64().unwrap()
}

/// Waits (up to 20 s, for a loaded machine) until the server reports `n` active sessions (a
/// released session's slot is given back when its connection task ends).
fn wait_for_active(server: &ServeProcess, n: u64) {
    for _ in 0..800 {
        if active_sessions(server) == n {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(active_sessions(server), n);
}

async fn attach(server: &ServeProcess, session_id: &str) -> Ws {
    let url = format!("ws://{}/ws?session_id={session_id}", server.addr);
    let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    ws
}

/// The observations `spade run --json` gives for `actions` on tool_inventory at `seed`
/// (reset first).
fn spade_run_texts(seed: u64, actions: &[String]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("actions.txt");
    std::fs::write(&file, actions.join("\n")).unwrap();
    let output = spade(&[
        "run",
        &env_path("tool_inventory"),
        "--seed",
        &seed.to_string(),
        "--actions",
        file.to_str().unwrap(),
        "--json",
    ]);
    stdout(&output)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["call"] == "reset" || v["call"] == "step")
        .map(|v| v["observation"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_held_session_is_played_over_http_mcp_and_an_attached_websocket() {
    let server = ServeProcess::start(&[&env_path("tool_inventory"), &env_path("grid_walk")]);

    // Tools are listed from the environment's schemas, with the answer tool; a plain
    // environment has none.
    let listed = rpc(&server, "tools/list", json!({"env_id": "tool_inventory"}));
    assert_eq!(
        tool_names(&listed["result"]["tools"]),
        ["get_price", "get_stock", "answer"]
    );
    assert_eq!(
        listed["result"]["tools"][0]["inputSchema"]["required"],
        json!(["item"])
    );
    let plain = rpc(&server, "tools/list", json!({"env_id": "grid_walk"}));
    let (code, message) = rpc_error(&plain);
    assert_eq!(code, -32602);
    assert!(
        message.contains(
            "Environment does not support MCP: 'grid_walk' is not a tool-use environment"
        ),
        "{message}"
    );

    // A held session takes a slot until it is closed.
    let created = rpc(&server, "openenv/session/create", json!({}));
    let session_id = created["result"]["session_id"].as_str().unwrap().to_owned();
    assert_eq!(active_sessions(&server), 1);
    let early = rpc(
        &server,
        "tools/call",
        json!({"name": "get_price", "arguments": {"item": "plum"}, "session_id": session_id}),
    );
    let (code, message) = rpc_error(&early);
    assert_eq!(code, -32600);
    assert!(message.contains("send reset before step"), "{message}");

    // The WebSocket attached to it resets; HTTP calls tools in the same episode.
    let mut ws = attach(&server, &session_id).await;
    let reset = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"env_id": "tool_inventory", "seed": 11}}),
    )
    .await;
    assert_eq!(reset["type"], "observation", "{reset}");
    let item = reset["data"]["observation"]["info"]["target"]
        .as_str()
        .unwrap()
        .to_owned();
    let price = rpc(
        &server,
        "tools/call",
        json!({"name": "get_price", "arguments": {"item": item}, "session_id": session_id}),
    );
    let result = &price["result"];
    assert_eq!(result["isError"], false);
    let price_text = result["data"].as_str().unwrap().to_owned();
    assert_eq!(result["content"][0]["text"], price_text);
    assert_eq!(result["structuredContent"]["reward"], 0.0);
    assert_eq!(result["structuredContent"]["done"], false);
    assert_eq!(
        result["structuredContent"]["observation"]["tool_name"],
        "get_price"
    );

    // A second WebSocket cannot attach while one is.
    let mut second = attach(&server, &session_id).await;
    assert_error(
        &ws_next(&mut second).await.unwrap(),
        "SESSION_ERROR",
        "already has an attached WebSocket",
    );

    // The call_tool step action, and an mcp message on the WebSocket, in the same episode.
    let stock = ws_call(
        &mut ws,
        json!({"type": "step", "data": {"type": "call_tool", "tool_name": "get_stock", "arguments": {"item": item}}}),
    )
    .await;
    assert_eq!(stock["type"], "observation", "{stock}");
    let observation = &stock["data"]["observation"];
    assert_eq!(observation["tool_name"], "get_stock");
    assert_eq!(observation["result"], observation["text"]);
    let stock_text = observation["text"].as_str().unwrap().to_owned();
    assert_eq!(stock["data"]["metadata"]["step_count"], 2);

    // The same calls as replies give the same observations in `spade run`.
    let replies = [
        format!(
            r#"<tool_call>{{"name": "get_price", "arguments": {{"item": "{item}"}}}}</tool_call>"#
        ),
        format!(
            r#"<tool_call>{{"name": "get_stock", "arguments": {{"item": "{item}"}}}}</tool_call>"#
        ),
    ];
    let texts = spade_run_texts(11, &replies);
    let reset_text = reset["data"]["observation"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(texts, [reset_text, price_text.clone(), stock_text.clone()]);

    let listed = ws_call(
        &mut ws,
        json!({"type": "step", "data": {"type": "list_tools"}}),
    )
    .await;
    assert_eq!(
        tool_names(&listed["data"]["observation"]["tools"]),
        ["get_price", "get_stock", "answer"]
    );
    // The environment's rule: the answer is price x stock, rounded to cents; it wins 1.0.
    let price: f64 = price_text
        .strip_prefix("Tool result:\n")
        .unwrap()
        .parse()
        .unwrap();
    let stock: f64 = stock_text
        .strip_prefix("Tool result:\n")
        .unwrap()
        .parse()
        .unwrap();
    let answer = format!("{:.2}", price * stock);
    let wrong = ws_call(
        &mut ws,
        json!({"type": "mcp", "data": {"jsonrpc": "2.0", "id": "w", "method": "tools/call",
            "params": {"name": "answer", "arguments": {"answer": "0.01"}}}}),
    )
    .await;
    assert_eq!(wrong["type"], "mcp", "{wrong}");
    assert_eq!(wrong["data"]["id"], "w");
    assert_eq!(wrong["data"]["result"]["structuredContent"]["reward"], 0.0);
    assert!(
        wrong["data"]["result"]["data"]
            .as_str()
            .unwrap()
            .starts_with("Incorrect answer.")
    );
    let right = ws_call(
        &mut ws,
        json!({"type": "mcp", "data": {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "answer", "arguments": {"answer": answer}}}}),
    )
    .await;
    let result = &right["data"]["result"];
    assert_eq!(result["data"], "Correct!", "{right}");
    assert_eq!(result["structuredContent"]["reward"], 1.0);
    assert_eq!(result["structuredContent"]["done"], true);
    assert_eq!(
        result["structuredContent"]["observation"]["terminated"],
        true
    );

    // The WebSocket cannot close its own session over MCP; a close over HTTP waits for it to
    // detach.
    let own = ws_call(
        &mut ws,
        json!({"type": "mcp", "data": {"jsonrpc": "2.0", "id": 8,
            "method": "openenv/session/close", "params": {"session_id": session_id}}}),
    )
    .await;
    assert_eq!(own["data"]["error"]["code"], -32600, "{own}");
    let closing = rpc(
        &server,
        "openenv/session/close",
        json!({"session_id": session_id}),
    );
    assert_eq!(
        closing["result"],
        json!({"session_id": session_id, "closed": false, "closing": true})
    );
    assert_eq!(active_sessions(&server), 1);
    drop(ws);
    wait_for_active(&server, 0);
    let gone = rpc(
        &server,
        "openenv/session/close",
        json!({"session_id": session_id}),
    );
    assert_eq!(
        rpc_error(&gone),
        (-32602, format!("Unknown session_id: {session_id}"))
    );
    let mut unknown = attach(&server, &session_id).await;
    assert_error(
        &ws_next(&mut unknown).await.unwrap(),
        "SESSION_ERROR",
        &format!("Unknown session_id: {session_id}"),
    );
}

#[test]
fn mcp_requests_are_validated_and_held_sessions_are_bounded() {
    let server = ServeProcess::start(&[
        &env_path("tool_inventory"),
        "--max-sessions",
        "1",
        "--session-idle-timeout",
        "3",
    ]);
    // Malformed requests get JSON-RPC's errors, still with HTTP 200.
    let (status, parse) = http_json(server.addr, "POST", "/mcp", &[], Some("{not json"));
    assert_eq!(status, 200);
    assert_eq!(parse["error"]["code"], -32700);
    let (_, version) = http_json(
        server.addr,
        "POST",
        "/mcp",
        &[],
        Some(r#"{"jsonrpc": "1.0", "method": "tools/list"}"#),
    );
    assert_eq!(version["error"]["code"], -32600);
    let unknown = rpc(&server, "resources/list", json!({}));
    assert_eq!(rpc_error(&unknown).0, -32601);
    assert!(
        rpc_error(&unknown)
            .1
            .starts_with("Method not found: resources/list")
    );
    let nameless = rpc(&server, "tools/call", json!({"arguments": {}}));
    assert_eq!(
        rpc_error(&nameless),
        (-32602, "Missing 'name' in params".to_owned())
    );
    let no_session = rpc(&server, "tools/list", json!({"session_id": "nope"}));
    assert_eq!(
        rpc_error(&no_session),
        (-32602, "Unknown session_id: nope".to_owned())
    );
    let no_id = rpc(&server, "openenv/session/close", json!({}));
    assert_eq!(
        rpc_error(&no_id),
        (
            -32602,
            "Invalid params - 'session_id' is required".to_owned()
        )
    );

    // Without a session, a call runs on a fresh sandbox (seeded, no reset), as POST /step.
    let fresh = rpc(
        &server,
        "tools/call",
        json!({"name": "get_stock", "arguments": {"item": "fig"}, "seed": 3}),
    );
    assert!(
        fresh["result"]["data"]
            .as_str()
            .unwrap()
            .starts_with("Tool result:\n"),
        "{fresh}"
    );

    // A held session takes the only slot: no other session, held or WebSocket, fits.
    let created = rpc(&server, "openenv/session/create", json!({}));
    let session_id = created["result"]["session_id"].as_str().unwrap().to_owned();
    let full = rpc(&server, "openenv/session/create", json!({}));
    let (code, message) = rpc_error(&full);
    assert_eq!(code, -32000);
    assert_eq!(
        message,
        "Server at capacity: 1/1 sessions active. Cannot accept new connections."
    );
    assert_eq!(
        full["error"]["data"],
        json!({"active_sessions": 1, "max_sessions": 1})
    );
    let (status, _) = http_json(server.addr, "POST", "/reset", &[], Some("{}"));
    assert_eq!(status, 503);

    // Unused for longer than the idle timeout, it is released.
    std::thread::sleep(Duration::from_millis(3500));
    wait_for_active(&server, 0);
    let reaped = rpc(&server, "tools/list", json!({"session_id": session_id}));
    assert_eq!(
        rpc_error(&reaped).1,
        format!("Unknown session_id: {session_id}")
    );
}

#[test]
fn the_stock_mcp_tool_client_plays_a_tool_env() {
    let server = ServeProcess::start(&[&env_path("tool_inventory")]);
    let out = run_python(
        "tests/mcp_stock.py",
        &[&server.url(), "tool_inventory", "5"],
    );
    let seen: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        seen["tools"],
        json!(["get_price", "get_stock", "answer"]),
        "{seen}"
    );
    assert!(seen["session_id"].is_string());
    assert!(
        seen["price_text"]
            .as_str()
            .unwrap()
            .starts_with("Tool result:\n")
    );
    // price x stock is the environment's answer: reward 1, episode over.
    assert_eq!(seen["answer_result"], "Correct!", "{seen}");
    assert_eq!(seen["answer_reward"], 1.0);
    assert_eq!(seen["answer_done"], true);
    let after = seen["after_end"].as_str().unwrap();
    assert!(after.contains("is over (terminated)"), "{after}");
    // Closing the client closed its held session.
    wait_for_active(&server, 0);
}

/// `math.factorial(200)`, the int tests/serve/huge_info.py puts in every info.
const FACTORIAL_200: &str = "788657867364790503552363213932185062295135977687173263294742533244359449963403342920304284011984623904177212138919638830257642790242637105061926624952829931113462857270763317237396988943922445621451664240254033291864131227428294853277524242407573903240321257405579568660226031904170324062351700858796178922222789623703897374720000000000000000000000000000000000000000000000000";

/// Issue 53/5: a `tools/call` whose info holds an int beyond f64's range panicked the server
/// (HTTP dropped the connection unanswered). The answer carries the int verbatim, over HTTP
/// and in a WebSocket `mcp` message; the server keeps serving.
#[tokio::test]
async fn a_tool_result_with_an_int_beyond_f64_is_answered_verbatim() {
    let server = ServeProcess::start(&[&super::serve_fixture("huge_info.py")]);
    let call = json!({"jsonrpc": "2.0", "method": "tools/call", "id": 1,
        "params": {"name": "big", "arguments": {}}});
    let (status, body) =
        super::harness::http(server.addr, "POST", "/mcp", &[], Some(&call.to_string()));
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!(r#""big":{FACTORIAL_200}"#)),
        "the info's int is not verbatim in {body:.400}"
    );
    assert!(body.contains(r#""data":"Tool result:\nok""#), "{body:.400}");

    // The same in a WebSocket session: the reset's observation frame, then an `mcp` message.
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let mut ws = super::harness::ws_connect(server.addr, None).await.unwrap();
    let mut exchange = async |message: Value| {
        ws.send(Message::Text(message.to_string().into()))
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(120), ws.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => text.to_string(),
            other => panic!("expected an answer to {message}, got {other:?}"),
        }
    };
    let reset = exchange(json!({"type": "reset", "data": {}})).await;
    assert!(
        reset.starts_with(r#"{"type":"observation""#),
        "{reset:.200}"
    );
    assert!(
        reset.contains(&format!(r#""big":{FACTORIAL_200}"#)),
        "{reset:.400}"
    );
    let text = exchange(json!({"type": "mcp", "data": call})).await;
    assert!(
        text.starts_with(r#"{"type":"mcp","data":{"jsonrpc":"2.0","id":1,"result":"#),
        "{text:.200}"
    );
    assert!(
        text.contains(&format!(r#""big":{FACTORIAL_200}"#)),
        "{text:.400}"
    );

    // The server is still up.
    let (status, _) = http_json(server.addr, "GET", "/health", &[], None);
    assert_eq!(status, 200);
}

/// JSON-RPC 2.0: a notification (a request without `id`) is never answered: 202 with no body
/// over HTTP, no frame on a WebSocket (the next answer is the next request's).
#[tokio::test]
async fn notifications_get_no_answer() {
    let server = ServeProcess::start(&[&env_path("tool_inventory")]);
    let notification = json!({"jsonrpc": "2.0", "method": "tools/list"});
    let (status, body) = super::harness::http(
        server.addr,
        "POST",
        "/mcp",
        &[],
        Some(&notification.to_string()),
    );
    assert_eq!((status, body.as_str()), (202, ""));
    // A session created by a notification could never be named: none is created.
    let create = json!({"jsonrpc": "2.0", "method": "openenv/session/create"});
    let (status, _) =
        super::harness::http(server.addr, "POST", "/mcp", &[], Some(&create.to_string()));
    assert_eq!(status, 202);
    assert_eq!(active_sessions(&server), 0);

    let mut ws = super::harness::ws_connect(server.addr, None).await.unwrap();
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let frame = json!({"type": "mcp", "data": notification});
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
    let request =
        json!({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list", "id": "second"}});
    let answer = ws_call(&mut ws, request).await;
    assert_eq!(answer["data"]["id"], "second", "{answer}");
}
