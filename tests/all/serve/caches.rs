//! What the server keeps of the sources it played is bounded (issue 53, items 1 and 2): load
//! snapshots per `max_turns`, compiled sources in the runtime's cache, and snapshot files on
//! disk; an evicted or deleted registration takes its sources and files with it.

use std::path::Path;

use serde_json::{Value, json};

use super::env_path;
use super::harness::{
    ServeProcess, cache_with_the_compiled_guests, http_json, ws_call, ws_connect,
};
use crate::common::fails_with;

/// grid_walk's source with a comment that makes it a distinct source (its own hash, so its own
/// check, snapshots and files).
fn variant(n: u32) -> String {
    let source =
        std::fs::read_to_string(crate::common::repo_root().join(env_path("grid_walk"))).unwrap();
    format!("{source}\n# caches variant {n} {}\n", std::process::id())
}

/// The snapshot files in the cache directory `cache`.
fn snapshot_files(cache: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cache.join("snapshots"))
        .map(|dir| {
            dir.map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".snap"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `/health`'s account of the runtime's source cache.
fn caches(server: &ServeProcess) -> Value {
    let (status, health) = http_json(server.addr, "GET", "/health", &[], None);
    assert_eq!(status, 200, "{health}");
    health["caches"].clone()
}

fn register(server: &ServeProcess, id: &str, source: &str) -> Value {
    let body = json!({"source": source, "id": id}).to_string();
    let (status, answer) = http_json(server.addr, "POST", "/envs", &[], Some(&body));
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["accepted"], true, "{answer}");
    answer
}

#[test]
fn resets_with_distinct_max_turns_keep_a_bounded_number_of_snapshots() {
    // The issue: 20 resets, each with its own max_turns, built and kept 20 snapshots (186 ->
    // 891 MiB of RSS, 614 MiB written to the cache). Scaled down: 6 resets, at most 2 kept.
    let cache = cache_with_the_compiled_guests();
    let grid = env_path("grid_walk");
    let server = ServeProcess::start_with_env(
        &[&grid, "--plans-per-source", "2", "--cache-disk", "1"],
        &[("SPADE_CACHE_DIR", cache.path())],
    );
    for max_turns in 1..=6 {
        let body = json!({"seed": 1, "max_turns": max_turns}).to_string();
        let (status, reset) = http_json(server.addr, "POST", "/reset", &[], Some(&body));
        assert_eq!(status, 200, "{reset}");
    }
    let held = caches(&server);
    assert_eq!(held["sources"], 1, "{held}");
    assert!(held["plans"].as_u64().unwrap() <= 2, "{held}");
    // Only the files of the plans in memory are left (the disk budget is one byte).
    let files = snapshot_files(cache.path());
    assert!(files.len() <= 2, "{files:?}");
}

#[tokio::test]
async fn evicted_registrations_leave_the_runtime_and_their_files_the_disk() {
    // The issue: with --max-registrations 4, 24 registrations left the registry holding 4 but
    // the runtime holding all 24 sources and their snapshots. Scaled down: 2 of 8.
    let cache = cache_with_the_compiled_guests();
    let server = ServeProcess::start_with_env(
        &["--max-registrations", "2"],
        &[("SPADE_CACHE_DIR", cache.path())],
    );
    for n in 0..8 {
        register(&server, &format!("v{n}"), &variant(n));
        let held = caches(&server);
        assert!(held["sources"].as_u64().unwrap() <= 2, "after {n}: {held}");
    }
    let held = caches(&server);
    assert_eq!(held["sources"], 2, "{held}");
    // The evicted registrations' snapshot files are gone; the two kept ones' stay.
    let files = snapshot_files(cache.path());
    assert!(
        (1..=2 * 4).contains(&files.len()),
        "{} files: {files:?}",
        files.len()
    );

    // Deleting a registration that no episode plays removes its source and its files at once.
    let before = snapshot_files(cache.path());
    let (status, _) = http_json(server.addr, "DELETE", "/envs/v7", &[], None);
    assert_eq!(status, 200);
    assert_eq!(caches(&server)["sources"], 1);
    let after = snapshot_files(cache.path());
    assert!(after.len() < before.len(), "{before:?} -> {after:?}");

    // A registration deleted while an episode plays it: the episode goes on, and its source
    // and files go when the episode ends.
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    let reset = ws_call(&mut ws, json!({"type": "reset", "data": {"env_id": "v6"}})).await;
    assert_eq!(reset["type"], "observation", "{reset}");
    let (status, _) = http_json(server.addr, "DELETE", "/envs/v6", &[], None);
    assert_eq!(status, 200);
    assert_eq!(
        caches(&server)["sources"],
        1,
        "the playing episode holds it"
    );
    let step = json!({"type": "step", "data": {"message": "\\boxed{down}"}});
    let step = ws_call(&mut ws, step).await;
    assert_eq!(step["type"], "observation", "{step}");
    drop(ws);
    // The session ends with the connection, a moment after the close.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let released = || caches(&server)["sources"] == 0 && snapshot_files(cache.path()).is_empty();
    while !released() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        caches(&server)["sources"],
        0,
        "released when the episode ended"
    );
    assert_eq!(snapshot_files(cache.path()), Vec::<String>::new());
}

#[tokio::test]
async fn deleting_one_of_two_registrations_of_a_source_keeps_it_for_the_other() {
    let cache = cache_with_the_compiled_guests();
    let server = ServeProcess::start_with_env(&[], &[("SPADE_CACHE_DIR", cache.path())]);
    let source = variant(100);
    register(&server, "first", &source);
    register(&server, "second", &source);
    let files = snapshot_files(cache.path());
    assert!(!files.is_empty());
    let (status, _) = http_json(server.addr, "DELETE", "/envs/first", &[], None);
    assert_eq!(status, 200);
    assert_eq!(caches(&server)["sources"], 1, "second still holds it");
    assert_eq!(snapshot_files(cache.path()), files);
    let mut ws = ws_connect(server.addr, None).await.unwrap();
    let reset = ws_call(
        &mut ws,
        json!({"type": "reset", "data": {"env_id": "second"}}),
    )
    .await;
    assert_eq!(reset["type"], "observation", "{reset}");
    drop(ws);
    let (status, _) = http_json(server.addr, "DELETE", "/envs/second", &[], None);
    assert_eq!(status, 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let released = || caches(&server)["sources"] == 0 && snapshot_files(cache.path()).is_empty();
    while !released() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(caches(&server)["sources"], 0);
    assert_eq!(snapshot_files(cache.path()), Vec::<String>::new());
}

#[test]
fn cache_bounds_on_the_command_line_are_checked() {
    fails_with(
        &["serve", "--plans-per-source", "0"],
        None,
        1,
        "--plans-per-source must be at least 1",
    );
    fails_with(
        &["serve", "--cache-memory", "lots"],
        None,
        1,
        "invalid value 'lots' for '--cache-memory <SIZE>': 'lots' is not a size",
    );
}
