//! LoRA sync: after each update the trained adapters are written where the inference server
//! reads them and loaded into it under a new name per optimiser step, and sampling moves to
//! that name. One type per server's protocol:
//!
//! - vLLM (`--enable-lora`, `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`): PEFT directory,
//!   `POST /v1/load_lora_adapter {lora_name, lora_path}`, requests name the adapter as
//!   `model`; the previous adapter is unloaded with `POST /v1/unload_lora_adapter`.
//! - SGLang (`--enable-lora`): PEFT directory, `POST /load_lora_adapter {lora_name, lora_path}`,
//!   requests keep the base `model` and name the adapter in `lora_path`; the previous one is
//!   unloaded with `POST /unload_lora_adapter`.
//! - llama.cpp (`llama-server --models-preset FILE`, router mode): its `/lora-adapters`
//!   endpoint only rescales adapters loaded at start, so each adapter is a GGUF LoRA file and
//!   a new preset `[name]` (the base model plus `lora = file`) appended to the router's preset
//!   file; `GET /models?reload=1` reads it, `POST /models/load` starts it, spade waits until it
//!   is `loaded`, requests name it as `model`, and the previous one is unloaded with
//!   `POST /models/unload`.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::client::{CompletionsClient, InferenceError};

/// Which protocol loads adapters into the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdapterServer {
    /// vLLM's runtime LoRA loading.
    Vllm,
    /// SGLang's runtime LoRA loading.
    Sglang,
    /// llama.cpp's router mode with a preset file.
    LlamaCpp,
}

impl AdapterServer {
    /// The name used in flags and configs.
    pub fn as_str(self) -> &'static str {
        match self {
            AdapterServer::Vllm => "vllm",
            AdapterServer::Sglang => "sglang",
            AdapterServer::LlamaCpp => "llama-cpp",
        }
    }

    /// Whether the server reads adapters as GGUF files (else PEFT directories).
    pub fn wants_gguf(self) -> bool {
        self == AdapterServer::LlamaCpp
    }
}

impl std::fmt::Display for AdapterServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AdapterServer {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "vllm" => Ok(AdapterServer::Vllm),
            "sglang" => Ok(AdapterServer::Sglang),
            "llama-cpp" => Ok(AdapterServer::LlamaCpp),
            _ => Err(format!(
                "unknown adapter server '{s}' (known: vllm, sglang, llama-cpp)"
            )),
        }
    }
}

/// What requests send to sample with an adapter (or with the base).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Each request's `model`.
    pub model: String,
    /// Fields added to each request (SGLang's `lora_path`).
    pub extra: Map<String, Value>,
}

/// Where adapters go and how the server gets them.
#[derive(Debug, Clone)]
pub struct SyncConfig {
    /// The protocol.
    pub server: AdapterServer,
    /// The base model's name on the server (the requests' `model` before any update).
    pub base_model: String,
    /// Where spade writes adapters.
    pub local_dir: PathBuf,
    /// The same directory as the server sees it (its paths go into load requests); `None`:
    /// `local_dir`, made absolute (the server runs on this machine or shares its files).
    pub server_dir: Option<PathBuf>,
    /// Adapter names are `<prefix>-step<N>`.
    pub prefix: String,
    /// llama.cpp only: the router's preset file (`--models-preset`), appended to.
    pub llama_presets: Option<PathBuf>,
    /// llama.cpp only: the base GGUF as the server sees it (each preset's `model`).
    pub llama_base_gguf: Option<PathBuf>,
    /// llama.cpp only: how long to wait for a new preset to load.
    pub load_timeout: Duration,
}

/// Why an adapter could not be synced.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The server refused or could not be reached.
    #[error("loading adapter {name} into the inference server: {source}")]
    Server {
        /// The adapter's name.
        name: String,
        /// What the server said.
        source: InferenceError,
    },
    /// A file could not be written.
    #[error("writing adapter {name}: {why}")]
    Write {
        /// The adapter's name.
        name: String,
        /// What failed.
        why: String,
    },
    /// The configuration is incomplete.
    #[error("{0}")]
    Config(String),
    /// llama.cpp's router did not load the preset.
    #[error(
        "llama.cpp's router did not load adapter {name}: {why} (see the server's log; the \
         preset is in {presets})"
    )]
    NotLoaded {
        /// The adapter's name.
        name: String,
        /// What was seen.
        why: String,
        /// The preset file.
        presets: String,
    },
}

/// The error of llama.cpp adapter sync without the router's preset file (checked both by the
/// config's validation, before the model loads, and here).
pub const LLAMA_CPP_NEEDS_PRESETS: &str = "llama.cpp adapter sync needs the router's preset \
file (`llama_presets` in [inference], the file llama-server was started with --models-preset)";

/// Keeps the server's adapter in step with training.
#[derive(Debug)]
pub struct AdapterSync {
    config: SyncConfig,
    client: CompletionsClient,
    /// The adapter sampling uses now (`None`: the base).
    current: Option<String>,
}

impl AdapterSync {
    /// Checks the configuration; talks to the server only when publishing.
    pub fn new(config: SyncConfig, client: CompletionsClient) -> Result<Self, SyncError> {
        if config.server == AdapterServer::LlamaCpp {
            if config.llama_presets.is_none() {
                return Err(SyncError::Config(LLAMA_CPP_NEEDS_PRESETS.into()));
            }
            if config.llama_base_gguf.is_none() {
                return Err(SyncError::Config(
                    "llama.cpp adapter sync needs the base model's GGUF path (`llama_base_gguf` \
                     in [inference], or --model as a .gguf file)"
                        .into(),
                ));
            }
        }
        Ok(AdapterSync {
            config,
            client,
            current: None,
        })
    }

    /// The adapter's name at optimiser step `step`.
    pub fn name(&self, step: u64) -> String {
        format!("{}-step{step}", self.config.prefix)
    }

    /// Where the adapter of `name` is written here.
    pub fn local_path(&self, name: &str) -> PathBuf {
        let file = if self.config.server.wants_gguf() {
            format!("{name}.gguf")
        } else {
            name.to_owned()
        };
        self.config.local_dir.join(file)
    }

    /// The same path as the server sees it.
    fn server_path(&self, name: &str) -> Result<PathBuf, SyncError> {
        let local = self.local_path(name);
        let file = local.file_name().expect("adapter paths have a name");
        match &self.config.server_dir {
            Some(dir) => Ok(dir.join(file)),
            None => std::path::absolute(&local).map_err(|e| SyncError::Write {
                name: name.to_owned(),
                why: format!("making {} absolute: {e}", local.display()),
            }),
        }
    }

    /// The protocol.
    pub fn server(&self) -> AdapterServer {
        self.config.server
    }

    /// What requests send now.
    pub fn target(&self) -> Target {
        target(&self.config, self.current.as_deref())
    }

    /// Loads the adapter `name`, already written at [`Self::local_path`], into the server,
    /// unloads the previous one, and returns what requests send from now on.
    pub async fn publish(&mut self, name: &str) -> Result<Target, SyncError> {
        let path = self.server_path(name)?;
        let server_err = |source| SyncError::Server {
            name: name.to_owned(),
            source,
        };
        match self.config.server {
            AdapterServer::Vllm => {
                self.load_named(
                    "/v1/load_lora_adapter",
                    "/v1/unload_lora_adapter",
                    name,
                    &path,
                )
                .await
                .map_err(server_err)?;
            }
            AdapterServer::Sglang => {
                self.load_named("/load_lora_adapter", "/unload_lora_adapter", name, &path)
                    .await
                    .map_err(server_err)?;
            }
            AdapterServer::LlamaCpp => self.load_llama_preset(name, &path).await?,
        }
        if let Some(previous) = self.current.replace(name.to_owned())
            && previous != name
        {
            self.unload(&previous)
                .await
                .map_err(|source| SyncError::Server {
                    name: previous.clone(),
                    source,
                })?;
        }
        Ok(self.target())
    }

    /// vLLM's and SGLang's load call; an adapter left loaded under the same name (a resumed
    /// run redoing a step) is unloaded and loaded again, so the server reads the new file.
    async fn load_named(
        &self,
        load: &str,
        unload: &str,
        name: &str,
        path: &Path,
    ) -> Result<(), InferenceError> {
        let body = json!({"lora_name": name, "lora_path": path.to_string_lossy()});
        match self
            .client
            .call(hyper::Method::POST, load, Some(&body))
            .await
        {
            Ok(_) => Ok(()),
            Err(InferenceError::Status {
                status, body: said, ..
            }) if status == 400 && said.contains("already") => {
                self.client
                    .call(
                        hyper::Method::POST,
                        unload,
                        Some(&json!({"lora_name": name})),
                    )
                    .await?;
                self.client
                    .call(hyper::Method::POST, load, Some(&body))
                    .await
                    .map(|_| ())
            }
            Err(e) => Err(e),
        }
    }

    async fn unload(&self, name: &str) -> Result<(), InferenceError> {
        let (path, body) = match self.config.server {
            AdapterServer::Vllm => ("/v1/unload_lora_adapter", json!({"lora_name": name})),
            AdapterServer::Sglang => ("/unload_lora_adapter", json!({"lora_name": name})),
            AdapterServer::LlamaCpp => ("/models/unload", json!({"model": name})),
        };
        self.client
            .call(hyper::Method::POST, path, Some(&body))
            .await
            .map(|_| ())
    }

    /// Appends the preset `[name]` to the router's preset file, has the router read it and
    /// load it, and waits until it is loaded.
    async fn load_llama_preset(&self, name: &str, path: &Path) -> Result<(), SyncError> {
        let presets = self.config.llama_presets.as_ref().expect("checked in new");
        let base = self
            .config
            .llama_base_gguf
            .as_ref()
            .expect("checked in new");
        let section = format!(
            "\n[{name}]\nmodel = {}\nlora = {}\n",
            base.display(),
            path.display()
        );
        let write_err = |e: std::io::Error| SyncError::Write {
            name: name.to_owned(),
            why: format!("appending to {}: {e}", presets.display()),
        };
        let existing = match std::fs::read_to_string(presets) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(write_err(e)),
        };
        if !existing.contains(&format!("\n[{name}]\n")) {
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(presets)
                .map_err(write_err)?;
            if existing.is_empty() {
                file.write_all(b"version = 1\n").map_err(write_err)?;
            }
            file.write_all(section.as_bytes()).map_err(write_err)?;
        }
        let server_err = |source| SyncError::Server {
            name: name.to_owned(),
            source,
        };
        self.client
            .call(hyper::Method::GET, "/models?reload=1", None)
            .await
            .map_err(server_err)?;
        if llama_status(&self.client, name).await.map_err(server_err)? != "loaded" {
            self.client
                .call(
                    hyper::Method::POST,
                    "/models/load",
                    Some(&json!({"model": name})),
                )
                .await
                .map_err(server_err)?;
        }
        let start = Instant::now();
        let mut seen_loading = false;
        loop {
            let status = llama_status(&self.client, name).await.map_err(server_err)?;
            match status.as_str() {
                "loaded" => return Ok(()),
                "loading" => seen_loading = true,
                "unloaded" if seen_loading => {
                    return Err(SyncError::NotLoaded {
                        name: name.to_owned(),
                        why: "it went from loading back to unloaded".into(),
                        presets: presets.display().to_string(),
                    });
                }
                _ => {}
            }
            if start.elapsed() > self.config.load_timeout {
                return Err(SyncError::NotLoaded {
                    name: name.to_owned(),
                    why: format!("still {status} after {:?}", self.config.load_timeout),
                    presets: presets.display().to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What requests send with adapter `current` (or the base).
fn target(config: &SyncConfig, current: Option<&str>) -> Target {
    let mut extra = Map::new();
    let model = match (config.server, current) {
        (_, None) => config.base_model.clone(),
        (AdapterServer::Sglang, Some(name)) => {
            extra.insert("lora_path".into(), Value::String(name.to_owned()));
            config.base_model.clone()
        }
        (AdapterServer::Vllm | AdapterServer::LlamaCpp, Some(name)) => name.to_owned(),
    };
    if config.server == AdapterServer::Vllm {
        // The sampled tokens' ids, so training reads exactly what the server sampled.
        extra.insert("return_tokens_as_token_ids".into(), Value::Bool(true));
    }
    Target { model, extra }
}

/// The router's status of model `name` (`GET /models`: `data[].id`, `data[].status.value`);
/// `"missing"` when it is not listed.
async fn llama_status(client: &CompletionsClient, name: &str) -> Result<String, InferenceError> {
    let bytes = client.call(hyper::Method::GET, "/models", None).await?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| InferenceError::BadAnswer {
        url: client.config().url.clone(),
        why: format!("GET /models is not JSON ({e})"),
    })?;
    let status = value
        .get("data")
        .and_then(Value::as_array)
        .and_then(|models| {
            models
                .iter()
                .find(|m| m.get("id").and_then(Value::as_str) == Some(name))
        })
        .map(|m| {
            m.pointer("/status/value")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_owned()
        });
    Ok(status.unwrap_or_else(|| "missing".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(server: AdapterServer) -> SyncConfig {
        SyncConfig {
            server,
            base_model: "base".into(),
            local_dir: "/runs/a".into(),
            server_dir: Some("/mnt/a".into()),
            prefix: "spade".into(),
            llama_presets: Some("/p.ini".into()),
            llama_base_gguf: Some("/m.gguf".into()),
            load_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn each_server_names_the_adapter_its_own_way() {
        let vllm = target(&config(AdapterServer::Vllm), Some("spade-step3"));
        assert_eq!(vllm.model, "spade-step3");
        assert_eq!(vllm.extra["return_tokens_as_token_ids"], true);
        let sglang = target(&config(AdapterServer::Sglang), Some("spade-step3"));
        assert_eq!(sglang.model, "base");
        assert_eq!(sglang.extra["lora_path"], "spade-step3");
        let llama = target(&config(AdapterServer::LlamaCpp), Some("spade-step3"));
        assert_eq!(
            (llama.model.as_str(), llama.extra.len()),
            ("spade-step3", 0)
        );
        let before = target(&config(AdapterServer::Sglang), None);
        assert_eq!((before.model.as_str(), before.extra.len()), ("base", 0));
    }

    #[test]
    fn paths_are_the_servers_view_of_the_local_files() {
        let client =
            CompletionsClient::new(super::super::ClientConfig::new("http://h:1", "base")).unwrap();
        let sync = AdapterSync::new(config(AdapterServer::LlamaCpp), client.clone()).unwrap();
        assert_eq!(sync.name(7), "spade-step7");
        assert_eq!(sync.local_path("x"), PathBuf::from("/runs/a/x.gguf"));
        assert_eq!(
            sync.server_path("x").unwrap(),
            PathBuf::from("/mnt/a/x.gguf")
        );
        let sync = AdapterSync::new(config(AdapterServer::Vllm), client.clone()).unwrap();
        assert_eq!(sync.server_path("x").unwrap(), PathBuf::from("/mnt/a/x"));
        // A preset file that cannot be read is an error, not an empty file to start over.
        let mut unreadable = config(AdapterServer::LlamaCpp);
        unreadable.llama_presets = Some(std::env::temp_dir());
        let mut sync = AdapterSync::new(unreadable, client.clone()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = runtime.block_on(sync.publish("x")).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "writing adapter x: appending to {}:",
                std::env::temp_dir().display()
            )),
            "{err}"
        );
        let mut incomplete = config(AdapterServer::LlamaCpp);
        incomplete.llama_presets = None;
        let err = AdapterSync::new(incomplete, client)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--models-preset"), "{err}");
    }
}
