//! Registrations are bounded: a cap on their number and bytes with least-recently-used
//! eviction of unused ones, `DELETE /envs/{id}`, checks that run concurrently, and start-up
//! checks that run after the port opened.

use serde_json::{Value, json};

use super::harness::{
    ServeProcess, assert_error, cache_with_the_compiled_guests, http_json, ws_call, ws_connect,
};
use super::{env_path, serve_fixture};

/// grid_walk's source with a comment that makes it a distinct source.
fn variant(n: u32) -> String {
    let source =
        std::fs::read_to_string(crate::common::repo_root().join(env_path("grid_walk"))).unwrap();
    format!("{source}\n# variant {n}\n")
}

/// `Authorization: Bearer <token>`, or no header without a token.
fn bearer(token: Option<&str>) -> Vec<(&'static str, String)> {
    token
        .map(|t| ("Authorization", format!("Bearer {t}")))
        .into_iter()
        .collect()
}

fn headers<'a>(owned: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    owned.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// `POST /envs` with `token`'s bearer header (none without a token).
fn register_with(
    server: &ServeProcess,
    token: Option<&str>,
    id: &str,
    source: &str,
) -> (u16, Value) {
    let body = json!({"source": source, "id": id}).to_string();
    let auth = bearer(token);
    http_json(server.addr, "POST", "/envs", &headers(&auth), Some(&body))
}

/// The ids `GET /envs` lists, asked with `token`.
fn ids_with(server: &ServeProcess, token: Option<&str>) -> Vec<String> {
    let auth = bearer(token);
    let (_, list) = http_json(server.addr, "GET", "/envs", &headers(&auth), None);
    list["envs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

fn register(server: &ServeProcess, id: &str, source: &str) -> (u16, Value) {
    register_with(server, None, id, source)
}

fn ids(server: &ServeProcess) -> Vec<String> {
    ids_with(server, None)
}

#[tokio::test]
async fn registrations_are_capped_unused_ones_evicted_and_deletable() {
    let server = ServeProcess::start(&["--max-registrations", "2"]);
    assert_eq!(register(&server, "a", &variant(1)).0, 201);
    assert_eq!(register(&server, "b", &variant(2)).0, 201);
    // Registering "a" again counts as a use, so "b" is now the least recently used.
    assert_eq!(register(&server, "a", &variant(1)).0, 200);
    assert_eq!(register(&server, "c", &variant(3)).0, 201);
    assert_eq!(ids(&server), ["a", "c"], "b was evicted");

    // Environments that running episodes play are not evicted.
    let mut on_a = ws_connect(server.addr, None).await.unwrap();
    let mut on_c = ws_connect(server.addr, None).await.unwrap();
    for (ws, id) in [(&mut on_a, "a"), (&mut on_c, "c")] {
        let reset = ws_call(ws, json!({"type": "reset", "data": {"env_id": id}})).await;
        assert_eq!(reset["type"], "observation", "{reset}");
    }
    let (status, full) = register(&server, "d", &variant(4));
    assert_eq!(status, 507, "{full}");
    assert_eq!(
        full["detail"],
        "the registry is full: 2 of 2 registrations are taken, and every registration is in use by a running episode; DELETE /envs/{id} one that is no longer needed"
    );

    // Deleting one makes room; its running episode goes on, new resets cannot name it.
    let (status, deleted) = http_json(server.addr, "DELETE", "/envs/a", &[], None);
    assert_eq!(
        (status, &deleted["deleted"]),
        (200, &json!("a")),
        "{deleted}"
    );
    let step = json!({"type": "step", "data": {"message": "\\boxed{down}"}});
    assert_eq!(ws_call(&mut on_a, step).await["type"], "observation");
    let again = ws_call(&mut on_a, json!({"type": "reset", "data": {"env_id": "a"}})).await;
    assert_error(&again, "VALIDATION_ERROR", "unknown environment id 'a'");
    assert_eq!(register(&server, "d", &variant(4)).0, 201);
    assert_eq!(ids(&server), ["c", "d"]);
    let (status, missing) = http_json(server.addr, "DELETE", "/envs/a", &[], None);
    assert_eq!(status, 404);
    assert_eq!(
        missing["detail"],
        "unknown environment id 'a' (registered: c, d)"
    );
}

#[test]
fn registered_bytes_are_capped() {
    let server = ServeProcess::start(&["--max-registered-bytes", "6K"]);
    let source = variant(1);
    assert!(
        source.len() > 3 << 10 && source.len() < 6 << 10,
        "{}",
        source.len()
    );
    assert_eq!(register(&server, "a", &source).0, 201);
    // A second one does not fit beside the first, so the unused first one is evicted.
    assert_eq!(register(&server, "b", &variant(2)).0, 201);
    assert_eq!(ids(&server), ["b"]);
    let big = format!("{source}\n# {}\n", "x".repeat(6 << 10));
    let (status, full) = register(&server, "big", &big);
    assert_eq!(status, 413);
    assert_eq!(
        full["detail"],
        format!(
            "a source of {} bytes is over the registry's limit of 6144 bytes (--max-registered-bytes)",
            big.len()
        )
    );
}

#[test]
fn a_slow_check_holds_up_neither_the_port_nor_other_registrations() {
    let slow = serve_fixture("slow_check.py");
    // A cache of its own: an earlier run's cached verdict would skip the slow check.
    let cache = cache_with_the_compiled_guests();
    let server = ServeProcess::start_listening(&[&slow], &[("SPADE_CACHE_DIR", cache.path())]);
    // The port is open while the start-up check runs (it takes seconds).
    let (status, health) = http_json(server.addr, "GET", "/health", &[], None);
    assert_eq!(status, 200);
    assert_eq!(health["status"], "healthy");
    assert_eq!(
        health["envs"],
        json!({"ready": 0, "rejected": 0, "checking": 1})
    );
    let (status, early) = http_json(
        server.addr,
        "POST",
        "/reset",
        &[],
        Some(r#"{"env_id": "slow_check"}"#),
    );
    assert_eq!(status, 422);
    assert_eq!(
        early["detail"],
        "environment 'slow_check' is still being checked; GET /health says how many are ready"
    );
    // Another registration checks and answers while the slow one still runs.
    let (status, fast) = register(&server, "fast", &variant(1));
    assert_eq!((status, &fast["accepted"]), (201, &json!(true)), "{fast}");
    let (_, health) = http_json(server.addr, "GET", "/health", &[], None);
    assert_eq!(
        health["envs"],
        json!({"ready": 1, "rejected": 0, "checking": 1}),
        "the slow check is still running after the fast one"
    );
    assert_eq!(
        server.wait_for_checks(),
        "spade serve: 1 environments checked (1 accepted, 0 not playable)"
    );
    let (_, health) = http_json(server.addr, "GET", "/health", &[], None);
    assert_eq!(
        health["envs"],
        json!({"ready": 2, "rejected": 0, "checking": 0})
    );
    let (status, reset) = http_json(
        server.addr,
        "POST",
        "/reset",
        &[],
        Some(r#"{"env_id": "slow_check"}"#),
    );
    assert_eq!(status, 200, "{reset}");
}

#[test]
fn check_verdicts_are_cached_on_disk_and_a_restart_does_not_check_again() {
    let cache = cache_with_the_compiled_guests();
    let env = [("SPADE_CACHE_DIR", cache.path())];
    let good = variant(41);
    let crash =
        std::fs::read_to_string(crate::common::repo_root().join(env_path("brace_crash"))).unwrap();
    let mut first = ServeProcess::start_with_env(&[], &env);
    let (status, a) = register(&first, "a", &good);
    assert_eq!(status, 201, "{a}");
    assert_eq!(
        (&a["accepted"], &a["verdict_from_cache"]),
        (&json!(true), &json!(false))
    );
    let (_, b) = register(&first, "b", &crash);
    assert_eq!(
        (&b["accepted"], &b["verdict_from_cache"]),
        (&json!(false), &json!(false))
    );
    assert!(first.terminate().success(), "{}", first.stderr());

    // The same sources after a restart: the verdicts come from the cache, unchanged, and the
    // accepted one plays.
    let second = ServeProcess::start_with_env(&[], &env);
    let (status, a2) = register(&second, "a", &good);
    assert_eq!(status, 201, "{a2}");
    assert_eq!(a2["verdict_from_cache"], true);
    assert_eq!(a2["verdict"], a["verdict"]);
    let (_, b2) = register(&second, "b", &crash);
    assert_eq!(b2["verdict_from_cache"], true);
    assert_eq!(b2["verdict"], b["verdict"]);
    let (_, listed) = http_json(second.addr, "GET", "/envs", &[], None);
    let codes = listed["envs"][1]["error_codes"].as_array().unwrap();
    assert!(codes.contains(&json!("step_failed")), "{listed}");
    let (status, reset) = http_json(
        second.addr,
        "POST",
        "/reset",
        &[],
        Some(r#"{"env_id": "a", "seed": 3}"#),
    );
    assert_eq!(status, 200, "{reset}");
    drop(second);

    // Other check options are another key: checked again.
    let third = ServeProcess::start_with_env(&["--validation-fuel", "40000000000"], &env);
    let (_, a3) = register(&third, "a", &good);
    assert_eq!(a3["verdict_from_cache"], false, "{a3}");
}

fn register_as(server: &ServeProcess, token: &str, id: &str, source: &str) -> (u16, Value) {
    register_with(server, Some(token), id, source)
}

fn ids_as(server: &ServeProcess, token: &str) -> Vec<String> {
    ids_with(server, Some(token))
}

#[tokio::test]
async fn each_token_has_its_own_quota_and_deletes_only_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# two tenants\nalpha-token\n\nbeta-token\n").unwrap();
    let server = ServeProcess::start(&[
        "--token-file",
        tokens.to_str().unwrap(),
        "--max-registrations-per-token",
        "2",
        "--max-registrations",
        "4",
    ]);
    let (alpha, beta) = ("alpha-token", "beta-token");
    // Over its quota, a token evicts its own least recently used registration, not an older
    // one of another token.
    assert_eq!(register_as(&server, beta, "b1", &variant(1)).0, 201);
    for (id, n) in [("a1", 2), ("a2", 3), ("a3", 4)] {
        assert_eq!(register_as(&server, alpha, id, &variant(n)).0, 201);
    }
    assert_eq!(
        ids_as(&server, alpha),
        ["a2", "a3", "b1"],
        "a1 was alpha's oldest"
    );
    assert_eq!(register_as(&server, beta, "b2", &variant(5)).0, 201);
    assert_eq!(register_as(&server, beta, "b3", &variant(10)).0, 201);
    assert_eq!(
        ids_as(&server, beta),
        ["a2", "a3", "b2", "b3"],
        "b1 was beta's oldest"
    );
    // Only the token that registered an environment deletes it.
    let auth = |token: &str| format!("Bearer {token}");
    let (status, refused) = http_json(
        server.addr,
        "DELETE",
        "/envs/a3",
        &[("Authorization", &auth(beta))],
        None,
    );
    assert_eq!(status, 403, "{refused}");
    assert_eq!(
        refused["detail"],
        "environment 'a3' was registered with another token; only that token can delete it"
    );
    let (status, _) = http_json(
        server.addr,
        "DELETE",
        "/envs/a3",
        &[("Authorization", &auth(alpha))],
        None,
    );
    assert_eq!(status, 200);
    // A token whose registrations are all being played cannot take more.
    let (status, _) = http_json(
        server.addr,
        "DELETE",
        "/envs/a2",
        &[("Authorization", &auth(alpha))],
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(register_as(&server, alpha, "a4", &variant(6)).0, 201);
    assert_eq!(register_as(&server, alpha, "a5", &variant(7)).0, 201);
    let mut sessions = Vec::new();
    for id in ["a4", "a5"] {
        let mut ws = ws_connect(server.addr, Some(alpha)).await.unwrap();
        let reset = ws_call(&mut ws, json!({"type": "reset", "data": {"env_id": id}})).await;
        assert_eq!(reset["type"], "observation", "{reset}");
        sessions.push(ws);
    }
    let (status, full) = register_as(&server, alpha, "a6", &variant(8));
    assert_eq!(status, 507, "{full}");
    assert_eq!(
        full["detail"],
        "this token has 2 of its 2 registrations (--max-registrations-per-token), each in use by a running episode; DELETE /envs/{id} one that is no longer needed"
    );
    // The other token is not held up by it.
    assert_eq!(register_as(&server, beta, "b4", &variant(9)).0, 201);
    assert_eq!(ids_as(&server, beta), ["a4", "a5", "b3", "b4"]);
}

/// Issue 53, finding 4: a registration whose client disconnects while its source is being
/// checked releases its reservation (the id being checked, the tenant's quota and bytes) at
/// once, instead of holding it until the server restarts.
#[tokio::test]
async fn a_registration_abandoned_mid_check_releases_its_reservation() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alpha-token\n").unwrap();
    let server = ServeProcess::start(&[
        "--token-file",
        tokens.to_str().unwrap(),
        "--max-registrations-per-token",
        "1",
    ]);
    // A module that takes seconds to run, in every probe of the check.
    let slow = format!("{}\nfor _ in range(3_000_000):\n    pass\n", variant(1));
    let body = json!({"source": slow, "id": "slow"}).to_string();
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "POST /envs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alpha-token\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let auth = bearer(Some("alpha-token"));
    let checking = || {
        let (_, health) = http_json(server.addr, "GET", "/health", &headers(&auth), None);
        health["envs"]["checking"].as_u64().unwrap()
    };
    for _ in 0..200 {
        if checking() == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(checking(), 1, "the check is running");
    drop(stream);
    // Released within moments, not when a check that nobody waits for would have ended.
    let mut released = false;
    for _ in 0..100 {
        if checking() == 0 {
            released = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(released, "the abandoned check still holds its reservation");
    assert!(!ids_as(&server, "alpha-token").contains(&"slow".to_owned()));
    // The token's quota of one is free again.
    let (status, answer) = register_as(&server, "alpha-token", "quick", &variant(2));
    assert_eq!(status, 201, "{answer}");
}
