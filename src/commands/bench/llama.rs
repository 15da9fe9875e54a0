//! llama.cpp's `llama-server` as the comparison in `spade bench-model`: started from a binary
//! on the same GGUF (or reached at a URL), sent the same prompt token ids, its own timings read
//! back from each `/completion` response.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// A running (or reachable) llama-server.
pub struct LlamaServer {
    /// `host:port`.
    addr: String,
    child: Option<Child>,
    log: Option<PathBuf>,
}

/// What llama.cpp reported for one or several concurrent completions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlamaTimings {
    /// Prompt tokens processed.
    pub prompt_tokens: usize,
    /// Prompt processing time, seconds (for concurrent requests: the longest).
    pub prompt_secs: f64,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Generation time, seconds (for concurrent requests: the longest).
    pub generated_secs: f64,
    /// Wall-clock seconds from sending the request(s) to the last answer.
    pub wall_secs: f64,
}

impl LlamaTimings {
    /// Per phase, the faster of two measurements of the same work.
    pub fn fastest(&self, other: &Self) -> Self {
        let pick = |a: (usize, f64), b: (usize, f64)| if b.1 < a.1 { b } else { a };
        let (prompt_tokens, prompt_secs) = pick(
            (self.prompt_tokens, self.prompt_secs),
            (other.prompt_tokens, other.prompt_secs),
        );
        let (generated_tokens, generated_secs) = pick(
            (self.generated_tokens, self.generated_secs),
            (other.generated_tokens, other.generated_secs),
        );
        Self {
            prompt_tokens,
            prompt_secs,
            generated_tokens,
            generated_secs,
            wall_secs: self.wall_secs.min(other.wall_secs),
        }
    }
}

/// Checks a `--llama-server` value before anything runs: an `http://` URL or an existing file.
pub fn check_spec(spec: &str) -> anyhow::Result<()> {
    if spec.starts_with("http://") {
        return Ok(());
    }
    if spec.starts_with("https://") {
        bail!("--llama-server takes an http:// URL or a binary path, not https: {spec}");
    }
    if !Path::new(spec).is_file() {
        bail!("--llama-server '{spec}' is neither an http:// URL nor an existing file");
    }
    Ok(())
}

impl LlamaServer {
    /// `spec` is `http://host:port` (a server already running on the same GGUF) or the path
    /// of a `llama-server` binary, started here on `gguf` with `threads` threads and
    /// `parallel` slots of `ctx` tokens each and the `extra` arguments, and stopped when this
    /// value drops.
    pub fn start(
        spec: &str,
        gguf: &Path,
        threads: usize,
        parallel: usize,
        ctx: usize,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        if let Some(rest) = spec.strip_prefix("http://") {
            let addr = rest.trim_end_matches('/').to_string();
            let server = Self {
                addr,
                child: None,
                log: None,
            };
            server.wait_healthy(Duration::from_secs(10))?;
            return Ok(server);
        }
        check_spec(spec)?;
        let bin = Path::new(spec);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port for llama-server")?
            .port();
        let log = std::env::temp_dir().join(format!("spade-llama-server-{port}.log"));
        let out = std::fs::File::create(&log).context("creating the llama-server log")?;
        let mut cmd = Command::new(bin);
        cmd.args(["-m", &gguf.display().to_string()])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-t", &threads.to_string(), "-tb", &threads.to_string()])
            .args(["-np", &parallel.to_string()])
            .args(["-c", &(ctx * parallel).to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out));
        // The binary's shared libraries sit beside it in a CMake build.
        if let Some(dir) = bin.parent() {
            cmd.env("LD_LIBRARY_PATH", dir);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting llama-server '{spec}'"))?;
        let server = Self {
            addr: format!("127.0.0.1:{port}"),
            child: Some(child),
            log: Some(log),
        };
        server.wait_healthy(Duration::from_secs(120))?;
        Ok(server)
    }

    fn wait_healthy(&self, limit: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            if let Ok((200, _)) = self.request("GET", "/health", None) {
                return Ok(());
            }
            if start.elapsed() > limit {
                let tail = self
                    .log
                    .as_ref()
                    .and_then(|p| std::fs::read_to_string(p).ok())
                    .map(|s| s.lines().rev().take(5).collect::<Vec<_>>().join(" | "))
                    .unwrap_or_default();
                bail!(
                    "llama-server at {} was not ready within {} s {tail}",
                    self.addr,
                    limit.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One HTTP/1.1 request (connection closed after it); returns status and body.
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> anyhow::Result<(u16, String)> {
        let mut s = TcpStream::connect(&self.addr)
            .with_context(|| format!("connecting to llama-server at {}", self.addr))?;
        s.set_read_timeout(Some(Duration::from_secs(600)))?;
        let body = body.unwrap_or("");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        )?;
        // Read the header, then exactly `Content-Length` bytes (a server that keeps the
        // connection open despite `Connection: close` must not stall the benchmark).
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let (head_len, body_len) = loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break (None, None);
            }
            raw.extend_from_slice(&buf[..n]);
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                break (Some(end + 4), len);
            }
        };
        match (head_len, body_len) {
            (Some(h), Some(len)) => {
                while raw.len() < h + len {
                    let n = s.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    raw.extend_from_slice(&buf[..n]);
                }
            }
            (Some(_), None) => {
                s.read_to_end(&mut raw)?;
            }
            _ => {}
        }
        let text = String::from_utf8_lossy(&raw);
        let (head, rest) = text
            .split_once("\r\n\r\n")
            .context("llama-server sent no HTTP header")?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .context("llama-server sent no HTTP status")?;
        Ok((status, rest.to_string()))
    }

    /// One completion of `prompt` (token ids), `n` tokens, EOS ignored.
    pub fn complete(&self, prompt: &[u32], n: usize, seed: u64) -> anyhow::Result<LlamaTimings> {
        let body = serde_json::json!({
            "prompt": prompt,
            "n_predict": n,
            "ignore_eos": true,
            "cache_prompt": false,
            "temperature": 1.0,
            "top_k": 0,
            "top_p": 1.0,
            "min_p": 0.0,
            "seed": seed,
        })
        .to_string();
        let start = Instant::now();
        let (status, text) = self.request("POST", "/completion", Some(&body))?;
        let wall_secs = start.elapsed().as_secs_f64();
        if status != 200 {
            bail!("llama-server answered {status}: {}", text.trim());
        }
        let v: serde_json::Value =
            serde_json::from_str(&text).context("llama-server's answer is not JSON")?;
        let t = &v["timings"];
        let num = |k: &str| {
            t[k].as_f64()
                .with_context(|| format!("llama-server's timings lack `{k}`"))
        };
        Ok(LlamaTimings {
            prompt_tokens: num("prompt_n")? as usize,
            prompt_secs: num("prompt_ms")? / 1e3,
            generated_tokens: num("predicted_n")? as usize,
            generated_secs: num("predicted_ms")? / 1e3,
            wall_secs,
        })
    }

    /// The prompts' completions sent at once (one slot each); prompt and generation times are
    /// the longest of the requests, so their rates are the batch's throughput.
    pub fn complete_all(&self, prompts: &[Vec<u32>], n: usize) -> anyhow::Result<LlamaTimings> {
        let start = Instant::now();
        let results: Vec<anyhow::Result<LlamaTimings>> = std::thread::scope(|s| {
            let handles: Vec<_> = prompts
                .iter()
                .enumerate()
                .map(|(i, p)| s.spawn(move || self.complete(p, n, i as u64 + 1)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a request thread panicked"))
                .collect()
        });
        let mut total = LlamaTimings {
            prompt_tokens: 0,
            prompt_secs: 0.0,
            generated_tokens: 0,
            generated_secs: 0.0,
            wall_secs: start.elapsed().as_secs_f64(),
        };
        for r in results {
            let t = r?;
            total.prompt_tokens += t.prompt_tokens;
            total.generated_tokens += t.generated_tokens;
            total.prompt_secs = total.prompt_secs.max(t.prompt_secs);
            total.generated_secs = total.generated_secs.max(t.generated_secs);
        }
        Ok(total)
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
