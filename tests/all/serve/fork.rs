//! Forking a session (a spade extension): the `fork` WebSocket message and
//! `POST /sessions/{id}/fork` copy a running episode into new held sessions of the same
//! tenant, under the same session slots as any session, recorded as forks of its trajectory.

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::env_path;
use super::harness::{ServeProcess, Ws, assert_error, http_json, ws_call, ws_connect};
use crate::common::{spade, stderr, stdout};

/// Attaches to held session `id` as `token`.
async fn attach(server: &ServeProcess, id: &str, token: Option<&str>) -> Ws {
    let mut request = format!("ws://{}/ws?session_id={id}", server.addr)
        .into_client_request()
        .unwrap();
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    }
    tokio_tungstenite::connect_async(request).await.unwrap().0
}

fn step(message: &str) -> Value {
    json!({"type": "step", "data": {"message": message}})
}

fn session_ids(answer: &Value) -> Vec<String> {
    assert_eq!(answer["type"], "fork", "{answer}");
    answer["data"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn forked_sessions_go_on_from_the_state_and_replay_as_forks() {
    let records = tempfile::tempdir().unwrap();
    let server = ServeProcess::start(&[
        &env_path("grid_walk"),
        "--record-dir",
        records.path().to_str().unwrap(),
    ]);
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    let reset = ws_call(&mut ws, json!({"type": "reset", "data": {"seed": 4}})).await;
    assert_eq!(reset["type"], "observation", "{reset}");
    ws_call(&mut ws, step("\\boxed{down}")).await;
    let forked = ws_call(&mut ws, json!({"type": "fork", "data": {"n": 2}})).await;
    let ids = session_ids(&forked);
    assert_eq!(ids.len(), 2);
    // Each copy is at step 1 of the same episode: the same action gives the same answer.
    let theirs = ws_call(&mut ws, step("\\boxed{right}")).await;
    for id in &ids {
        let mut copy = attach(&server, id, None).await;
        let state = ws_call(&mut copy, json!({"type": "state"})).await;
        assert_eq!(state["data"]["step_count"], 1, "{state}");
        let ours = ws_call(&mut copy, step("\\boxed{right}")).await;
        assert_eq!(
            ours["data"]["observation"]["text"],
            theirs["data"]["observation"]["text"]
        );
        assert_eq!(ours["data"]["reward"], theirs["data"]["reward"]);
        assert_eq!(
            ours["data"]["observation"]["metadata"]["fuel"],
            theirs["data"]["observation"]["metadata"]["fuel"]
        );
        assert_eq!(
            ours["data"]["observation"]["metadata"]["episode_id"],
            format!("{id}-0")
        );
        ws_call(&mut copy, step("\\boxed{left}")).await;
    }
    drop(ws);
    // Each copy's trajectory names the parent's and replays with it.
    let forks: Vec<_> = ids
        .iter()
        .map(|id| records.path().join(format!("{id}-0.jsonl")))
        .collect();
    for path in &forks {
        let header: Value = serde_json::from_str(
            std::fs::read_to_string(path)
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            header["fork"]["at"], 3,
            "load, reset and one step before the fork"
        );
        assert!(
            records
                .path()
                .join(header["fork"]["parent"].as_str().unwrap())
                .exists()
        );
    }
    let mut server = server;
    server.terminate();
    for path in &forks {
        let replayed = spade(&["replay", path.to_str().unwrap()]);
        assert!(replayed.status.success(), "{}", stderr(&replayed));
        assert!(
            stdout(&replayed).starts_with("identical:"),
            "{}",
            stdout(&replayed)
        );
    }
}

#[tokio::test]
async fn a_fork_takes_session_slots_all_or_none() {
    let server = ServeProcess::start(&[&env_path("grid_walk"), "--max-sessions", "3"]);
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    // Before a reset there is nothing to fork.
    let early = ws_call(&mut ws, json!({"type": "fork"})).await;
    assert_error(
        &early,
        "VALIDATION_ERROR",
        "no episode is running: send reset before fork",
    );
    ws_call(&mut ws, json!({"type": "reset", "data": {"seed": 1}})).await;
    // One slot is this session's: 3 copies do not fit, and none is made.
    let full = ws_call(&mut ws, json!({"type": "fork", "data": {"n": 3}})).await;
    assert_error(
        &full,
        "CAPACITY_REACHED",
        "Server at capacity: 1/3 sessions active",
    );
    let (_, health) = http_json(server.addr, "GET", "/health", &[], None);
    assert_eq!(health["sessions"]["active"], 1, "{health}");
    let two = ws_call(
        &mut ws,
        json!({"type": "fork", "data": {"n": 2, "reseed": [null, 9]}}),
    )
    .await;
    assert_eq!(session_ids(&two).len(), 2);
    let (_, health) = http_json(server.addr, "GET", "/health", &[], None);
    assert_eq!(health["sessions"]["active"], 3, "{health}");
    let more = ws_call(&mut ws, json!({"type": "fork"})).await;
    assert_error(&more, "CAPACITY_REACHED", "3/3 sessions active");
    // Bad requests say what is wrong.
    let bad = ws_call(&mut ws, json!({"type": "fork", "data": {"n": 0}})).await;
    assert_error(
        &bad,
        "VALIDATION_ERROR",
        "n must be an integer from 1 to 1024, not 0",
    );
    let bad = ws_call(
        &mut ws,
        json!({"type": "fork", "data": {"n": 2, "reseed": 5}}),
    )
    .await;
    assert_error(&bad, "VALIDATION_ERROR", "with n above 1, reseed is a list");
    let bad = ws_call(&mut ws, json!({"type": "fork", "data": {"copies": 2}})).await;
    assert_error(&bad, "VALIDATION_ERROR", "unknown fork field 'copies'");
}

#[tokio::test]
async fn another_token_cannot_attach_to_or_fork_a_tenants_session() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alpha-token\nbeta-token\n").unwrap();
    let server = ServeProcess::start(&[
        &env_path("grid_walk"),
        "--token-file",
        tokens.to_str().unwrap(),
    ]);
    let mut ws = ws_connect(server.addr, Some("alpha-token")).await.unwrap();
    ws_call(&mut ws, json!({"type": "reset", "data": {"seed": 1}})).await;
    let id = session_ids(&ws_call(&mut ws, json!({"type": "fork"})).await).remove(0);
    // Beta is told the session does not exist, as for any unknown id.
    let mut theirs = attach(&server, &id, Some("beta-token")).await;
    let refused = super::harness::ws_next(&mut theirs).await.unwrap();
    assert_error(
        &refused,
        "SESSION_ERROR",
        &format!("Unknown session_id: {id}"),
    );
    let path = format!("/sessions/{id}/fork");
    let beta = [("Authorization", "Bearer beta-token")];
    let (status, body) = http_json(server.addr, "POST", &path, &beta, Some("{}"));
    assert_eq!(status, 404, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("Unknown session_id: {id}")),
        "{body}"
    );
    // Alpha forks its held session over HTTP, and attaches to the copy.
    let alpha = [("Authorization", "Bearer alpha-token")];
    let (status, body) = http_json(server.addr, "POST", &path, &alpha, Some(r#"{"n": 1}"#));
    assert_eq!(status, 200, "{body}");
    let copy_id = body["sessions"][0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut copy = attach(&server, &copy_id, Some("alpha-token")).await;
    let state = ws_call(&mut copy, json!({"type": "state"})).await;
    assert_eq!(state["data"]["session_id"], copy_id, "{state}");
}
