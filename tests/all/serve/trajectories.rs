//! Recorded trajectories belong to the token that played them (issue 53, items 6, 11, 12):
//! another token cannot download them or squat their episode ids, server-chosen ids are
//! random, downloads are bounded, and each token's recordings have a quota.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::env_path;
use super::harness::{
    ServeProcess, Ws, assert_error, http, http_json, ws_call, ws_connect, ws_next,
};

const ALPHA: &str = "alpha-token";
const BETA: &str = "beta-token";

/// A server playing grid_walk, recording to `record`, with the two tokens and `extra` flags.
fn server_with_tokens(dir: &std::path::Path, extra: &[&str]) -> ServeProcess {
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, format!("{ALPHA}\n{BETA}\n")).unwrap();
    let record = dir.join("traj");
    let mut args = vec![
        env_path("grid_walk"),
        "--token-file".to_owned(),
        tokens.display().to_string(),
        "--record-dir".to_owned(),
        record.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServeProcess::start(&args)
}

fn bearer(token: &str) -> [(&'static str, String); 1] {
    [("Authorization", format!("Bearer {token}"))]
}

/// GET /trajectories/`id` as `token`.
fn download(server: &ServeProcess, id: &str, token: &str) -> (u16, String) {
    let [(name, value)] = bearer(token);
    http(
        server.addr,
        "GET",
        &format!("/trajectories/{id}"),
        &[(name, &value)],
        None,
    )
}

/// Sends a close message and waits for the server to close the connection.
async fn close(mut ws: Ws) {
    use futures_util::SinkExt as _;
    let message = json!({"type": "close"}).to_string();
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        message.into(),
    ))
    .await
    .unwrap();
    assert!(ws_next(&mut ws).await.is_err(), "the session closes");
}

/// Resets a fresh WebSocket session of `token`; returns the answer.
async fn reset_as(server: &ServeProcess, token: Option<&str>, data: Value) -> Value {
    let mut ws = ws_connect(server.addr, token).await.unwrap();
    let answer = ws_call(&mut ws, json!({"type": "reset", "data": data})).await;
    close(ws).await;
    answer
}

#[tokio::test]
async fn another_token_cannot_download_a_tenants_trajectory() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_tokens(dir.path(), &[]);
    let hint = "alpha's private hint";
    let reset = reset_as(
        &server,
        Some(ALPHA),
        json!({"seed": 3, "episode_id": "alpha-episode", "hint": hint}),
    )
    .await;
    assert_eq!(reset["type"], "observation", "{reset}");
    // The owner gets it, hint included.
    let (status, text) = download(&server, "alpha-episode", ALPHA);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(hint), "{text:.300}");
    // Another token gets exactly the answer for an id nobody used.
    let (status, theirs) = download(&server, "alpha-episode", BETA);
    assert_eq!(status, 404, "{theirs}");
    assert!(!theirs.contains(hint));
    let (missing_status, missing) = download(&server, "nobody-used-this", BETA);
    assert_eq!(missing_status, 404);
    assert_eq!(
        theirs,
        missing.replace("nobody-used-this", "alpha-episode"),
        "another token's episode must look like a missing one"
    );
}

/// The bits in which the hex digits of `a` and `b` differ, and how many digits the shorter has.
fn differing_bits(a: &str, b: &str) -> (u32, usize) {
    let nibbles = |s: &str| -> Vec<u32> { s.chars().filter_map(|c| c.to_digit(16)).collect() };
    let (a, b) = (nibbles(a), nibbles(b));
    let bits = a.iter().zip(&b).map(|(x, y)| (x ^ y).count_ones()).sum();
    (bits, a.len().min(b.len()))
}

#[tokio::test]
async fn generated_episode_and_session_ids_are_random() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("traj");
    let server = ServeProcess::start(&[
        &env_path("grid_walk"),
        "--record-dir",
        record.to_str().unwrap(),
    ]);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let reset = reset_as(&server, None, json!({"seed": 1})).await;
        assert_eq!(reset["type"], "observation", "{reset}");
        ids.push(
            reset["data"]["observation"]["metadata"]["episode_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let (bits, digits) = differing_bits(&ids[0], &ids[1]);
    // 128 random bits: two ids differ in about 64; fewer than 32 has odds of about 1e-9.
    assert!(
        digits >= 32 && bits >= 32,
        "episode ids {ids:?} differ in {bits} bits over {digits} hex digits: sequential or guessable"
    );
    // Session ids of held sessions too.
    let create = r#"{"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}"#;
    let session = |_| {
        let (status, body) = http_json(server.addr, "POST", "/mcp", &[], Some(create));
        assert_eq!(status, 200, "{body}");
        body["result"]["session_id"].as_str().unwrap().to_owned()
    };
    let sessions: Vec<String> = (0..2).map(session).collect();
    let (bits, digits) = differing_bits(&sessions[0], &sessions[1]);
    assert!(
        digits >= 32 && bits >= 32,
        "session ids {sessions:?} differ in {bits} bits over {digits} hex digits"
    );
}

#[tokio::test]
async fn another_tokens_episode_id_does_not_block_a_tenants_reset() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_tokens(dir.path(), &[]);
    let data = |hint: &str| json!({"seed": 2, "episode_id": "run-1-episode-0", "hint": hint});
    // Beta takes the id first; alpha's reset with it still works.
    let beta = reset_as(&server, Some(BETA), data("beta's hint")).await;
    assert_eq!(beta["type"], "observation", "{beta}");
    let alpha = reset_as(&server, Some(ALPHA), data("alpha's hint")).await;
    assert_eq!(alpha["type"], "observation", "{alpha}");
    assert_eq!(
        alpha["data"]["observation"]["metadata"]["episode_id"],
        "run-1-episode-0"
    );
    // Each downloads its own.
    let (_, text) = download(&server, "run-1-episode-0", ALPHA);
    assert!(
        text.contains("alpha's hint") && !text.contains("beta's hint"),
        "{text:.300}"
    );
    let (_, text) = download(&server, "run-1-episode-0", BETA);
    assert!(text.contains("beta's hint") && !text.contains("alpha's hint"));
    // The same tenant reusing its own id is still refused.
    let again = reset_as(&server, Some(ALPHA), data("again")).await;
    assert_error(
        &again,
        "VALIDATION_ERROR",
        "episode id 'run-1-episode-0' is already used by a recorded trajectory",
    );
}

#[tokio::test]
async fn a_tenant_over_its_record_quota_is_refused_with_the_flag_named() {
    let dir = tempfile::tempdir().unwrap();
    // One byte: the first reset's lines pass it, so the next recorded call is refused.
    let server = server_with_tokens(dir.path(), &["--max-record-bytes", "1"]);
    let mut ws = ws_connect(server.addr, Some(ALPHA)).await.unwrap();
    let reset = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"seed": 1, "episode_id": "quota-0"}}),
    )
    .await;
    assert_eq!(reset["type"], "observation", "{reset}");
    let step = ws_call(
        &mut ws,
        json!({"type": "step", "data": {"message": "\\boxed{down}"}}),
    )
    .await;
    assert_error(&step, "EXECUTION_ERROR", "--max-record-bytes");
    // The step did not run: the episode is where it was, and its trajectory has no step.
    let state = ws_call(&mut ws, json!({"type": "state"})).await;
    assert_eq!(state["data"]["step_count"], 0, "{state}");
    let reset = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"seed": 1, "episode_id": "quota-1"}}),
    )
    .await;
    assert_error(&reset, "EXECUTION_ERROR", "--max-record-bytes");
    close(ws).await;
    let (status, text) = download(&server, "quota-0", ALPHA);
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("\"call\":\"step\""), "{text:.600}");
    let (status, _) = download(&server, "quota-1", ALPHA);
    assert_eq!(status, 404, "the refused reset created no trajectory");
    // Another token has its own quota.
    let beta = reset_as(&server, Some(BETA), json!({"seed": 1})).await;
    assert_eq!(beta["type"], "observation", "{beta}");
    // Alpha's recordings are in a directory of its own, named without the token; once the
    // operator removes them, alpha records again (the directory is measured again within 1 s).
    let owned: Vec<_> = std::fs::read_dir(dir.path().join("traj"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|d| d.join("quota-0.jsonl").exists())
        .collect();
    assert_eq!(owned.len(), 1, "{owned:?}");
    let name = owned[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.starts_with("tenant-") && !name.contains("alpha"),
        "{name}"
    );
    std::fs::remove_dir_all(&owned[0]).unwrap();
    std::fs::create_dir(&owned[0]).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = reset_as(&server, Some(ALPHA), json!({"seed": 1})).await;
    assert_eq!(again["type"], "observation", "{again}");
}

#[test]
fn downloads_are_streamed_and_one_past_the_limit_gets_503() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("traj");
    std::fs::create_dir_all(&record).unwrap();
    // 64 MiB: far more than the loopback socket buffers hold, so a download that is not read
    // stays in flight.
    let size: usize = 64 << 20;
    let line = format!("{}\n", "x".repeat(1023));
    std::fs::write(record.join("big.jsonl"), line.repeat(size / 1024)).unwrap();
    let server = ServeProcess::start(&[
        &env_path("grid_walk"),
        "--record-dir",
        record.to_str().unwrap(),
        "--max-downloads",
        "1",
    ]);
    // A client that reads only the head of its download.
    let mut slow = TcpStream::connect(server.addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        slow,
        "GET /trajectories/big HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut head = vec![0u8; 4096];
    let n = slow.read(&mut head).unwrap();
    let head = String::from_utf8_lossy(&head[..n]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head:.200}");
    assert!(
        head.contains(&format!("content-length: {size}")),
        "{head:.300}"
    );
    // The second download at once is refused, saying why and which flag.
    let (status, body) = http_json(server.addr, "GET", "/trajectories/big", &[], None);
    assert_eq!(status, 503, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("1 trajectory downloads are running") && detail.contains("--max-downloads"),
        "{detail}"
    );
    // Once the slow client goes away, its slot is free again.
    drop(slow);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = http(server.addr, "GET", "/trajectories/big", &[], None);
        if status == 200 {
            assert_eq!(text.len(), size);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot was not released: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
