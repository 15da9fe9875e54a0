//! Registered environments: each source is checked with `spade check` once; only accepted ones
//! are playable.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};
use spade_envtools::check::{CheckOptions, check};
use spade_envtools::trajectory::sha256_hex;
use spade_sandbox::{EnvSource, Runtime};
use tokio::sync::Semaphore;

use crate::protocol::check_id;

/// One registered environment source and its check verdict.
#[derive(Debug)]
pub struct Registration {
    /// The id sessions name it by.
    pub id: String,
    /// sha256 of the source.
    pub sha256: String,
    /// The `spade check` verdict.
    pub accepted: bool,
    /// The environment class, if the source loaded.
    pub class_name: Option<String>,
    /// The error codes that rejected it (empty when accepted).
    pub error_codes: Vec<String>,
    /// The whole `spade check --json` report.
    pub report: Value,
    /// The source, compiled (only for accepted sources).
    pub source: Option<EnvSource>,
}

impl Registration {
    /// The registration as JSON: id, verdict and the check report.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "accepted": self.accepted,
            "class_name": self.class_name,
            "sha256": self.sha256,
            "verdict": self.report,
        })
    }

    /// Short form for listings.
    pub fn summary(&self) -> Value {
        json!({
            "id": self.id,
            "accepted": self.accepted,
            "class_name": self.class_name,
            "sha256": self.sha256,
            "error_codes": self.error_codes,
        })
    }
}

/// Why an environment could not be registered or found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RegistryError {
    #[error("unknown environment id '{id}' (registered: {})", list(.known))]
    Unknown { id: String, known: Vec<String> },
    #[error(
        "no environment is registered: name env files on the `spade serve` command line or POST a source to /envs"
    )]
    None,
    #[error("{} environments are registered, so reset needs an env_id: one of {}", .ids.len(), list(.ids))]
    Ambiguous { ids: Vec<String> },
    #[error("environment '{id}' was rejected by spade check ({}) and cannot be played", .codes.join(", "))]
    Rejected { id: String, codes: Vec<String> },
    #[error("environment id '{id}' is already registered with a different source")]
    Conflict { id: String },
    #[error("{0}")]
    Invalid(String),
}

fn list(ids: &[String]) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.join(", ")
    }
}

/// The environments a server knows, by id (sorted, so listings are stable).
pub struct Registry {
    runtime: Runtime,
    options: CheckOptions,
    envs: RwLock<BTreeMap<String, Arc<Registration>>>,
    /// Checks run one at a time: a check is CPU-bound and bounded by fuel, not by time.
    checks: Semaphore,
}

impl Registry {
    /// An empty registry whose checks run in `runtime` with `options`.
    pub fn new(runtime: Runtime, options: CheckOptions) -> Registry {
        Registry {
            runtime,
            options,
            envs: RwLock::new(BTreeMap::new()),
            checks: Semaphore::new(1),
        }
    }

    /// Checks `source` and registers it under `id` (default `env-<first 12 hex of its sha256>`).
    /// Registering the same source under the same id again returns the first verdict.
    pub async fn register(
        &self,
        id: Option<&str>,
        source: &str,
    ) -> Result<Arc<Registration>, RegistryError> {
        if source.trim().is_empty() {
            return Err(RegistryError::Invalid(
                "the environment source is empty".to_owned(),
            ));
        }
        let sha256 = sha256_hex(source.as_bytes());
        let id = match id {
            Some(id) => {
                check_id(id, "environment id").map_err(RegistryError::Invalid)?;
                id.to_owned()
            }
            None => format!("env-{}", &sha256[..12]),
        };
        if let Some(existing) = self.lookup(&id, &sha256)? {
            return Ok(existing);
        }
        let _permit = self.checks.acquire().await.expect("never closed");
        if let Some(existing) = self.lookup(&id, &sha256)? {
            return Ok(existing);
        }
        let report = check(&self.runtime, source, &self.options).await;
        let compiled = if report.accepted {
            match self.runtime.prepare(source).await {
                Ok(prepared) => Some(prepared),
                Err(err) => {
                    return Err(RegistryError::Invalid(format!(
                        "the accepted source failed to compile again: {err}"
                    )));
                }
            }
        } else {
            None
        };
        let error_codes = report
            .findings
            .iter()
            .filter(|f| f.severity == spade_envtools::Severity::Error)
            .map(|f| f.code.clone())
            .collect();
        let registration = Arc::new(Registration {
            id: id.clone(),
            sha256,
            accepted: report.accepted,
            class_name: report.class_name.clone(),
            error_codes,
            report: serde_json::to_value(&report).expect("check reports serialise"),
            source: compiled,
        });
        self.envs
            .write()
            .expect("registry lock")
            .insert(id, registration.clone());
        Ok(registration)
    }

    /// The registration under `id`, `None` if absent, an error if `id` holds another source.
    fn lookup(&self, id: &str, sha256: &str) -> Result<Option<Arc<Registration>>, RegistryError> {
        match self.envs.read().expect("registry lock").get(id) {
            Some(existing) if existing.sha256 == sha256 => Ok(Some(existing.clone())),
            Some(_) => Err(RegistryError::Conflict { id: id.to_owned() }),
            None => Ok(None),
        }
    }

    /// The registration `id`, or the only one when `id` is `None`.
    pub fn resolve(&self, id: Option<&str>) -> Result<Arc<Registration>, RegistryError> {
        let envs = self.envs.read().expect("registry lock");
        match id {
            Some(id) => envs.get(id).cloned().ok_or_else(|| RegistryError::Unknown {
                id: id.to_owned(),
                known: envs.keys().cloned().collect(),
            }),
            None => match envs.len() {
                0 => Err(RegistryError::None),
                1 => Ok(envs.values().next().cloned().expect("one entry")),
                _ => Err(RegistryError::Ambiguous {
                    ids: envs.keys().cloned().collect(),
                }),
            },
        }
    }

    /// The playable source of `id` (or of the only environment).
    pub fn playable(&self, id: Option<&str>) -> Result<Arc<Registration>, RegistryError> {
        let registration = self.resolve(id)?;
        if registration.source.is_none() {
            return Err(RegistryError::Rejected {
                id: registration.id.clone(),
                codes: registration.error_codes.clone(),
            });
        }
        Ok(registration)
    }

    /// Every registration, by id.
    pub fn list(&self) -> Vec<Arc<Registration>> {
        self.envs
            .read()
            .expect("registry lock")
            .values()
            .cloned()
            .collect()
    }
}
