//! Test harness for `spade serve`: the server as a real process on loopback, a raw HTTP/1.1
//! client, a WebSocket client, and the Python virtual environment with the pinned packages.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::repo_root;

/// A `spade serve` process listening on a free loopback port; killed when dropped.
pub struct ServeProcess {
    child: Child,
    pub addr: SocketAddr,
    stderr: PathBuf,
    /// The server's standard output, line by line (a thread drains it, so the server never
    /// sees a closed pipe).
    stdout: std::sync::mpsc::Receiver<String>,
    _dir: tempfile::TempDir,
}

impl ServeProcess {
    /// Starts `spade serve --bind 127.0.0.1:0 ARGS` and waits until it listens and its
    /// start-up checks are done.
    pub fn start(args: &[&str]) -> ServeProcess {
        ServeProcess::start_with_env(args, &[])
    }

    /// [`ServeProcess::start`] with environment variables `env` set for the server.
    pub fn start_with_env(args: &[&str], env: &[(&str, &Path)]) -> ServeProcess {
        let server = ServeProcess::start_listening(args, env);
        server.wait_for_checks();
        server
    }

    /// Starts the server and returns as soon as it listens (its start-up checks may still run).
    pub fn start_listening(args: &[&str], env: &[(&str, &Path)]) -> ServeProcess {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr.txt");
        let mut child = Command::new(env!("CARGO_BIN_EXE_spade"))
            .arg("serve")
            .args(["--bind", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawning spade serve");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, stdout) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = stdout
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_default();
        let Some(rest) = line.strip_prefix("spade serve: listening on http://") else {
            let _ = child.wait();
            panic!(
                "spade serve {args:?} did not start: {line:?}\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        let addr = rest.split_whitespace().next().unwrap().parse().unwrap();
        ServeProcess {
            child,
            addr,
            stderr,
            stdout,
            _dir: dir,
        }
    }

    /// Waits for the line that says every start-up check is done, and returns it.
    pub fn wait_for_checks(&self) -> String {
        loop {
            match self.stdout.recv_timeout(Duration::from_secs(300)) {
                Ok(line) if line.contains("environments checked") => return line,
                Ok(_) => continue,
                Err(err) => panic!(
                    "spade serve did not finish its start-up checks ({err}):\n{}",
                    self.stderr()
                ),
            }
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the server printed on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap()
    }
}

impl ServeProcess {
    /// Sends SIGTERM and waits up to `limit` for the process to exit; `None` if it is still
    /// running then (it is killed when dropped).
    pub fn terminate_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cache directory of the test's own that already holds every compiled guest of the
/// default cache (hard-linked, or copied across filesystems), so the server compiles nothing.
pub fn cache_with_the_compiled_guests() -> tempfile::TempDir {
    let cache = tempfile::tempdir().unwrap();
    let default = spade_sandbox::default_cache_dir().unwrap();
    for entry in std::fs::read_dir(&default).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cwasm") {
            let target = cache.path().join(path.file_name().unwrap());
            if std::fs::hard_link(&path, &target).is_err() {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
    cache
}

/// One HTTP/1.1 request on a fresh connection; returns the status and the body.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || method == "POST" {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {head:?}"));
    (status, body.to_owned())
}

/// An HTTP request whose body is JSON; returns the status and the parsed body.
pub fn http_json(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Value) {
    let (status, text) = http(addr, method, path, headers, body);
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text:?}"));
    (status, value)
}

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens a WebSocket session, with a bearer token if given.
pub async fn ws_connect(
    addr: SocketAddr,
    token: Option<&str>,
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let mut request = format!("ws://{addr}/ws").into_client_request().unwrap();
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    }
    let (ws, _) = tokio_tungstenite::connect_async(request).await?;
    Ok(ws)
}

/// The next text frame as JSON, or `None` when the server closed the connection (with its close
/// code, if any, in the second slot).
pub async fn ws_next(ws: &mut Ws) -> Result<Value, Option<u16>> {
    loop {
        match tokio::time::timeout(Duration::from_secs(120), ws.next())
            .await
            .expect("the server answers within 120 s")
        {
            Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(frame))) => return Err(frame.map(|f| u16::from(f.code))),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err(None),
        }
    }
}

/// Sends `text` and returns the answer.
pub async fn ws_send(ws: &mut Ws, text: &str) -> Value {
    ws.send(Message::Text(text.to_owned().into()))
        .await
        .unwrap();
    ws_next(ws)
        .await
        .unwrap_or_else(|code| panic!("closed ({code:?}) instead of answering {text:.200}"))
}

/// Sends a JSON message and returns the answer.
pub async fn ws_call(ws: &mut Ws, message: Value) -> Value {
    ws_send(ws, &message.to_string()).await
}

/// Steps a reset grid_walk session with the fixture's winning actions until it ends, and
/// asserts that it ended won (terminated).
pub async fn play_grid_walk_to_a_win(ws: &mut Ws) {
    let mut last = Value::Null;
    for action in &crate::common::env_actions("grid_walk") {
        last = ws_call(
            ws,
            serde_json::json!({"type": "step", "data": {"message": action}}),
        )
        .await;
        assert_eq!(last["type"], "observation", "{last}");
        if last["data"]["done"] == true {
            break;
        }
    }
    assert_eq!(last["data"]["observation"]["terminated"], true, "{last}");
}

/// Asserts an error frame with `code` whose message contains `needle`.
#[track_caller]
pub fn assert_error(answer: &Value, code: &str, needle: &str) {
    assert_eq!(answer["type"], "error", "{answer}");
    assert_eq!(answer["data"]["code"], code, "{answer}");
    let message = answer["data"]["message"].as_str().unwrap();
    assert!(
        message.contains(needle),
        "expected {needle:?} in {message:?}"
    );
}

/// The virtual environment's Python with the pinned packages (`python/requirements-ci.txt`)
/// and the repository's `spade_client` (editable). `.ci/run` creates it first; otherwise the
/// first test that needs it does (`$SPADE_TEST_VENV` overrides `target/serve-venv`).
pub fn python() -> PathBuf {
    static READY: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut ready = READY.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(python) = &*ready {
        return python.clone();
    }
    let venv = std::env::var_os("SPADE_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target").join("serve-venv"));
    let python = venv.join("bin").join("python");
    let imports = |python: &Path| {
        Command::new(python)
            .args([
                "-c",
                "import openenv, ray, spade_client, transformers, trl, Gym, maturin, pytest, peft, gymnasium, skyrl_gym",
            ])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !imports(&python) {
        let script = repo_root().join(".ci").join("python-venv");
        let status = Command::new("bash")
            .arg(&script)
            .arg(&venv)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "{} {} failed",
            script.display(),
            venv.display()
        );
        assert!(
            imports(&python),
            "the venv at {} lacks the packages",
            venv.display()
        );
    }
    *ready = Some(python.clone());
    python
}

/// Runs a Python script of `python/` with the venv; returns its stdout, or panics with stderr.
pub fn run_python(script: &str, args: &[&str]) -> String {
    let output = Command::new(python())
        .arg(repo_root().join("python").join(script))
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "python {script} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// An HTTP error's `detail` as text: the string, or the `msg`s of FastAPI's validation list
/// joined with "; ".
pub fn detail(err: &Value) -> String {
    match &err["detail"] {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|i| i["msg"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
            .join("; "),
        other => panic!("no detail in {other}"),
    }
}

/// Reads until the server closes the connection (or `limit` passes); returns what came and
/// whether it closed.
pub fn read_until_closed(stream: &mut std::net::TcpStream, limit: Duration) -> (String, bool) {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match std::io::Read::read(stream, &mut buf) {
            Ok(0) => break true,
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break false;
            }
            Err(_) => break true,
        }
    };
    (String::from_utf8_lossy(&received).into_owned(), closed)
}
