//! Deadlines after the header (issue 53, follow-ups): a request body that trickles or never
//! comes (`--body-read-timeout`), and trajectory downloads whose client stops reading
//! (`--write-stall-timeout`). Every limit is set short so that each test takes seconds.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::env_path;
use super::harness::{ServeProcess, http, http_json, read_until_closed};

/// Asserts that `answer` is the 408 of a body that missed a 1 s deadline.
fn assert_body_timed_out(answer: &str) {
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer:?}"
    );
    let body: Value = serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(
        body["detail"],
        "the request body was not received within 1 s (--body-read-timeout)"
    );
}

#[test]
fn a_body_that_trickles_or_stops_is_answered_408_and_closed_at_the_body_timeout() {
    let server = ServeProcess::start(&[&env_path("grid_walk"), "--body-read-timeout", "1"]);
    let head = format!(
        "POST /step HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
        server.addr
    );
    // A body that trickles: one byte every 100 ms, each of which would restart an idle timer.
    let mut trickling = TcpStream::connect(server.addr).unwrap();
    trickling.write_all(head.as_bytes()).unwrap();
    let mut writer = trickling.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..100 {
            if writer.write_all(b" ").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    // A body that stops after its first byte.
    let mut stopped = TcpStream::connect(server.addr).unwrap();
    stopped.write_all(head.as_bytes()).unwrap();
    let start = Instant::now();
    for (what, stream) in [("trickling", &mut trickling), ("stopped", &mut stopped)] {
        // Well under the trickle's 10 s, and loose enough for a loaded machine.
        let (answer, closed) = read_until_closed(stream, Duration::from_secs(9));
        assert_body_timed_out(&answer);
        assert!(closed, "the {what} body's connection stayed open");
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "the {what} body was answered after {:?} with a body timeout of 1 s",
            start.elapsed()
        );
    }
    drop(trickling);
    trickle.join().unwrap();
    // The server goes on: a request whose body comes at once is served.
    let (status, health) = http_json(server.addr, "GET", "/health", &[], None);
    assert_eq!(status, 200, "{health}");
    let (status, _) = http(
        server.addr,
        "POST",
        "/reset",
        &[],
        Some(r#"{"env_id": "grid_walk", "seed": 1}"#),
    );
    assert_eq!(status, 200);
}

#[tokio::test]
async fn downloads_that_are_never_read_free_their_slots_at_the_write_stall_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("traj");
    std::fs::create_dir_all(&record).unwrap();
    // 32 MiB: far more than the socket buffers of a client that reads nothing hold, so its
    // download stalls with most of the file unsent.
    let size: usize = 32 << 20;
    let line = format!("{}\n", "x".repeat(1023));
    std::fs::write(record.join("big.jsonl"), line.repeat(size / 1024)).unwrap();
    let server = ServeProcess::start(&[
        &env_path("grid_walk"),
        "--record-dir",
        record.to_str().unwrap(),
        "--write-stall-timeout",
        "6",
    ]);
    let addr = server.addr;
    // One client opens the 16 downloads the default --max-downloads allows and reads nothing.
    let mut stalled = Vec::new();
    for _ in 0..16 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        let request = format!("GET /trajectories/big HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        // Its status line only: once it arrives the download holds its slot (a 17th request
        // on a new connection could otherwise be served before this one started).
        let mut status = [0u8; 12];
        stream.read_exact(&mut status).await.unwrap();
        assert_eq!(&status, b"HTTP/1.1 200");
        stalled.push(stream);
    }
    let opened = Instant::now();
    // A 17th is refused while they hold every slot (a 6 s stall deadline leaves a loaded
    // machine, with the whole test suite running beside, time to start all 16)...
    let refused = loop {
        let (status, body) = tokio::task::spawn_blocking(move || {
            http_json(addr, "GET", "/trajectories/big", &[], None)
        })
        .await
        .unwrap();
        if status == 503 {
            break body;
        }
        assert!(
            opened.elapsed() < Duration::from_secs(6),
            "16 downloads that read nothing did not hold the 16 slots: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let detail = refused["detail"].as_str().unwrap();
    assert!(detail.contains("--max-downloads"), "{detail}");
    // ... and gets its download once the stall deadline has ended theirs.
    loop {
        let (status, text) =
            tokio::task::spawn_blocking(move || http(addr, "GET", "/trajectories/big", &[], None))
                .await
                .unwrap();
        if status == 200 {
            assert_eq!(text.len(), size, "the 17th download is whole");
            break;
        }
        assert_eq!(status, 503, "{text}");
        assert!(
            opened.elapsed() < Duration::from_secs(60),
            "the stalled downloads still held their slots {:?} after they opened, with a write stall timeout of 6 s",
            opened.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The stalled downloads were ended, not completed: each connection is closed with most of
    // the file unsent.
    for stream in stalled {
        let mut stream = stream.into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        let (received, closed) = tokio::task::spawn_blocking(move || {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut received = 0usize;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => break (received, true),
                    Ok(n) => received += n,
                    Err(err)
                        if matches!(
                            err.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        break (received, false);
                    }
                    Err(_) => break (received, true),
                }
            }
        })
        .await
        .unwrap();
        assert!(closed, "a stalled download's connection is still open");
        assert!(
            received < size,
            "a stalled download got the whole file ({received} bytes)"
        );
    }
}
