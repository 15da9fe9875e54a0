//! Sessions shared between connections and requests.
//!
//! Every session lives in a [`SharedSession`]: its episode behind an async lock, and the session
//! slot it took at admission. A WebSocket connection owns one for its lifetime. HTTP `/mcp`
//! creates sessions that the server holds between requests (`openenv/session/create`, as
//! OpenEnv's server does): a WebSocket may attach to one (`/ws?session_id=`) and
//! `tools/list`/`tools/call` may name it, until `openenv/session/close` or the idle timeout
//! ([`HeldSessions::reap`]) releases its slot.
//!
//! A session is never dropped while the map's lock is held: dropping one finishes its
//! trajectory (file writes) and drops its sandbox, and every other held session's lookup waits
//! on that lock. Close, reaping, shutdown and a detach take what they release out of the map
//! under the lock and drop it after.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::admission::SessionSlot;
use crate::registry::Tenant;
use crate::session::Session;

/// One session, its slot, and who uses it. `S` is the session (generic so that tests can watch
/// when one is dropped).
pub struct SharedSession<S = Session> {
    session: tokio::sync::Mutex<S>,
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

impl SharedSession<Session> {
    /// A session of `owner` that holds `slot`.
    pub fn new(session: Session, slot: SessionSlot, owner: Tenant) -> Arc<SharedSession> {
        SharedSession::with_id(session.id().to_owned(), session, slot, owner)
    }
}

impl<S> SharedSession<S> {
    /// The session `session` with id `id`, of `owner`, holding `slot`.
    fn with_id(id: String, session: S, slot: SessionSlot, owner: Tenant) -> Arc<SharedSession<S>> {
        Arc::new(SharedSession {
            id,
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
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, S> {
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

/// The held sessions by id, behind the lock that every lookup takes.
type SessionMap<S> = Arc<Mutex<HashMap<String, Arc<SharedSession<S>>>>>;

/// The sessions the server holds between requests, by id.
pub struct HeldSessions<S = Session> {
    sessions: SessionMap<S>,
}

impl<S> Default for HeldSessions<S> {
    fn default() -> Self {
        HeldSessions {
            sessions: Arc::default(),
        }
    }
}

/// A WebSocket's attachment to a held session ([`HeldSessions::attach`]): dropping it detaches
/// the session, and releases it if `openenv/session/close` came meanwhile.
pub struct Attached<S = Session> {
    session: Arc<SharedSession<S>>,
    sessions: SessionMap<S>,
}

impl<S> Attached<S> {
    /// The attached session.
    pub fn session(&self) -> &Arc<SharedSession<S>> {
        &self.session
    }
}

impl<S> Drop for Attached<S> {
    fn drop(&mut self) {
        let released = {
            let mut map = self
                .sessions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.session.attached.store(false, Ordering::SeqCst);
            self.session.touch();
            if self.session.closing.load(Ordering::SeqCst) {
                map.remove(&self.session.id)
            } else {
                None
            }
        };
        // Outside the lock (and `self.session` goes after it).
        drop(released);
    }
}

impl<S> HeldSessions<S> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<SharedSession<S>>>> {
        self.sessions.lock().expect("held sessions lock")
    }

    /// Holds `session` until it is closed or idles out (a session of the same id it replaces
    /// is dropped after the lock).
    pub fn insert(&self, session: Arc<SharedSession<S>>) {
        let replaced = self.map().insert(session.id.clone(), session);
        drop(replaced);
    }

    /// The held session `id` of `tenant`. Another tenant's session is not found: its
    /// existence is not revealed either.
    pub fn get(&self, id: &str, tenant: Tenant) -> Option<Arc<SharedSession<S>>> {
        self.map().get(id).filter(|s| s.owner == tenant).cloned()
    }

    /// Attaches a WebSocket of `tenant` to its held session `id` (one at a time), until the
    /// returned guard is dropped. Call it only once the WebSocket upgrade completed: the guard
    /// lives with the upgraded socket, so however the connection ends (closed, broken, its task
    /// dropped at shutdown) the session is detached.
    pub fn attach(&self, id: &str, tenant: Tenant) -> Result<Attached<S>, AttachError> {
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
        let released = {
            let mut map = self.map();
            let session = map.get(id).filter(|s| s.owner == tenant)?;
            if session.attached.load(Ordering::SeqCst) {
                session.closing.store(true, Ordering::SeqCst);
                return Some(Closed::WhenDetached);
            }
            map.remove(id)
        };
        // The session (its trajectory's end, its sandbox) is dropped outside the lock.
        drop(released);
        Some(Closed::Now)
    }

    /// Releases every held session that has no WebSocket attached and has not been used for
    /// `idle`; returns how many. They are dropped after the lock is let go.
    pub fn reap(&self, idle: Duration) -> usize {
        let now = Instant::now();
        let idle_ones: Vec<_> = self
            .map()
            .extract_if(|_, s| !s.attached.load(Ordering::SeqCst) && s.idle_at(now) >= idle)
            .collect();
        idle_ones.len()
    }

    /// Releases every held session (at shutdown), dropping them after the lock is let go.
    pub fn clear(&self) {
        let all = std::mem::take(&mut *self.map());
        drop(all);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::TryLockError;

    use super::*;
    use crate::admission::Admission;

    /// A session that records, when it is dropped, whether the held sessions' lock was taken.
    struct Probe {
        map: SessionMap<Probe>,
        dropped: Arc<AtomicBool>,
        under_lock: Arc<AtomicBool>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            let locked = matches!(self.map.try_lock(), Err(TryLockError::WouldBlock));
            self.under_lock.store(locked, Ordering::SeqCst);
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    /// Holds a probe session `id` of tenant 0; returns its `(dropped, under_lock)` flags.
    fn hold(
        held: &HeldSessions<Probe>,
        admission: &Admission,
        id: &str,
    ) -> (Arc<AtomicBool>, Arc<AtomicBool>) {
        let (dropped, under_lock) = (Arc::default(), Arc::default());
        let probe = Probe {
            map: held.sessions.clone(),
            dropped: Arc::clone(&dropped),
            under_lock: Arc::clone(&under_lock),
        };
        let slot = admission.admit_session(Tenant(0)).unwrap();
        held.insert(SharedSession::with_id(
            id.to_owned(),
            probe,
            slot,
            Tenant(0),
        ));
        (dropped, under_lock)
    }

    fn dropped_outside_the_lock(flags: &(Arc<AtomicBool>, Arc<AtomicBool>), what: &str) {
        assert!(flags.0.load(Ordering::SeqCst), "{what}: not dropped");
        assert!(
            !flags.1.load(Ordering::SeqCst),
            "{what}: dropped while the held sessions' lock was held"
        );
    }

    #[test]
    fn close_reaping_detach_and_shutdown_drop_sessions_outside_the_lock() {
        let admission = Admission::new(8, 8);
        let held = HeldSessions::<Probe>::default();

        let closed = hold(&held, &admission, "closed");
        assert_eq!(held.close("closed", Tenant(0)), Some(Closed::Now));
        dropped_outside_the_lock(&closed, "close");

        let idle = hold(&held, &admission, "idle");
        assert_eq!(held.reap(Duration::ZERO), 1);
        dropped_outside_the_lock(&idle, "reap");

        let detached = hold(&held, &admission, "detached");
        let attached = held.attach("detached", Tenant(0)).unwrap();
        assert_eq!(
            held.close("detached", Tenant(0)),
            Some(Closed::WhenDetached)
        );
        assert!(!detached.0.load(Ordering::SeqCst), "closed while attached");
        drop(attached);
        dropped_outside_the_lock(&detached, "detach after close");

        let left = hold(&held, &admission, "left");
        let replaced = hold(&held, &admission, "replaced");
        let replacement = hold(&held, &admission, "replaced");
        dropped_outside_the_lock(&replaced, "insert over the same id");
        held.clear();
        dropped_outside_the_lock(&left, "clear");
        dropped_outside_the_lock(&replacement, "clear");
        assert_eq!(admission.active(), 0, "every slot is given back");
    }
}
