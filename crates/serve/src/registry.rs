//! Registered environments: each source is checked with `spade check` once; only accepted ones
//! are playable. Registrations over HTTP are bounded in number and in source bytes; unused ones
//! are evicted (least recently used first) to make room, and any can be deleted. Checks run
//! concurrently, at most [`RegistryLimits::check_workers`] at once. Verdicts are cached on disk
//! by source hash (with the guest, the check's options and the limits), so a restarted server
//! does not check again what it checked before.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};
use spade_envtools::check::{CheckOptions, check};
use spade_envtools::trajectory::sha256_hex;
use spade_sandbox::{EnvSource, ErrorKind, Runtime, SandboxOptions};

use crate::fair::FairWorkers;
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
    /// The verdict came from the on-disk cache (an earlier check of the same source under the
    /// same guest, options and limits), not from a check run now.
    pub verdict_from_cache: bool,
    /// The source, compiled (only for accepted sources).
    pub source: Option<EnvSource>,
    /// The tool schemas of a tool-use environment (OpenAI function format), read from a
    /// sandbox of the accepted source; `None` for a plain environment.
    pub tools: Option<Value>,
    /// Where it came from: the command line (never evicted) or `POST /envs`.
    pub origin: Origin,
    /// Source bytes, counted against [`RegistryLimits::max_source_bytes`].
    pub bytes: usize,
    /// The registry's clock when it was last registered or played (for eviction).
    last_used: AtomicU64,
    /// The runtime that compiled the source, told when the registration is dropped.
    runtime: Released,
    /// Another registration (or a check) has the same source: dropping this one leaves the
    /// runtime's copy alone.
    shared: AtomicBool,
}

/// The runtime a registration's source lives in: when the last handle on the registration is
/// dropped (it was evicted or deleted, and no session is resetting it), the runtime lets go of
/// the source's compiled code, plans and snapshots, and its snapshot files are removed once
/// the episodes still playing it end ([`Runtime::release`]).
struct Released(Runtime);

impl std::fmt::Debug for Released {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Runtime")
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if self.shared.load(Ordering::Relaxed) {
            return;
        }
        match self.source.take() {
            Some(source) => self.runtime.0.release_source(source),
            None => self.runtime.0.release(&self.sha256),
        }
    }
}

/// Where a registration came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Named on the `spade serve` command line: not counted against the limits, never evicted,
    /// not deletable over HTTP.
    CommandLine,
    /// Registered with `POST /envs` by a tenant.
    Http(Tenant),
}

/// Who sent a request: the index of its bearer token in the token file (0 for every request
/// of a server without tokens). A tenant's HTTP registrations count against
/// [`RegistryLimits::max_per_token`], and only it can delete them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tenant(pub usize);

impl Registration {
    /// The registration as JSON: id, verdict and the check report.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "accepted": self.accepted,
            "class_name": self.class_name,
            "sha256": self.sha256,
            "tools": self.tools,
            "verdict": self.report,
            "verdict_from_cache": self.verdict_from_cache,
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

/// Bounds on what `POST /envs` may hold. Registrations from the command line are not counted.
#[derive(Debug, Clone)]
pub struct RegistryLimits {
    /// Most registrations over HTTP. Default 256: far more than a rollout's working set, and
    /// at most 256 x 1 MiB of sources (the default body limit).
    pub max_registrations: usize,
    /// Most registrations over HTTP by one token (tenant). Default 64: a quarter of the total,
    /// so one client cannot take the whole registry; past it, the token's own least recently
    /// used unused registration is evicted.
    pub max_per_token: usize,
    /// Most source bytes over all HTTP registrations. Default 64 MiB.
    pub max_source_bytes: usize,
    /// Checks running at once (each is one sandbox, CPU-bound and bounded by the check's fuel
    /// budget, which is checked before every call). Default 2: a hostile source cannot hold
    /// every other registration up, and checks cannot take every core from running sessions.
    /// A freed worker goes to the waiting tenant with the fewest checks running, so a tenant
    /// waits for at most one check of each other waiting tenant, not for another's whole queue.
    pub check_workers: usize,
}

impl Default for RegistryLimits {
    fn default() -> Self {
        RegistryLimits {
            max_registrations: 256,
            max_per_token: 64,
            max_source_bytes: 64 << 20,
            check_workers: 2,
        }
    }
}

/// How many environments are ready, rejected and still being checked (for `/health`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness {
    pub ready: usize,
    pub rejected: usize,
    pub checking: usize,
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
    #[error("environment '{id}' is still being checked; GET /health says how many are ready")]
    Checking { id: String },
    #[error("environment id '{id}' is already registered with a different source")]
    Conflict { id: String },
    #[error(
        "the registry is full: {what}, and every registration is in use by a running episode; DELETE /envs/{{id}} one that is no longer needed"
    )]
    Full { what: String },
    #[error(
        "this token has {used} of its {max} registrations (--max-registrations-per-token), each in use by a running episode; DELETE /envs/{{id}} one that is no longer needed"
    )]
    QuotaFull { used: usize, max: usize },
    #[error("{0}")]
    Forbidden(String),
    #[error(
        "a source of {bytes} bytes is over the registry's limit of {max} bytes (--max-registered-bytes)"
    )]
    TooLarge { bytes: usize, max: usize },
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

/// A check's verdict, the compiled source and the tool schemas (the last two when accepted).
type Checked = (Verdict, Option<EnvSource>, Option<Value>);

/// What a registration keeps of a `spade check` report: read from a report that just ran, or
/// from one cached on disk by an earlier process (the report's JSON, as `spade check --json`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    accepted: bool,
    class_name: Option<String>,
    tool_use: bool,
    error_codes: Vec<String>,
    report: Value,
    /// Read from the cache rather than checked now.
    from_cache: bool,
}

impl Verdict {
    fn from_report(report: &spade_envtools::check::CheckReport) -> Verdict {
        Verdict {
            accepted: report.accepted,
            class_name: report.class_name.clone(),
            tool_use: report.tool_use,
            error_codes: report
                .findings
                .iter()
                .filter(|f| f.severity == spade_envtools::Severity::Error)
                .map(|f| f.code.clone())
                .collect(),
            report: serde_json::to_value(report).expect("check reports serialise"),
            from_cache: false,
        }
    }

    /// The verdict of a cached report; `None` when the bytes are not a report this version
    /// wrote (then the source is checked again).
    fn from_cached(bytes: &[u8]) -> Option<Verdict> {
        let report: Value = serde_json::from_slice(bytes).ok()?;
        let findings = report.get("findings")?.as_array()?;
        let mut error_codes = Vec::new();
        for finding in findings {
            if finding.get("severity")?.as_str()? == "error" {
                error_codes.push(finding.get("code")?.as_str()?.to_owned());
            }
        }
        let accepted = report.get("accepted")?.as_bool()?;
        if accepted != error_codes.is_empty() {
            return None;
        }
        Some(Verdict {
            accepted,
            class_name: match report.get("class_name")? {
                Value::Null => None,
                name => Some(name.as_str()?.to_owned()),
            },
            tool_use: report.get("tool_use")?.as_bool()?,
            error_codes,
            report,
            from_cache: true,
        })
    }

    /// Whether the verdict may be cached: not when a finding came from a call's wall-clock
    /// deadline, which a loaded machine can hit and an idle one not, or from the server's
    /// shared memory budget, which depends on what the other sandboxes held (fuel, the
    /// sandbox's own memory limit and every other outcome are the same on every run).
    fn reproducible(&self) -> bool {
        let findings = self.report["findings"].as_array();
        !findings.into_iter().flatten().any(|f| {
            f["kind"] == ErrorKind::Deadline.as_str()
                || (f["kind"] == ErrorKind::MemoryLimit.as_str()
                    && f["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(spade_sandbox::OVER_BUDGET)))
        })
    }
}

/// What the registry holds, under one lock.
#[derive(Default)]
struct Entries {
    envs: BTreeMap<String, Arc<Registration>>,
    /// Ids whose check is running, with the source's sha256.
    checking: BTreeMap<String, String>,
    /// Ids of the command-line environments not yet checked (for `/health`).
    pending_startup: BTreeSet<String>,
    /// HTTP registrations and their bytes, including the ones being checked.
    http_count: usize,
    http_bytes: usize,
    /// HTTP registrations per tenant, including the ones being checked.
    per_tenant: HashMap<Tenant, usize>,
}

impl Entries {
    fn tenant_count(&self, tenant: Tenant) -> usize {
        self.per_tenant.get(&tenant).copied().unwrap_or(0)
    }

    /// Counts a new HTTP registration of `tenant` with `bytes` of source.
    fn add(&mut self, tenant: Tenant, bytes: usize) {
        self.http_count += 1;
        self.http_bytes += bytes;
        *self.per_tenant.entry(tenant).or_default() += 1;
    }

    /// Uncounts one (deleted, evicted, or failed before it was registered).
    fn remove(&mut self, tenant: Tenant, bytes: usize) {
        self.http_count -= 1;
        self.http_bytes -= bytes;
        if let Some(count) = self.per_tenant.get_mut(&tenant) {
            *count -= 1;
            if *count == 0 {
                self.per_tenant.remove(&tenant);
            }
        }
    }

    /// Whether a registration, or a check under way, has the source of `sha256`.
    fn source_in_use(&self, sha256: &str) -> bool {
        self.envs.values().any(|r| r.sha256 == sha256)
            || self.checking.values().any(|s| s == sha256)
    }

    /// Marks `removed` as sharing its source when another registration, or a check under way,
    /// has the same one (see [`Registration`]'s drop).
    fn mark_shared(&self, removed: &Registration) {
        if self.source_in_use(&removed.sha256) {
            removed.shared.store(true, Ordering::Relaxed);
        }
    }

    /// Ids being checked or waiting for their start-up check, each counted once.
    fn checking_count(&self) -> usize {
        let running = self.checking.keys();
        running
            .filter(|id| !self.pending_startup.contains(*id))
            .count()
            + self.pending_startup.len()
    }
}

/// The environments a server knows, by id (sorted, so listings are stable).
pub struct Registry {
    runtime: Runtime,
    options: CheckOptions,
    limits: RegistryLimits,
    entries: RwLock<Entries>,
    checks: FairWorkers,
    clock: AtomicU64,
}

impl Registry {
    /// An empty registry whose checks run in `runtime` with `options`, under default limits.
    pub fn new(runtime: Runtime, options: CheckOptions) -> Registry {
        Registry::with_limits(runtime, options, RegistryLimits::default())
    }

    /// An empty registry with `limits`.
    pub fn with_limits(
        runtime: Runtime,
        options: CheckOptions,
        limits: RegistryLimits,
    ) -> Registry {
        let workers = limits.check_workers.max(1);
        Registry {
            runtime,
            options,
            limits,
            entries: RwLock::new(Entries::default()),
            checks: FairWorkers::new(workers),
            clock: AtomicU64::new(0),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &RegistryLimits {
        &self.limits
    }

    /// Announces command-line environments before they are checked, so that `/health` counts
    /// them and a reset of one says it is still being checked.
    pub fn expect_startup(&self, ids: impl IntoIterator<Item = String>) {
        self.write().pending_startup.extend(ids);
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Entries> {
        self.entries.write().expect("registry lock")
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Entries> {
        self.entries.read().expect("registry lock")
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Checks `source` and registers it under `id` (default `env-<first 12 hex of its sha256>`),
    /// evicting the least recently used unused HTTP registration when the limits are reached.
    /// Registering the same source under the same id again returns the first verdict. The
    /// flag says whether the registration is new.
    pub async fn register(
        &self,
        tenant: Tenant,
        id: Option<&str>,
        source: &str,
    ) -> Result<(Arc<Registration>, bool), RegistryError> {
        self.register_from(Origin::Http(tenant), id, source).await
    }

    /// [`Registry::register`] for a source named on the command line (not counted against
    /// the limits, never evicted).
    pub async fn register_startup(
        &self,
        id: &str,
        source: &str,
    ) -> Result<Arc<Registration>, RegistryError> {
        let result = self
            .register_from(Origin::CommandLine, Some(id), source)
            .await;
        self.write().pending_startup.remove(id);
        result.map(|(registration, _)| registration)
    }

    async fn register_from(
        &self,
        origin: Origin,
        id: Option<&str>,
        source: &str,
    ) -> Result<(Arc<Registration>, bool), RegistryError> {
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
        if let Some(existing) = self.reserve(origin, &id, &sha256, source.len())? {
            return Ok((existing, false));
        }
        // From here the id is in `checking` and its bytes are reserved. The guard releases
        // both if this future is dropped before the check ends (the client went away: the
        // request's future is dropped with its connection), and the end of the check settles
        // them below.
        let mut reserved = Reserved {
            registry: self,
            id: id.clone(),
            origin,
            bytes: source.len(),
            settled: false,
        };
        let result = self.check_and_compile(origin, &id, &sha256, source).await;
        reserved.settled = true;
        let mut entries = self.write();
        entries.checking.remove(&id);
        let registration = match result {
            Ok((verdict, compiled, tools)) => Arc::new(Registration {
                id: id.clone(),
                sha256,
                accepted: verdict.accepted,
                class_name: verdict.class_name,
                error_codes: verdict.error_codes,
                report: verdict.report,
                verdict_from_cache: verdict.from_cache,
                source: compiled,
                tools,
                origin,
                bytes: source.len(),
                last_used: AtomicU64::new(self.tick()),
                runtime: Released(self.runtime.clone()),
                shared: AtomicBool::new(false),
            }),
            Err(err) => {
                if let Origin::Http(tenant) = origin {
                    entries.remove(tenant, source.len());
                }
                // What the check compiled goes with it, unless another registration (or
                // check) has the same source.
                if !entries.source_in_use(&sha256) {
                    self.runtime.release(&sha256);
                }
                return Err(err);
            }
        };
        entries.envs.insert(id, registration.clone());
        Ok((registration, true))
    }

    /// Looks `id` up and, when it is new, marks it as being checked and reserves room for it
    /// (evicting unused HTTP registrations if needed). `Some`: already registered.
    fn reserve(
        &self,
        origin: Origin,
        id: &str,
        sha256: &str,
        bytes: usize,
    ) -> Result<Option<Arc<Registration>>, RegistryError> {
        // Declared before the lock's guard, so dropped after it however this returns: an
        // evicted registration's drop lets go of its source in the runtime (removing its
        // snapshot files), which must not hold up every other lookup.
        let mut evicted: Vec<Arc<Registration>> = Vec::new();
        let mut entries = self.write();
        match entries.envs.get(id) {
            Some(existing) if existing.sha256 == sha256 => {
                existing.last_used.store(self.tick(), Ordering::Relaxed);
                return Ok(Some(existing.clone()));
            }
            Some(_) => return Err(RegistryError::Conflict { id: id.to_owned() }),
            None => {}
        }
        if entries.checking.contains_key(id) {
            // The same id is being checked right now, with this source or another one.
            return Err(match entries.checking[id] == sha256 {
                true => RegistryError::Checking { id: id.to_owned() },
                false => RegistryError::Conflict { id: id.to_owned() },
            });
        }
        if let Origin::Http(tenant) = origin {
            if bytes > self.limits.max_source_bytes {
                return Err(RegistryError::TooLarge {
                    bytes,
                    max: self.limits.max_source_bytes,
                });
            }
            // The token's quota first, making room among its own registrations...
            while entries.tenant_count(tenant) + 1 > self.limits.max_per_token {
                let Some(victim) = evict_one(&mut entries, Some(tenant)) else {
                    return Err(RegistryError::QuotaFull {
                        used: entries.tenant_count(tenant),
                        max: self.limits.max_per_token,
                    });
                };
                evicted.push(victim);
            }
            // ...then the registry's, among everyone's.
            while entries.http_count + 1 > self.limits.max_registrations
                || entries.http_bytes + bytes > self.limits.max_source_bytes
            {
                let Some(victim) = evict_one(&mut entries, None) else {
                    let what = if entries.http_count + 1 > self.limits.max_registrations {
                        format!(
                            "{} of {} registrations are taken",
                            entries.http_count, self.limits.max_registrations
                        )
                    } else {
                        format!(
                            "{} of {} source bytes are taken and this source has {bytes}",
                            entries.http_bytes, self.limits.max_source_bytes
                        )
                    };
                    return Err(RegistryError::Full { what });
                };
                evicted.push(victim);
            }
            entries.add(tenant, bytes);
        }
        entries.checking.insert(id.to_owned(), sha256.to_owned());
        Ok(None)
    }

    /// The key a verdict of `sha256` is cached under: the source and everything else the
    /// verdict depends on besides the guest (the runtime caches per guest artifact): the
    /// check's options and the sandbox limits.
    fn verdict_key(&self, sha256: &str) -> String {
        let o = &self.options;
        format!(
            "source {sha256}; seeds {} max_steps {} random_win_warning {} fuel_budget {:?}{}; \
             limits {:?}",
            o.seeds,
            o.max_steps,
            o.random_win_warning,
            o.fuel_budget,
            // Only in the key when set, so that the verdicts cached before the option existed
            // (all lenient) keep their keys.
            if o.require_winning_solution {
                " require_winning_solution"
            } else {
                ""
            },
            self.runtime.limits()
        )
    }

    /// The verdict of `source`: cached by an earlier check of the same source under the same
    /// guest, options and limits, or checked now (and cached when it is reproducible).
    async fn verdict(&self, sha256: &str, source: &str) -> Verdict {
        let key = self.verdict_key(sha256);
        if let Some(verdict) = self
            .runtime
            .cached_verdict(&key)
            .and_then(|bytes| Verdict::from_cached(&bytes))
        {
            return verdict;
        }
        let report = check(&self.runtime, source, &self.options).await;
        let verdict = Verdict::from_report(&report);
        if verdict.reproducible() {
            let bytes = serde_json::to_vec(&verdict.report).expect("JSON values serialise");
            if let Err(err) = self.runtime.store_verdict(&key, &bytes) {
                // The verdict stands; only the next process checks this source again.
                eprintln!("spade serve: warning: could not cache a check verdict: {err}");
            }
        }
        verdict
    }

    async fn check_and_compile(
        &self,
        origin: Origin,
        id: &str,
        sha256: &str,
        source: &str,
    ) -> Result<Checked, RegistryError> {
        let _worker = self.checks.acquire(origin).await;
        let verdict = self.verdict(sha256, source).await;
        if !verdict.accepted {
            return Ok((verdict, None, None));
        }
        let failed = |err: spade_sandbox::CallError| {
            RegistryError::Invalid(format!(
                "the accepted source of '{id}' failed to load again: {err}"
            ))
        };
        let prepared = self.runtime.prepare(source).await.map_err(failed)?;
        let tools = if verdict.tool_use {
            let sandbox = self
                .runtime
                .sandbox_from(&prepared, SandboxOptions::seeded(0))
                .await
                .map_err(failed)?;
            match sandbox.info().tools.as_deref().map(serde_json::from_str) {
                Some(Ok(tools)) => Some(tools),
                Some(Err(err)) => {
                    return Err(RegistryError::Invalid(format!(
                        "the tool schemas of '{id}' are not JSON: {err}"
                    )));
                }
                None => None,
            }
        } else {
            None
        };
        Ok((verdict, Some(prepared), tools))
    }

    /// Removes registration `id`, which `tenant` registered over HTTP. Episodes that are
    /// running it go on; new resets cannot name it.
    pub fn delete(&self, tenant: Tenant, id: &str) -> Result<Arc<Registration>, RegistryError> {
        let mut entries = self.write();
        if entries.checking.contains_key(id) {
            return Err(RegistryError::Checking { id: id.to_owned() });
        }
        let Some(found) = entries.envs.get(id) else {
            return Err(RegistryError::Unknown {
                id: id.to_owned(),
                known: entries.envs.keys().cloned().collect(),
            });
        };
        match found.origin {
            Origin::CommandLine => {
                return Err(RegistryError::Forbidden(format!(
                    "environment '{id}' was named on the spade serve command line and cannot be deleted over HTTP"
                )));
            }
            Origin::Http(owner) if owner != tenant => {
                return Err(RegistryError::Forbidden(format!(
                    "environment '{id}' was registered with another token; only that token can delete it"
                )));
            }
            Origin::Http(_) => {}
        }
        let removed = entries.envs.remove(id).expect("found above");
        entries.remove(tenant, removed.bytes);
        entries.mark_shared(&removed);
        Ok(removed)
    }

    /// The registration `id`, or the only one when `id` is `None`.
    pub fn resolve(&self, id: Option<&str>) -> Result<Arc<Registration>, RegistryError> {
        let entries = self.read();
        let envs = &entries.envs;
        match id {
            Some(id) => envs.get(id).cloned().ok_or_else(|| {
                if entries.checking.contains_key(id) || entries.pending_startup.contains(id) {
                    RegistryError::Checking { id: id.to_owned() }
                } else {
                    RegistryError::Unknown {
                        id: id.to_owned(),
                        known: envs.keys().cloned().collect(),
                    }
                }
            }),
            None => match (envs.len(), entries.checking_count()) {
                (0, 0) => Err(RegistryError::None),
                (1, 0) => Ok(envs.values().next().cloned().expect("one entry")),
                (0, _) => {
                    let id = entries
                        .checking
                        .keys()
                        .chain(entries.pending_startup.iter())
                        .next()
                        .cloned()
                        .unwrap_or_default();
                    Err(RegistryError::Checking { id })
                }
                _ => Err(RegistryError::Ambiguous {
                    ids: envs.keys().cloned().collect(),
                }),
            },
        }
    }

    /// The playable source of `id` (or of the only environment); marks it as used.
    pub fn playable(&self, id: Option<&str>) -> Result<Arc<Registration>, RegistryError> {
        let registration = self.resolve(id)?;
        if registration.source.is_none() {
            return Err(RegistryError::Rejected {
                id: registration.id.clone(),
                codes: registration.error_codes.clone(),
            });
        }
        registration.last_used.store(self.tick(), Ordering::Relaxed);
        Ok(registration)
    }

    /// Every registration, by id.
    pub fn list(&self) -> Vec<Arc<Registration>> {
        self.read().envs.values().cloned().collect()
    }

    /// How many are ready, rejected and still being checked.
    pub fn readiness(&self) -> Readiness {
        let entries = self.read();
        let ready = entries.envs.values().filter(|r| r.accepted).count();
        Readiness {
            ready,
            rejected: entries.envs.len() - ready,
            checking: entries.checking_count(),
        }
    }
}

/// Evicts the least recently used HTTP registration (of `only`, when given) that no running
/// episode holds, and hands it over, for the caller to drop once the lock is let go. `None`:
/// there is none.
fn evict_one(entries: &mut Entries, only: Option<Tenant>) -> Option<Arc<Registration>> {
    let victim = entries
        .envs
        .values()
        .filter(|r| match r.origin {
            Origin::Http(tenant) => only.is_none_or(|only| only == tenant),
            Origin::CommandLine => false,
        })
        .filter(|r| Arc::strong_count(r) == 1)
        .min_by_key(|r| r.last_used.load(Ordering::Relaxed))
        .map(|r| (r.id.clone(), r.origin));
    let Some((id, Origin::Http(tenant))) = victim else {
        return None;
    };
    let removed = entries.envs.remove(&id)?;
    entries.remove(tenant, removed.bytes);
    entries.mark_shared(&removed);
    Some(removed)
}

/// A registration's reservation while its source is checked: the id marked as being checked
/// and, for an HTTP registration, its bytes counted against the tenant. Dropped unsettled (the
/// registering future was dropped mid-check), it releases both, so that an abandoned request
/// leaks neither the id nor the tenant's quota.
struct Reserved<'a> {
    registry: &'a Registry,
    id: String,
    origin: Origin,
    bytes: usize,
    /// The check ended: the caller settles the reservation itself.
    settled: bool,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut entries = self.registry.write();
        entries.checking.remove(&self.id);
        if let Origin::Http(tenant) = self.origin {
            entries.remove(tenant, self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_from_the_shared_memory_budget_is_not_cached() {
        let verdict = |kind: &str, message: &str| {
            let report = json!({
                "accepted": false, "class_name": "HogEnv", "tool_use": false,
                "findings": [{"code": kind, "severity": "error", "kind": kind, "message": message}],
            });
            Verdict::from_cached(report.to_string().as_bytes()).unwrap()
        };
        // The sandbox's own limit is the same on every run; the shared budget is not.
        assert!(
            verdict(
                "memory_limit",
                "step failed with memory_limit: memory limit: the environment tried to grow the sandbox memory to 600000000 bytes (limit 536870912 bytes)"
            )
            .reproducible()
        );
        let over = format!(
            "step failed with memory_limit: memory limit: the environment tried to grow the sandbox memory to 40000000 bytes, {} (1 of 2 bytes in use) (limit 536870912 bytes)",
            spade_sandbox::OVER_BUDGET
        );
        assert!(!verdict("memory_limit", &over).reproducible());
        assert!(!verdict("deadline", "step failed with deadline").reproducible());
    }

    #[test]
    fn cached_verdicts_are_read_back_and_odd_bytes_are_refused() {
        let accepted = json!({
            "accepted": true, "class_name": "GridEnv", "tool_use": false,
            "findings": [{"code": "random_wins", "severity": "warning", "kind": null}],
        });
        let verdict = Verdict::from_cached(accepted.to_string().as_bytes()).unwrap();
        assert!(verdict.accepted && verdict.from_cache && !verdict.tool_use);
        assert_eq!(verdict.class_name.as_deref(), Some("GridEnv"));
        assert!(verdict.error_codes.is_empty());
        let rejected = json!({
            "accepted": false, "class_name": null, "tool_use": true,
            "findings": [
                {"code": "step_failed", "severity": "error", "kind": "exception"},
                {"code": "no_end", "severity": "error", "kind": null},
            ],
        });
        let verdict = Verdict::from_cached(rejected.to_string().as_bytes()).unwrap();
        assert_eq!(verdict.error_codes, ["step_failed", "no_end"]);
        assert_eq!(verdict.class_name, None);
        // Accepted with an error finding, or not JSON, or missing fields: checked again.
        let contradictory = json!({
            "accepted": true, "class_name": null, "tool_use": false,
            "findings": [{"code": "no_end", "severity": "error"}],
        });
        assert_eq!(
            Verdict::from_cached(contradictory.to_string().as_bytes()),
            None
        );
        assert_eq!(Verdict::from_cached(b"{\"accepted\": tr"), None);
        assert_eq!(Verdict::from_cached(b"{\"accepted\": true}"), None);
    }

    #[test]
    fn a_verdict_that_met_a_deadline_is_not_cached() {
        let with_kind = |kind: &str| {
            let report = json!({
                "accepted": false, "class_name": "SlowEnv", "tool_use": false,
                "findings": [{"code": "step_failed", "severity": "error", "kind": kind}],
            });
            Verdict::from_cached(report.to_string().as_bytes()).unwrap()
        };
        assert!(!with_kind("deadline").reproducible());
        assert!(with_kind("out_of_fuel").reproducible());
        assert!(with_kind("exception").reproducible());
    }
}
