//! The wire protocol: the stock OpenEnv client against `spade run`, registration, the HTTP
//! endpoints, malformed messages.

use serde_json::{Value, json};

use super::harness::{
    ServeProcess, assert_error, detail, http, http_json, run_python, ws_call, ws_connect, ws_send,
};
use super::{PLAYABLE, REJECTED, env_path};
use crate::common::{env_dir, spade, stdout};

/// `spade run --json` lines of a fixture, without the load and end lines and without the
/// printed output (which is not part of an observation).
fn spade_run_lines(name: &str, seed: u64) -> Vec<String> {
    let env = env_path(name);
    let actions = format!("tests/envs/{name}/actions.txt");
    let output = spade(&[
        "run",
        &env,
        "--seed",
        &seed.to_string(),
        "--actions",
        &actions,
        "--json",
    ]);
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|v| v["call"] != "load" && v["call"] != "end")
        .map(|mut v| {
            let object = v.as_object_mut().unwrap();
            for key in ["stdout", "stderr", "output_dropped_bytes"] {
                object.remove(key);
            }
            v.to_string()
        })
        .collect()
}

#[test]
fn the_stock_openenv_client_plays_every_fixture_as_spade_run_does() {
    let mut args: Vec<String> = PLAYABLE.iter().map(|n| env_path(n)).collect();
    args.extend(REJECTED.iter().map(|(n, _)| env_path(n)));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = ServeProcess::start(&args);
    for name in PLAYABLE {
        let expected = spade_run_lines(name, 7);
        let actions = env_dir(name).join("actions.txt").display().to_string();
        let out = run_python(
            "tests/drive_stock.py",
            &[&server.url(), name, "7", &actions],
        );
        // The Python client's JSON, re-serialised by serde_json: same key order, same numbers.
        let got: Vec<String> = out
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap().to_string())
            .collect();
        assert!(!expected.is_empty());
        assert_eq!(got.len(), expected.len(), "{name}: {out}");
        for (got, want) in got.iter().zip(&expected) {
            assert_eq!(got, want, "{name}");
        }
    }
    for (name, code) in REJECTED {
        let out = run_python(
            "tests/drive_stock.py",
            &[
                &server.url(),
                name,
                "7",
                &env_dir(name).join("actions.txt").display().to_string(),
            ],
        );
        let line: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        let error = line["error"].as_str().unwrap();
        assert!(
            error.contains("rejected by spade check") && error.contains(code),
            "{name}: {error}"
        );
        assert!(error.contains("(code: VALIDATION_ERROR)"), "{error}");
    }
    let stderr = server.stderr();
    assert!(
        stderr.contains("registered grid_walk (GridWalkEnv): accepted"),
        "{stderr}"
    );
    assert!(stderr.contains("registered never_ends"), "{stderr}");
}

/// Faulty fixtures and their rejecting finding, as in the probe table of docs/check-and-fuzz.md.
const FAULTY: &[(&str, &str, Option<&str>)] = &[
    ("fault_syntax_error", "load_failed", Some("load")),
    ("fault_no_env_class", "load_failed", Some("load")),
    ("fault_two_env_classes", "load_failed", Some("load")),
    ("fault_import_numpy", "load_failed", Some("load")),
    ("fault_reset_raises", "reset_failed", Some("exception")),
    (
        "fault_step_four_tuple",
        "probe_step_failed",
        Some("contract"),
    ),
    ("fault_nan_reward", "probe_step_failed", Some("contract")),
    ("fault_info_not_dict", "reset_failed", Some("contract")),
    (
        "fault_self_reference",
        "probe_step_failed",
        Some("contract"),
    ),
    ("fault_open_passwd", "probe_step_failed", Some("exception")),
    (
        "fault_infinite_loop",
        "probe_step_failed",
        Some("out_of_fuel"),
    ),
    (
        "fault_solution_not_str",
        "solution_failed",
        Some("contract"),
    ),
];

#[tokio::test]
async fn registering_a_faulty_env_returns_the_check_verdict_and_it_cannot_be_reset() {
    // A smaller fuel budget keeps the infinite loop short.
    let server = ServeProcess::start(&["--fuel", "300000000"]);
    for (name, code, kind) in FAULTY {
        let source = std::fs::read_to_string(env_dir(name).join("env.py")).unwrap();
        let body = json!({"source": source, "id": name}).to_string();
        let (status, reg) = http_json(server.addr, "POST", "/envs", &[], Some(&body));
        assert_eq!(status, 201, "{name}: {reg}");
        assert_eq!(reg["id"], *name);
        assert_eq!(reg["accepted"], false, "{name}: {reg}");
        assert_eq!(reg["verdict"]["accepted"], false);
        let finding = reg["verdict"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == *code)
            .unwrap_or_else(|| panic!("{name}: no {code} in {reg}"));
        assert_eq!(finding["severity"], "error");
        assert_eq!(finding["kind"].as_str(), *kind, "{name}");
        // Registering it again answers the same verdict.
        let (status, again) = http_json(server.addr, "POST", "/envs", &[], Some(&body));
        assert_eq!((status, &again["verdict"]), (200, &reg["verdict"]));
    }
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    for (name, code, _) in FAULTY {
        let answer = ws_call(&mut ws, json!({"type": "reset", "data": {"env_id": name}})).await;
        assert_error(
            &answer,
            "VALIDATION_ERROR",
            &format!("environment '{name}' was rejected by spade check"),
        );
        assert_error(&answer, "VALIDATION_ERROR", code);
    }
    // Several registered: a reset must name one.
    let answer = ws_call(&mut ws, json!({"type": "reset"})).await;
    assert_error(
        &answer,
        "VALIDATION_ERROR",
        "12 environments are registered, so reset needs an env_id",
    );
    // Listing and one registration.
    let (status, list) = http_json(server.addr, "GET", "/envs", &[], None);
    assert_eq!(status, 200);
    assert_eq!(list["envs"].as_array().unwrap().len(), FAULTY.len());
    let (status, one) = http_json(server.addr, "GET", "/envs/fault_nan_reward", &[], None);
    assert_eq!((status, one["accepted"].clone()), (200, json!(false)));
    let (status, err) = http_json(server.addr, "GET", "/envs/nope", &[], None);
    assert_eq!(status, 404);
    assert!(
        detail(&err).contains("unknown environment id 'nope'"),
        "{err}"
    );
    // Bad registrations.
    for (body, needle) in [
        (r#"{"source": ""}"#, "the environment source is empty"),
        (r#"{"id": "x"}"#, "the request has no 'source'"),
        (
            r#"{"source": "x", "ID": 1}"#,
            "unknown or mistyped field 'ID'",
        ),
        (
            r#"{"source": "x", "id": "../etc"}"#,
            "environment id '../etc' is not valid",
        ),
        ("[1]", "must be a JSON object, not an array"),
        ("{", "Invalid JSON"),
    ] {
        let (status, err) = http_json(server.addr, "POST", "/envs", &[], Some(body));
        assert_eq!(status, 422, "{body}: {err}");
        assert!(detail(&err).contains(needle), "{body}: {err}");
    }
    let (status, err) = http_json(
        server.addr,
        "POST",
        "/envs",
        &[],
        Some(&json!({"source": "class OtherEnv: pass", "id": "fault_nan_reward"}).to_string()),
    );
    assert_eq!(status, 409, "{err}");
    assert!(detail(&err).contains("already registered with a different source"));
}

#[tokio::test]
async fn malformed_messages_get_the_protocol_errors_and_the_session_goes_on() {
    let server = ServeProcess::start(&[&env_path("grid_walk"), "--max-message-bytes", "4096"]);
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    let mut other = ws_connect(server.addr, None).await.unwrap();
    let first = ws_call(&mut other, json!({"type": "reset", "data": {"seed": 7}})).await;
    assert_eq!(first["type"], "observation");

    assert_error(
        &ws_send(&mut ws, "{not json").await,
        "INVALID_JSON",
        "Invalid JSON: key must be a string",
    );
    assert_error(
        &ws_call(&mut ws, json!({"type": "dance"})).await,
        "UNKNOWN_TYPE",
        "Unknown message type: dance",
    );
    assert_error(
        &ws_call(&mut ws, json!({"data": {}})).await,
        "UNKNOWN_TYPE",
        "no 'type' field",
    );
    assert_error(
        &ws_send(&mut ws, "[1, 2]").await,
        "VALIDATION_ERROR",
        "must be a JSON object with a 'type', not an array",
    );
    // A step in a session that never had an episode: a session error, so that a client that
    // reconnected after its session was reaped can tell what happened.
    assert_error(
        &ws_call(&mut ws, json!({"type": "step", "data": {"message": "x"}})).await,
        "SESSION_ERROR",
        "is new and has no episode: send reset before step (a client that reconnected after its session was closed, for example after the idle timeout, is in a new session)",
    );
    assert_error(
        &ws_call(
            &mut ws,
            json!({"type": "reset", "data": {"env_id": "grid_wlak"}}),
        )
        .await,
        "VALIDATION_ERROR",
        "unknown environment id 'grid_wlak' (registered: grid_walk)",
    );
    assert_error(
        &ws_call(&mut ws, json!({"type": "reset", "data": {"seed": "seven"}})).await,
        "VALIDATION_ERROR",
        "reset field 'seed' must be a non-negative integer, not \"seven\"",
    );
    // OpenEnv's errors list, with the field's location.
    let mistyped = ws_call(&mut ws, json!({"type": "reset", "data": {"seed": "seven"}})).await;
    assert_eq!(
        mistyped["data"]["errors"],
        json!([{
            "type": "value_error",
            "loc": ["data", "seed"],
            "msg": "reset field 'seed' must be a non-negative integer, not \"seven\"",
        }])
    );
    // Fields spade does not take are dropped, as OpenEnv drops what reset() does not take
    // (dataset rows carry extra columns), and named in the metadata.
    let extra = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"sede": 7, "prompt": "a dataset column"}}),
    )
    .await;
    assert_eq!(extra["type"], "observation", "{extra}");
    assert_eq!(
        extra["data"]["metadata"]["ignored_reset_fields"],
        json!(["sede", "prompt"])
    );
    assert_error(
        &ws_call(&mut ws, json!({"type": "state", "extra": 1})).await,
        "VALIDATION_ERROR",
        "unknown field 'extra' in a state message",
    );
    // A message over --max-message-bytes (but under the 4x hard cap) is a protocol error.
    let big = json!({"type": "step", "data": {"message": "x".repeat(5000)}}).to_string();
    assert_error(
        &ws_send(&mut ws, &big).await,
        "VALIDATION_ERROR",
        "bytes is over the limit of 4096 bytes",
    );
    // Binary frames are refused with a message.
    use futures_util::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::Binary(
        vec![1, 2].into(),
    ))
    .await
    .unwrap();
    assert_error(
        &super::harness::ws_next(&mut ws).await.unwrap(),
        "INVALID_JSON",
        "binary frames are not supported",
    );

    // The session still works: a reset without an id uses the only env, and steps follow.
    let reset = ws_call(&mut ws, json!({"type": "reset", "data": {"seed": 7}})).await;
    assert_eq!(reset["type"], "observation", "{reset}");
    assert_eq!(
        reset["data"]["observation"]["metadata"]["env_id"],
        "grid_walk"
    );
    assert_eq!(reset["data"]["reward"], Value::Null);
    assert_error(
        &ws_call(&mut ws, json!({"type": "step", "data": {"message": 1}})).await,
        "VALIDATION_ERROR",
        "action field 'message' must be a string, not a number",
    );
    assert_error(
        &ws_call(&mut ws, json!({"type": "step", "data": {"code": "x"}})).await,
        "VALIDATION_ERROR",
        "unknown action field 'code'",
    );
    let step = ws_call(
        &mut ws,
        json!({"type": "step", "data": {"message": "\\boxed{right}"}}),
    )
    .await;
    assert_eq!(step["type"], "observation", "{step}");
    assert_eq!(step["data"]["observation"]["metadata"]["step_count"], 1);
    let state = ws_call(&mut ws, json!({"type": "state"})).await;
    assert_eq!(state["type"], "state");
    assert_eq!(state["data"]["step_count"], 1);
    assert_eq!(state["data"]["env_id"], "grid_walk");
    assert_eq!(state["data"]["seed"], 7);

    // Past the hard cap the connection is closed (1009); other sessions are untouched.
    let huge = json!({"type": "step", "data": {"message": "x".repeat(20_000)}}).to_string();
    ws.send(tokio_tungstenite::tungstenite::Message::Text(huge.into()))
        .await
        .unwrap();
    let closed = super::harness::ws_next(&mut ws).await;
    assert_eq!(closed, Err(Some(1009)));
    let step = ws_call(
        &mut other,
        json!({"type": "step", "data": {"message": "\\boxed{right}"}}),
    )
    .await;
    assert_eq!(step["type"], "observation", "{step}");
    // A close message ends the session with a normal close.
    use futures_util::StreamExt as _;
    other
        .send(tokio_tungstenite::tungstenite::Message::Text(
            json!({"type": "close"}).to_string().into(),
        ))
        .await
        .unwrap();
    let end = other.next().await;
    assert!(
        matches!(&end, Some(Ok(tokio_tungstenite::tungstenite::Message::Close(Some(f)))) if u16::from(f.code) == 1000),
        "{end:?}"
    );
}

#[test]
fn http_endpoints_follow_openenv() {
    let server = ServeProcess::start(&[&env_path("grid_walk"), "--max-message-bytes", "2048"]);
    let addr = server.addr;
    let sessions = super::max_sessions_fitting();
    let (status, mut health) = http_json(addr, "GET", "/health", &[], None);
    let budget = health["memory"]["budget"].clone();
    // What the runtime's caches hold is checked in serve::caches.
    assert!(health["caches"]["sources"].is_u64(), "{health}");
    health.as_object_mut().unwrap().remove("caches");
    assert_eq!(
        (status, health),
        (
            200,
            json!({
                "status": "healthy",
                "envs": {"ready": 1, "rejected": 0, "checking": 0},
                "sessions": {"active": 0, "max": sessions},
                "memory": {"charged": 0, "budget": budget},
            })
        )
    );
    let (status, meta) = http_json(addr, "GET", "/metadata", &[], None);
    assert_eq!(status, 200);
    assert_eq!(meta["name"], "spade");
    assert!(
        meta["description"]
            .as_str()
            .unwrap()
            .contains("grid_walk (accepted)"),
        "{meta}"
    );
    let (status, schema) = http_json(addr, "GET", "/schema", &[], None);
    assert_eq!(status, 200);
    assert_eq!(schema["action"]["required"], json!(["message"]));
    for key in ["observation", "state", "reset_observation"] {
        assert!(schema[key].is_object(), "{key}");
    }
    // /state has the shape /schema advertises.
    assert_eq!(
        http_json(addr, "GET", "/state", &[], None),
        (
            200,
            json!({"episode_id": null, "step_count": 0, "env_id": null, "seed": null, "done": false, "session_id": null})
        )
    );
    let state_schema = schema["state"]["properties"].as_object().unwrap();
    let (_, state) = http_json(addr, "GET", "/state", &[], None);
    assert_eq!(
        state.as_object().unwrap().keys().collect::<Vec<_>>(),
        state_schema.keys().collect::<Vec<_>>()
    );
    // POST /reset: a fresh environment each time, same answer as a session's reset.
    let (status, reset) = http_json(
        addr,
        "POST",
        "/reset",
        &[],
        Some(r#"{"seed": 7, "hint": "h"}"#),
    );
    assert_eq!(status, 200, "{reset}");
    let expected = spade_run_lines("grid_walk", 7);
    let first: Value = serde_json::from_str(&expected[0]).unwrap();
    assert_eq!(
        reset["observation"]["text"].as_str().unwrap(),
        format!("{}\n\nHINT: h", first["observation"].as_str().unwrap())
    );
    assert_eq!(reset["observation"]["info"], first["info"]);
    assert_eq!(
        (reset["reward"].clone(), reset["done"].clone()),
        (Value::Null, json!(false))
    );
    let (status, empty) = http_json(addr, "POST", "/reset", &[], None);
    assert_eq!(status, 200, "{empty}");
    // POST /step: a fresh environment, no reset first (OpenEnv's stateless semantics).
    let (status, step) = http_json(
        addr,
        "POST",
        "/step",
        &[],
        Some(r#"{"action": {"message": "\\boxed{right}"}}"#),
    );
    assert!(status == 200 || status == 500, "{status} {step}");
    let (status, err) = http_json(addr, "POST", "/step", &[], Some(r#"{"action": {}}"#));
    assert_eq!(status, 422);
    // FastAPI's validation shape: detail is a list of {type, loc, msg}.
    assert_eq!(
        err["detail"],
        json!([{
            "type": "value_error",
            "loc": ["body", "action", "message"],
            "msg": "the action has no 'message' field (the action is {\"message\": \"<the model's reply>\"})",
        }])
    );
    assert!(detail(&err).contains("no 'message' field"), "{err}");
    let (status, err) = http_json(addr, "POST", "/step", &[], Some("{}"));
    assert_eq!(status, 422);
    assert!(
        detail(&err).contains("the request has no 'action'"),
        "{err}"
    );
    let (status, err) = http_json(addr, "POST", "/reset", &[], Some("{oops"));
    assert_eq!(status, 422);
    assert!(detail(&err).starts_with("Invalid JSON"), "{err}");
    let (status, err) = http_json(addr, "POST", "/reset", &[], Some(r#"{"env_id": "nope"}"#));
    assert_eq!(status, 422);
    assert!(
        detail(&err).contains("unknown environment id 'nope'"),
        "{err}"
    );
    let big = format!(r#"{{"seed": 1, "hint": "{}"}}"#, "x".repeat(4000));
    let (status, err) = http_json(addr, "POST", "/reset", &[], Some(&big));
    assert_eq!(status, 413, "{err}");
    assert!(detail(&err).contains("over the size limit"), "{err}");
    let (status, err) = http_json(addr, "GET", "/trajectories/x", &[], None);
    assert_eq!(status, 404);
    assert!(detail(&err).contains("--record-dir"), "{err}");
    let (status, _) = http(addr, "GET", "/nowhere", &[], None);
    assert_eq!(status, 404);
}

#[test]
fn the_schema_of_one_environment_carries_its_tools() {
    let server = ServeProcess::start(&[&env_path("grid_walk"), &env_path("tool_inventory")]);
    let (status, tools) = http_json(
        server.addr,
        "GET",
        "/schema?env_id=tool_inventory",
        &[],
        None,
    );
    assert_eq!(status, 200, "{tools}");
    assert_eq!(tools["env_id"], "tool_inventory");
    assert_eq!(tools["class_name"], "InventoryValueEnv");
    // The fixture's two tools, as its get_tools() lists them (OpenAI function format).
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {tools}"))
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_price", "get_stock"]);
    assert_eq!(
        tools["tools"][0]["function"]["parameters"]["required"],
        json!(["item"])
    );
    let (status, plain) = http_json(server.addr, "GET", "/schema?env_id=grid_walk", &[], None);
    assert_eq!(status, 200);
    assert_eq!(plain["class_name"], "GridWalkEnv");
    assert!(plain.get("tools").is_none(), "{plain}");
    // Without env_id, the server's schema, as before.
    let (_, server_wide) = http_json(server.addr, "GET", "/schema", &[], None);
    assert!(server_wide.get("env_id").is_none());
    // /metadata too, per environment.
    let (status, meta) = http_json(
        server.addr,
        "GET",
        "/metadata?env_id=tool_inventory",
        &[],
        None,
    );
    assert_eq!(status, 200, "{meta}");
    assert_eq!(meta["name"], "tool_inventory");
    let description = meta["description"].as_str().unwrap();
    assert!(
        description.starts_with(
            "InventoryValueEnv: a tool-use environment with 2 tools (MCP: tools/list, tools/call); accepted by spade check."
        ),
        "{description}"
    );
    let (_, meta) = http_json(server.addr, "GET", "/metadata?env_id=grid_walk", &[], None);
    assert!(
        meta["description"]
            .as_str()
            .unwrap()
            .starts_with("GridWalkEnv: a plain environment"),
        "{meta}"
    );
    let (status, _) = http_json(server.addr, "GET", "/metadata?env_id=nope", &[], None);
    assert_eq!(status, 404);
    let (status, missing) = http_json(server.addr, "GET", "/schema?env_id=nope", &[], None);
    assert_eq!(status, 404);
    assert_eq!(
        missing["detail"],
        "unknown environment id 'nope' (registered: grid_walk, tool_inventory)"
    );
}

#[tokio::test]
async fn extra_reset_fields_reach_the_reset_that_takes_them_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("traj");
    let server = ServeProcess::start(&[
        &super::serve_fixture("difficulty_guess.py"),
        "--record-dir",
        record.to_str().unwrap(),
    ]);
    // reset(seed=None, difficulty=1, *, label="plain") takes difficulty and label; the dataset
    // column is dropped and named.
    let fields = json!({"seed": 5, "episode_id": "hard", "difficulty": 3, "label": "hard",
        "prompt": "a dataset column"});
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    let reset = ws_call(&mut ws, json!({"type": "reset", "data": fields})).await;
    assert_eq!(reset["type"], "observation", "{reset}");
    let observation = &reset["data"]["observation"];
    assert_eq!(
        observation["text"],
        "Guess a number from 1 to 1000 (hard). Answer in \\boxed{}."
    );
    assert_eq!(
        observation["info"],
        json!({"difficulty": 3, "label": "hard"})
    );
    assert_eq!(
        reset["data"]["metadata"]["ignored_reset_fields"],
        json!(["prompt"])
    );
    // Without the fields, reset's defaults.
    let (status, plain) = http_json(server.addr, "POST", "/reset", &[], Some(r#"{"seed": 5}"#));
    assert_eq!(status, 200, "{plain}");
    assert_eq!(
        plain["observation"]["text"],
        "Guess a number from 1 to 10 (plain). Answer in \\boxed{}."
    );
    assert!(
        plain["metadata"].get("ignored_reset_fields").is_none(),
        "{plain}"
    );
    // A field of the wrong type for the environment is its exception; the episode goes on.
    let bad = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"difficulty": "three"}}),
    )
    .await;
    assert_error(&bad, "EXECUTION_ERROR", "ValueError");
    let step = ws_call(
        &mut ws,
        json!({"type": "step", "data": {"message": "\\boxed{1}"}}),
    )
    .await;
    assert_eq!(step["data"]["metadata"]["episode_id"], "hard", "{step}");
    drop(ws);
    // The recording keeps the fields and replays.
    let file = record.join("hard.jsonl");
    let text = recording_with_footer(&file);
    let reset_line: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["call"] == "reset")
        .unwrap();
    assert_eq!(
        reset_line["fields"],
        json!({"difficulty": 3, "label": "hard", "prompt": "a dataset column"})
    );
    assert_eq!(reset_line["ok"]["dropped"], json!(["prompt"]));
    let replay = spade(&["replay", file.to_str().unwrap()]);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}",
        crate::common::stderr(&replay)
    );
}

/// Issue 53 (Low): integer reset fields of any size reach `reset` as Python's `json.loads`
/// gives them, as OpenEnv's server passes them: `2**64 + 1` arrived as a float and `10**400`
/// was refused. Over WebSocket and HTTP, and the recording keeps the digits and replays.
#[tokio::test]
async fn integer_reset_fields_of_any_size_arrive_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("traj");
    let server = ServeProcess::start(&[
        &super::serve_fixture("big_fields.py"),
        "--record-dir",
        record.to_str().unwrap(),
    ]);
    let ten_400 = format!("1{}", "0".repeat(400));
    let data =
        format!(r#"{{"seed": 1, "episode_id": "big", "n": 18446744073709551617, "m": {ten_400}}}"#);
    let expected = json!({"n": "18446744073709551617", "n_type": "int", "m_digits": 401,
        "m_type": "int"});
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    let reset = ws_send(&mut ws, &format!(r#"{{"type": "reset", "data": {data}}}"#)).await;
    assert_eq!(reset["type"], "observation", "{reset}");
    assert_eq!(reset["data"]["observation"]["info"], expected);
    // The environment compares the echo with its int: exact, so it wins.
    let step = ws_call(
        &mut ws,
        json!({"type": "step", "data": {"message": "\\boxed{18446744073709551617}"}}),
    )
    .await;
    assert_eq!(step["data"]["reward"], 1.0, "{step}");
    drop(ws);
    let (status, http) = http_json(server.addr, "POST", "/reset", &[], Some(&data));
    assert_eq!(status, 200, "{http}");
    assert_eq!(http["observation"]["info"], expected);
    // spade's own fields still refuse a number out of range, naming the field.
    let (status, bad) = http_json(
        server.addr,
        "POST",
        "/reset",
        &[],
        Some(&format!(r#"{{"seed": {ten_400}}}"#)),
    );
    assert_eq!(status, 422, "{bad}");
    assert!(
        detail(&bad).contains("reset field 'seed' is a number out of range"),
        "{bad}"
    );
    // The recording keeps the digits as sent, and replays.
    let file = record.join("big.jsonl");
    let text = recording_with_footer(&file);
    assert!(
        text.contains(&format!(
            r#""fields":{{"n":18446744073709551617,"m":{ten_400}}}"#
        )),
        "{text:.2000}"
    );
    let replay = spade(&["replay", file.to_str().unwrap()]);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}",
        crate::common::stderr(&replay)
    );
}

/// `openenv validate URL` (the stock CLI) passes every check against `spade serve`, the
/// OpenAPI document's (`openapi_version_available`, `mode_endpoint_consistency`) included.
#[test]
fn openenv_validate_passes_against_spade_serve() {
    let server = super::harness::ServeProcess::start(&[&super::env_path("grid_walk")]);
    let python = super::harness::python();
    let openenv = python.parent().unwrap().join("openenv");
    let out = std::process::Command::new(&openenv)
        .args(["validate", &server.url(), "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "openenv validate failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["passed"], true, "{report:#}");
    assert_eq!(report["mode"], "simulation", "{report:#}");
    let criteria = report["criteria"].as_array().unwrap();
    for id in ["openapi_version_available", "mode_endpoint_consistency"] {
        let found = criteria.iter().find(|c| c["id"] == id).expect(id);
        assert_eq!(found["passed"], true, "{found:#}");
    }
    assert!(criteria.iter().all(|c| c["passed"] == true), "{report:#}");
}

/// The text of a recording once its footer is written (at most 5 s after its episode ended).
fn recording_with_footer(file: &std::path::Path) -> String {
    for _ in 0..200 {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.contains("\"type\":\"footer\"") {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    std::fs::read_to_string(file).unwrap()
}
