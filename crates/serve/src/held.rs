//! Sessions shared between connections and requests.
//!
//! Every session lives in a [`SharedSession`]: its episode behind an async lock, and the session
//! slot it took at admission. A WebSocket connection owns one for its lifetime. HTTP `/mcp`
//! creates sessions that the server holds between requests (`openenv/session/create`, as
//! OpenEnv's server does): a WebSocket may attach to one (`/ws?session_id=`) and
//! `tools/list`/`tools/call` may name it, until `openenv/session/close` or the idle timeout
//! ([`HeldSessions::reap`]) releases its slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::admission::SessionSlot;
use crate::registry::Tenant;
use crate::session::Session;

/// One session, its slot, and who uses it.
pub struct SharedSession {
    session: tokio::sync::Mutex<Session>,
    id: String,
    /// The tenant (bearer token) that created it: only it may attach to, fork, call tools in
    /// or close the session while the server holds it.
    owner: Tenant,
    /// The admission slot (and the owner's count): released when the last handle is dropped.
    _slot: SessionSlot,
    /// A WebSocket is attached (a held session has at most one).
    attached: AtomicBool,
    /// `openenv/session/close` came while a WebSocket was attached: the session is released
    /// when it detaches.
    closing: AtomicBool,
    last_used: Mutex<Instant>,
}

impl SharedSession {
    /// A session of `owner` that holds `slot`.
    pub fn new(session: Session, slot: SessionSlot, owner: Tenant) -> Arc<SharedSession> {
        Arc::new(SharedSession {
            id: session.id().to_owned(),
            owner,
            session: tokio::sync::Mutex::new(session),
            _slot: slot,
            attached: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The tenant that created the session.
    pub fn owner(&self) -> Tenant {
        self.owner
    }

    /// The session, locked for one call; marks it as used.
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, Session> {
        let guard = self.session.lock().await;
        self.touch();
        guard
    }

    fn touch(&self) {
        *self.last_used.lock().expect("last_used lock") = Instant::now();
    }

    /// How long since the session was last used (by any connection or request).
    pub fn idle_for(&self) -> Duration {
        self.idle_at(Instant::now())
    }

    fn idle_at(&self, now: Instant) -> Duration {
        now.saturating_duration_since(*self.last_used.lock().expect("last_used lock"))
    }
}

/// Why a WebSocket could not attach to a held session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttachError {
    #[error(
        "Unknown session_id: {0} (sessions to attach to are created with openenv/session/create on POST /mcp, and released by openenv/session/close or the idle timeout)"
    )]
    Unknown(String),
    #[error("Session {0} already has an attached WebSocket")]
    Attached(String),
}

/// How `openenv/session/close` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Released now.
    Now,
    /// A WebSocket is attached: released when it detaches.
    WhenDetached,
}

/// The sessions the server holds between requests, by id.
#[derive(Default)]
pub struct HeldSessions {
    sessions: Arc<Mutex<HashMap<String, Arc<SharedSession>>>>,
}

/// A WebSocket's attachment to a held session ([`HeldSessions::attach`]): dropping it detaches
/// the session, and releases it if `openenv/session/close` came meanwhile.
pub struct Attached {
    session: Arc<SharedSession>,
    sessions: Arc<Mutex<HashMap<String, Arc<SharedSession>>>>,
}

impl Attached {
    /// The attached session.
    pub fn session(&self) -> &Arc<SharedSession> {
        &self.session
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let mut map = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.session.attached.store(false, Ordering::SeqCst);
        self.session.touch();
        if self.session.closing.load(Ordering::SeqCst) {
            map.remove(&self.session.id);
        }
    }
}

impl HeldSessions {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<SharedSession>>> {
        self.sessions.lock().expect("held sessions lock")
    }

    /// Holds `session` until it is closed or idles out.
    pub fn insert(&self, session: Arc<SharedSession>) {
        self.map().insert(session.id.clone(), session);
    }

    /// The held session `id` of `tenant`. Another tenant's session is not found: its
    /// existence is not revealed either.
    pub fn get(&self, id: &str, tenant: Tenant) -> Option<Arc<SharedSession>> {
        self.map().get(id).filter(|s| s.owner == tenant).cloned()
    }

    /// Attaches a WebSocket of `tenant` to its held session `id` (one at a time), until the
    /// returned guard is dropped. Call it only once the WebSocket upgrade completed: the guard
    /// lives with the upgraded socket, so however the connection ends (closed, broken, its task
    /// dropped at shutdown) the session is detached.
    pub fn attach(&self, id: &str, tenant: Tenant) -> Result<Attached, AttachError> {
        let map = self.map();
        let session = map
            .get(id)
            .filter(|s| s.owner == tenant)
            .ok_or_else(|| AttachError::Unknown(id.to_owned()))?;
        if session.attached.swap(true, Ordering::SeqCst) {
            return Err(AttachError::Attached(id.to_owned()));
        }
        session.touch();
        Ok(Attached {
            session: session.clone(),
            sessions: self.sessions.clone(),
        })
    }

    /// Releases `tenant`'s held session `id` now, or when its WebSocket detaches; `None`:
    /// unknown id (or another tenant's).
    pub fn close(&self, id: &str, tenant: Tenant) -> Option<Closed> {
        let mut map = self.map();
        let session = map.get(id).filter(|s| s.owner == tenant)?;
        if session.attached.load(Ordering::SeqCst) {
            session.closing.store(true, Ordering::SeqCst);
            return Some(Closed::WhenDetached);
        }
        map.remove(id);
        Some(Closed::Now)
    }

    /// Releases every held session that has no WebSocket attached and has not been used for
    /// `idle`; returns how many.
    pub fn reap(&self, idle: Duration) -> usize {
        let now = Instant::now();
        let mut map = self.map();
        let before = map.len();
        map.retain(|_, s| s.attached.load(Ordering::SeqCst) || s.idle_at(now) < idle);
        before - map.len()
    }

    /// Releases every held session (at shutdown).
    pub fn clear(&self) {
        self.map().clear();
    }
}
