//! One admission path: HTTP `/reset` and `/step` take session slots as WebSocket sessions do,
//! the memory budget bounds the sessions, a failed reset keeps the running episode, and the
//! close codes and session errors are the documented ones.

use serde_json::json;

use super::env_path;
use super::harness::{ServeProcess, assert_error, http_json, ws_call, ws_connect, ws_next};

#[tokio::test]
async fn http_reset_and_step_take_session_slots_and_are_refused_at_capacity() {
    let server = ServeProcess::start(&[&env_path("grid_walk"), "--max-sessions", "1"]);
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    assert_eq!(
        ws_call(&mut ws, json!({"type": "reset"})).await["type"],
        "observation"
    );
    // The one slot is the WebSocket session's: both stateless endpoints are refused at once.
    let step = json!({"action": {"message": "\\boxed{down}"}}).to_string();
    for (path, body) in [("/reset", "{}"), ("/step", step.as_str())] {
        let (status, answer) = http_json(server.addr, "POST", path, &[], Some(body));
        assert_eq!(status, 503, "{path}: {answer}");
        assert_eq!(
            answer,
            json!({
                "detail": "Server at capacity: 1/1 sessions active. Cannot accept new connections.",
                "code": "CAPACITY_REACHED",
                "active_sessions": 1,
                "max_sessions": 1,
            }),
            "{path}"
        );
    }
    let (_, health) = http_json(server.addr, "GET", "/health", &[], None);
    assert_eq!(health["sessions"], json!({"active": 1, "max": 1}));
    ws.close(None).await.unwrap();
    drop(ws);
    // Once the session is gone its slot serves HTTP again (the close is asynchronous: wait
    // for the slot to be released).
    let mut freed = false;
    for _ in 0..100 {
        let (_, health) = http_json(server.addr, "GET", "/health", &[], None);
        if health["sessions"]["active"] == 0 {
            freed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(freed, "the closed session's slot was not released");
    let (status, reset) = http_json(
        server.addr,
        "POST",
        "/reset",
        &[],
        Some(r#"{"seed": 7, "episode_id": "http-ep"}"#),
    );
    assert_eq!(status, 200, "{reset}");
    // The episode id a client gives is the one the answer names.
    assert_eq!(reset["metadata"]["episode_id"], "http-ep");
    let (status, answer) = http_json(server.addr, "POST", "/step", &[], Some(&step));
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn a_failed_reset_leaves_the_running_episode_as_it_was() {
    let record = tempfile::tempdir().unwrap();
    let server = ServeProcess::start(&[
        &env_path("grid_walk"),
        &env_path("brace_crash"),
        "--record-dir",
        record.path().to_str().unwrap(),
    ]);
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    let first = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"env_id": "grid_walk", "seed": 7, "episode_id": "kept"}}),
    )
    .await;
    assert_eq!(first["type"], "observation", "{first}");
    let step = json!({"type": "step", "data": {"message": "\\boxed{down}"}});
    assert_eq!(ws_call(&mut ws, step.clone()).await["type"], "observation");
    // A typo, a rejected environment and an episode id already taken: each fails, and none
    // touches the running episode.
    let typo = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"env_id": "typo"}}),
    )
    .await;
    assert_error(&typo, "VALIDATION_ERROR", "unknown environment id 'typo'");
    let rejected = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"env_id": "brace_crash"}}),
    )
    .await;
    assert_error(
        &rejected,
        "VALIDATION_ERROR",
        "environment 'brace_crash' was rejected by spade check",
    );
    let taken = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"env_id": "grid_walk", "episode_id": "kept"}}),
    )
    .await;
    assert_error(
        &taken,
        "VALIDATION_ERROR",
        "episode id 'kept' is already used by a recorded trajectory",
    );
    let state = ws_call(&mut ws, json!({"type": "state"})).await;
    assert_eq!(
        (
            &state["data"]["episode_id"],
            &state["data"]["step_count"],
            &state["data"]["done"]
        ),
        (&json!("kept"), &json!(1), &json!(false)),
        "{state}"
    );
    let second = ws_call(&mut ws, step).await;
    assert_eq!(second["type"], "observation", "{second}");
    assert_eq!(second["data"]["metadata"]["step_count"], 2);
    assert_eq!(second["data"]["metadata"]["episode_id"], "kept");
}

#[tokio::test]
async fn a_message_over_the_hard_cap_is_closed_with_1009() {
    let server = ServeProcess::start(&[&env_path("grid_walk"), "--max-message-bytes", "4096"]);
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    assert_eq!(
        ws_call(&mut ws, json!({"type": "reset"})).await["type"],
        "observation"
    );
    let huge = json!({"type": "step", "data": {"message": "x".repeat(20_000)}}).to_string();
    use futures_util::SinkExt as _;
    ws.send(tokio_tungstenite::tungstenite::Message::Text(huge.into()))
        .await
        .unwrap();
    assert_eq!(ws_next(&mut ws).await, Err(Some(1009)));
}
