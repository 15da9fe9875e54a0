//! Check workers shared fairly between tenants.
//!
//! A plain semaphore serves waiters in arrival order, so one tenant that registers its whole
//! quota of slow sources makes every other tenant's registration wait behind all of them (issue
//! 53/10: a benign registration waited 43 s behind two hostile ones). Here a freed worker goes
//! to the waiting tenant that has the fewest checks running, the earliest waiter among equals:
//! a tenant waits for at most one check of each other tenant that is waiting, not for another
//! tenant's whole queue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::registry::Origin;

/// Who a check is for: a tenant's registration, or the command line's (one queue of its own).
type Owner = Option<usize>;

fn owner(origin: Origin) -> Owner {
    match origin {
        Origin::CommandLine => None,
        Origin::Http(tenant) => Some(tenant.0),
    }
}

/// `workers` check slots, handed out fairly between owners.
#[derive(Clone)]
pub struct FairWorkers {
    state: Arc<Mutex<State>>,
}

struct State {
    free: usize,
    running: HashMap<Owner, usize>,
    waiting: VecDeque<(Owner, oneshot::Sender<Worker>)>,
}

/// One check slot, given back when dropped.
pub struct Worker {
    workers: FairWorkers,
    owner: Owner,
    /// Set once the slot is handed on or released, so it is released exactly once.
    done: bool,
}

impl FairWorkers {
    /// `workers` slots (at least one).
    pub fn new(workers: usize) -> FairWorkers {
        FairWorkers {
            state: Arc::new(Mutex::new(State {
                free: workers.max(1),
                running: HashMap::new(),
                waiting: VecDeque::new(),
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain counters and queues, consistent after every statement: a panic
        // elsewhere while it was held leaves nothing half-done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a check of `origin`, waiting for one when all are taken. A waiter whose
    /// future is dropped gives up its place (and a slot handed to it goes on to the next).
    pub async fn acquire(&self, origin: Origin) -> Worker {
        let owner = owner(origin);
        let receiver = {
            let mut state = self.lock();
            if state.free > 0 && state.waiting.is_empty() {
                state.free -= 1;
                *state.running.entry(owner).or_default() += 1;
                return self.worker(owner);
            }
            let (sender, receiver) = oneshot::channel();
            state.waiting.push_back((owner, sender));
            receiver
        };
        match receiver.await {
            Ok(worker) => worker,
            // Senders are only dropped after a send, and sends only go to live waiters.
            Err(_) => unreachable!("a waiter's sender is dropped only by sending to it"),
        }
    }

    fn worker(&self, owner: Owner) -> Worker {
        Worker {
            workers: self.clone(),
            owner,
            done: false,
        }
    }

    /// Gives back `owner`'s slot and hands it to the fairest waiter, if any.
    fn release(&self, owner: Owner) {
        let mut state = self.lock();
        if let Some(count) = state.running.get_mut(&owner) {
            *count -= 1;
            if *count == 0 {
                state.running.remove(&owner);
            }
        }
        state.free += 1;
        while state.free > 0 {
            let Some(index) = fairest(&state) else {
                break;
            };
            let (next, sender) = state.waiting.remove(index).expect("index from the queue");
            if sender.is_closed() {
                continue;
            }
            state.free -= 1;
            *state.running.entry(next).or_default() += 1;
            if let Err(mut unsent) = sender.send(self.worker(next)) {
                // The waiter went away between the check and the send: take the slot back
                // without recursing into this lock.
                unsent.done = true;
                state.free += 1;
                if let Some(count) = state.running.get_mut(&next) {
                    *count -= 1;
                    if *count == 0 {
                        state.running.remove(&next);
                    }
                }
            }
        }
    }

    /// Checks running now, per owner (tests).
    #[cfg(test)]
    fn running(&self, origin: Origin) -> usize {
        self.lock()
            .running
            .get(&owner(origin))
            .copied()
            .unwrap_or(0)
    }
}

/// The waiter to serve next: the first one whose owner has the fewest checks running.
fn fairest(state: &State) -> Option<usize> {
    state
        .waiting
        .iter()
        .enumerate()
        .min_by_key(|(index, (owner, _))| (state.running.get(owner).copied().unwrap_or(0), *index))
        .map(|(index, _)| index)
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            self.workers.release(self.owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Tenant;

    const A: Origin = Origin::Http(Tenant(0));
    const B: Origin = Origin::Http(Tenant(1));

    /// Polls `future` once: whether it finished.
    fn ready<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match future.poll(&mut cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        }
    }

    #[tokio::test]
    async fn a_tenant_waits_for_one_check_of_another_not_its_whole_queue() {
        let workers = FairWorkers::new(2);
        let first = workers.acquire(A).await;
        let second = workers.acquire(A).await;
        // A queues three more, then B one.
        let mut a: Vec<_> = (0..3).map(|_| Box::pin(workers.acquire(A))).collect();
        let mut b = Box::pin(workers.acquire(B));
        for waiter in &mut a {
            assert!(ready(waiter.as_mut()).is_none());
        }
        assert!(ready(b.as_mut()).is_none());
        // One of A's checks ends: B (none running) goes before A's queued ones (one running).
        drop(first);
        let b_worker = ready(b.as_mut()).expect("B is served next");
        assert_eq!((workers.running(A), workers.running(B)), (1, 1));
        for waiter in &mut a {
            assert!(ready(waiter.as_mut()).is_none());
        }
        // Then A's, in their order.
        drop(second);
        let third = ready(a[0].as_mut()).expect("A's first waiter");
        assert!(ready(a[1].as_mut()).is_none());
        drop(b_worker);
        let fourth = ready(a[1].as_mut()).expect("A's second waiter");
        assert!(ready(a[2].as_mut()).is_none());
        drop((third, fourth));
        assert!(ready(a[2].as_mut()).is_some());
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_gives_up_its_place() {
        let workers = FairWorkers::new(1);
        let first = workers.acquire(A).await;
        let mut gone = Box::pin(workers.acquire(B));
        assert!(ready(gone.as_mut()).is_none());
        drop(gone);
        drop(first);
        // The slot is free again, not lost to the waiter that left.
        let again = workers.acquire(A).await;
        assert_eq!(workers.running(A), 1);
        drop(again);
        assert_eq!(workers.running(A), 0);
        assert_eq!(workers.lock().free, 1);
    }

    #[tokio::test]
    async fn free_workers_are_taken_at_once() {
        let workers = FairWorkers::new(2);
        let one = workers.acquire(A).await;
        let two = workers.acquire(A).await;
        assert_eq!(workers.running(A), 2);
        let mut third = Box::pin(workers.acquire(Origin::CommandLine));
        assert!(ready(third.as_mut()).is_none());
        drop(one);
        assert!(ready(third.as_mut()).is_some());
        drop(two);
    }
}
