//! Safety and limits: bearer token, capacity, idle sessions, a sandbox out of fuel, shutdown.

use std::time::Duration;

use serde_json::{Value, json};

use super::harness::{
    ServeProcess, assert_error, cache_with_the_compiled_guests, http, http_json, run_python,
    ws_call, ws_connect, ws_next,
};
use super::{env_path, serve_fixture};
use crate::common::{env_dir, spade, stderr, stdout};

#[tokio::test]
async fn every_request_needs_the_bearer_token() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let server = ServeProcess::start(&[
        &env_path("grid_walk"),
        "--token-file",
        token_file.to_str().unwrap(),
    ]);
    let addr = server.addr;
    for path in ["/health", "/metadata", "/schema", "/state", "/envs"] {
        let (status, body) = http_json(addr, "GET", path, &[], None);
        assert_eq!(status, 401, "{path}");
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .contains("missing bearer token"),
            "{body}"
        );
        let (status, body) = http_json(
            addr,
            "GET",
            path,
            &[("Authorization", "Bearer s3cret-tokem")],
            None,
        );
        assert_eq!(status, 401, "{path}");
        assert_eq!(body["detail"], "invalid bearer token");
        let (status, _) = http(
            addr,
            "GET",
            path,
            &[("Authorization", "Bearer s3cret-token")],
            None,
        );
        assert_eq!(status, 200, "{path}");
    }
    let (status, _) = http(
        addr,
        "POST",
        "/reset",
        &[("Authorization", "Basic s3cret-token")],
        Some("{}"),
    );
    assert_eq!(status, 401);
    let (status, _) = http(
        addr,
        "POST",
        "/reset",
        &[("Authorization", "Bearer s3cret-token")],
        Some("{}"),
    );
    assert_eq!(status, 200);

    // WebSocket: the handshake is refused with 401 without the right token.
    for token in [None, Some("wrong")] {
        match ws_connect(addr, token).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status().as_u16(), 401)
            }
            other => panic!("{token:?}: expected a 401, got {:?}", other.map(|_| ())),
        }
    }
    let mut ws = ws_connect(addr, Some("s3cret-token")).await.unwrap();
    let reset = ws_call(&mut ws, json!({"type": "reset", "data": {"seed": 7}})).await;
    assert_eq!(reset["type"], "observation", "{reset}");

    // The stock Python client with and without the header.
    let actions = env_dir("grid_walk")
        .join("actions.txt")
        .display()
        .to_string();
    let out = run_python(
        "tests/drive_stock.py",
        &[&server.url(), "grid_walk", "7", &actions, "s3cret-token"],
    );
    assert!(out.lines().count() > 2, "{out}");
    let python = super::harness::python();
    let failed = std::process::Command::new(python)
        .arg(crate::common::repo_root().join("python/tests/drive_stock.py"))
        .args([&server.url(), "grid_walk", "7", &actions])
        .output()
        .unwrap();
    assert!(!failed.status.success());
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(err.contains("401"), "{err}");
}

#[tokio::test]
async fn the_capacity_limit_refuses_with_capacity_reached_and_idle_sessions_are_reaped() {
    let server = ServeProcess::start(&[
        &env_path("grid_walk"),
        "--max-sessions",
        "2",
        "--session-idle-timeout",
        "1.5",
    ]);
    let mut a = ws_connect(server.addr, None).await.unwrap();
    let mut b = ws_connect(server.addr, None).await.unwrap();
    assert_eq!(
        ws_call(&mut a, json!({"type": "reset"})).await["type"],
        "observation"
    );
    assert_eq!(
        ws_call(&mut b, json!({"type": "reset"})).await["type"],
        "observation"
    );
    let mut c = ws_connect(server.addr, None).await.unwrap();
    let refused = ws_next(&mut c).await.unwrap();
    assert_error(
        &refused,
        "CAPACITY_REACHED",
        "Server at capacity: 2/2 sessions active. Cannot accept new connections.",
    );
    assert_eq!(
        (
            refused["data"]["active_sessions"].clone(),
            refused["data"]["max_sessions"].clone()
        ),
        (json!(2), json!(2))
    );
    assert!(
        ws_next(&mut c).await.is_err(),
        "the refused connection is closed"
    );

    // Keep `a` busy, let `b` idle: only `b` is reaped, and its slot is free again.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            ws_call(&mut a, json!({"type": "state"})).await["type"],
            "state"
        );
    }
    let reaped = ws_next(&mut b).await.unwrap();
    assert_error(
        &reaped,
        "SESSION_ERROR",
        "session idle for more than 1.5 s (--session-idle-timeout); it is closed",
    );
    assert_eq!(ws_next(&mut b).await, Err(Some(1000)));
    let mut d = ws_connect(server.addr, None).await.unwrap();
    assert_eq!(
        ws_call(&mut d, json!({"type": "reset"})).await["type"],
        "observation"
    );
}

#[tokio::test]
async fn a_sandbox_out_of_fuel_ends_its_session_with_a_typed_error_and_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("traj");
    let bomb = serve_fixture("fuel_bomb.py");
    let server = ServeProcess::start(&[
        &bomb,
        &env_path("grid_walk"),
        "--fuel",
        "300000000",
        "--record-dir",
        record.to_str().unwrap(),
    ]);
    assert!(
        server
            .stderr()
            .contains("registered fuel_bomb (FuelBombEnv): accepted"),
        "{}",
        server.stderr()
    );
    let mut victim = ws_connect(server.addr, None).await.unwrap();
    let mut other = ws_connect(server.addr, None).await.unwrap();
    let reset = ws_call(
        &mut victim,
        json!({"type": "reset", "data": {"env_id": "fuel_bomb", "seed": 3, "episode_id": "bomb"}}),
    )
    .await;
    assert_eq!(reset["type"], "observation", "{reset}");
    let reset = ws_call(
        &mut other,
        json!({"type": "reset", "data": {"env_id": "grid_walk", "seed": 7, "episode_id": "walk"}}),
    )
    .await;
    assert_eq!(reset["type"], "observation", "{reset}");
    let ok = ws_call(
        &mut victim,
        json!({"type": "step", "data": {"message": "\\boxed{0}"}}),
    )
    .await;
    assert_eq!(ok["data"]["observation"]["text"], "Wrong (higher).");

    let died = ws_call(
        &mut victim,
        json!({"type": "step", "data": {"message": "SPIN FOREVER"}}),
    )
    .await;
    assert_error(
        &died,
        "EXECUTION_ERROR",
        "the sandbox died in step: out_of_fuel: out of fuel: the call used its whole budget of 300000000 fuel; this session is closed",
    );
    assert_eq!(died["data"]["kind"], "out_of_fuel");
    assert_eq!(ws_next(&mut victim).await, Err(Some(1000)));

    super::harness::play_grid_walk_to_a_win(&mut other).await;

    // Both trajectories are complete and replay.
    for (id, outcome) in [("bomb", "error:out_of_fuel"), ("walk", "terminated")] {
        let (status, text) = http(
            server.addr,
            "GET",
            &format!("/trajectories/{id}"),
            &[],
            None,
        );
        assert_eq!(status, 200, "{text}");
        let footer: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(footer["outcome"], outcome, "{id}");
        let file = record.join(format!("{id}.jsonl"));
        let replay = spade(&["replay", file.to_str().unwrap()]);
        assert_eq!(
            replay.status.code(),
            Some(0),
            "{id}: {}{}",
            stdout(&replay),
            stderr(&replay)
        );
    }
    // An episode id is used once.
    let mut again = ws_connect(server.addr, None).await.unwrap();
    let dup = ws_call(
        &mut again,
        json!({"type": "reset", "data": {"env_id": "grid_walk", "episode_id": "walk"}}),
    )
    .await;
    assert_error(
        &dup,
        "VALIDATION_ERROR",
        "episode id 'walk' is already used by a recorded trajectory",
    );
    let (status, _) = http(server.addr, "GET", "/trajectories/..%2Fx", &[], None);
    assert!(status == 422 || status == 404, "{status}");
}

#[tokio::test]
async fn shutdown_closes_sessions_and_finishes_their_trajectories() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("traj");
    let mut server = ServeProcess::start(&[
        &env_path("grid_walk"),
        "--record-dir",
        record.to_str().unwrap(),
    ]);
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    let reset = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"seed": 7, "episode_id": "open"}}),
    )
    .await;
    assert_eq!(reset["type"], "observation");
    let step = ws_call(
        &mut ws,
        json!({"type": "step", "data": {"message": "\\boxed{right}"}}),
    )
    .await;
    assert_eq!(step["type"], "observation");
    let status = tokio::task::spawn_blocking(move || {
        let status = server.terminate();
        (status, server.stderr())
    });
    let notice = ws_next(&mut ws).await.unwrap();
    assert_error(
        &notice,
        "SESSION_ERROR",
        "the server is shutting down; this session is closed",
    );
    assert_eq!(ws_next(&mut ws).await, Err(Some(1001)));
    let (status, log) = status.await.unwrap();
    assert!(status.success(), "{status:?}: {log}");
    assert!(log.contains("spade serve: shut down"), "{log}");
    let text = std::fs::read_to_string(record.join("open.jsonl")).unwrap();
    let footer: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        (
            footer["type"].clone(),
            footer["outcome"].clone(),
            footer["steps"].clone()
        ),
        (json!("footer"), json!("open"), json!(1))
    );
    let replay = spade(&["replay", record.join("open.jsonl").to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(0), "{}", stderr(&replay));
}

#[test]
fn a_snapshot_truncated_under_a_live_server_does_not_end_it() {
    let cache = cache_with_the_compiled_guests();
    let mut server = ServeProcess::start_with_env(
        &[&env_path("grid_walk")],
        &[("SPADE_CACHE_DIR", cache.path())],
    );
    let reset = |server: &ServeProcess| {
        let (status, body) = http_json(server.addr, "POST", "/reset", &[], Some(r#"{"seed": 5}"#));
        assert_eq!(status, 200, "{body}");
        body["observation"]["text"].clone()
    };
    let expected = reset(&server);
    // The server read its snapshot and bytecode from these files (or wrote them); truncate
    // them in place. A mapped snapshot would kill the server with SIGBUS at the next restore.
    let mut truncated = 0;
    for dir in ["snapshots", "code"] {
        for entry in std::fs::read_dir(cache.path().join(dir)).unwrap() {
            std::fs::OpenOptions::new()
                .write(true)
                .open(entry.unwrap().path())
                .unwrap()
                .set_len(0)
                .unwrap();
            truncated += 1;
        }
    }
    assert!(truncated >= 2, "the snapshot and the bytecode were cached");
    for _ in 0..3 {
        assert_eq!(reset(&server), expected);
    }
    assert_eq!(
        http_json(server.addr, "GET", "/health", &[], None).1["status"],
        "healthy"
    );
    assert!(server.terminate().success(), "{}", server.stderr());
}
