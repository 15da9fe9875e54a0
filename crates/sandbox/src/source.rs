//! Environment sources, compiled once per process and shared by every sandbox that loads them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use sha2::Digest as _;
use tokio::sync::OnceCell;

use crate::cache::snapshot::LoadPlan;
use crate::config::Limits;

/// An environment source and its compiled bytecode.
///
/// Compiling Python is the dominant cost of loading an environment inside the interpreter, and
/// SPADE plays every environment many times. [`Runtime::prepare`](crate::Runtime::prepare)
/// compiles a source once (in a throwaway sandbox, or not at all when an earlier process
/// cached its bytecode on disk); every sandbox created from the result
/// loads the bytecode. Loading from bytecode is what every sandbox does, so the fuel a load
/// reports does not depend on whether the source was already compiled.
#[derive(Clone)]
pub struct EnvSource {
    inner: Arc<Inner>,
}

struct Inner {
    text: String,
    sha256: String,
    code: Vec<u8>,
    /// How sandboxes are loaded, decided once per `max_turns`, limits and snapshot setting.
    plans: Mutex<Vec<(PlanKey, Arc<OnceCell<LoadPlan>>)>>,
}

/// What a load plan depends on besides the source.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlanKey {
    pub max_turns: Option<u32>,
    pub limits: Limits,
    pub snapshots: bool,
}

impl EnvSource {
    pub(crate) fn new(text: &str, sha256: String, code: Vec<u8>) -> Self {
        EnvSource {
            inner: Arc::new(Inner {
                text: text.to_owned(),
                sha256,
                code,
                plans: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The cell holding the load plan for `key` (empty until the first sandbox decides it).
    pub(crate) fn plan_cell(&self, key: PlanKey) -> Arc<OnceCell<LoadPlan>> {
        let mut plans = self.inner.plans.lock().expect("plan lock");
        if let Some((_, cell)) = plans.iter().find(|(k, _)| *k == key) {
            return cell.clone();
        }
        let cell = Arc::new(OnceCell::new());
        plans.push((key, cell.clone()));
        cell
    }

    /// The Python source.
    pub fn text(&self) -> &str {
        &self.inner.text
    }

    /// sha256 of the source text (hex).
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    /// The marshalled code object the guest compiled from the source.
    pub fn code(&self) -> &[u8] {
        &self.inner.code
    }
}

impl std::fmt::Debug for EnvSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvSource")
            .field("sha256", &self.inner.sha256)
            .field("code_bytes", &self.inner.code.len())
            .finish()
    }
}

/// Compiled sources by sha256, oldest evicted first.
pub(crate) struct SourceCache {
    capacity: usize,
    entries: Mutex<(HashMap<String, EnvSource>, VecDeque<String>)>,
}

impl SourceCache {
    pub(crate) fn new(capacity: usize) -> Self {
        SourceCache {
            capacity,
            entries: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    pub(crate) fn get(&self, text: &str) -> (String, Option<EnvSource>) {
        let sha256 = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        let entries = self.entries.lock().expect("source cache lock");
        let hit = entries.0.get(&sha256).cloned();
        (sha256, hit)
    }

    pub(crate) fn insert(&self, source: EnvSource) {
        let mut entries = self.entries.lock().expect("source cache lock");
        let (map, order) = &mut *entries;
        if map
            .insert(source.sha256().to_owned(), source.clone())
            .is_none()
        {
            order.push_back(source.sha256().to_owned());
        }
        while order.len() > self.capacity {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }
}
