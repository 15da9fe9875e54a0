//! Threads that stay awake through a decode step.
//!
//! A decode step of one sequence runs about two hundred parallel products of 40-100 µs each,
//! with a few microseconds of serial work between them. Through rayon each product had to
//! wake a pool thread that had gone to sleep since the last one; in a virtual machine waking
//! an idle CPU costs tens of microseconds, so two threads ran the products barely faster than
//! one (measured: 1.25x). Here the helper threads spin for [`SPIN`] after each job before
//! they park, so within a step every product starts on threads that are already running, as
//! llama.cpp's do.
//!
//! A job is `tasks` independent tasks; the caller and the helpers claim them one by one from
//! a shared counter. Which thread runs a task never changes what the task computes, so the
//! results do not depend on timing. One job runs at a time: a job started while another is
//! running (another thread's, or a task's own nested job) runs on rayon instead, which gives
//! the same results.
use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// How long a helper spins for the next job before it parks: longer than the serial work
/// between two products of a decode step and between two steps (sampling a token), short
/// enough that an idle process gives its cores back at once.
pub const SPIN: Duration = Duration::from_millis(2);

/// A job's tasks, borrowed for the duration of [`run`]: the pointer's lifetime is erased, and
/// `run` does not return before every helper has finished with it.
type TaskFn = dyn Fn(usize) + Sync;

struct Job {
    task: Option<*const TaskFn>,
    tasks: usize,
}

struct Shared {
    /// Bumped (after `job` is written) to publish a job.
    generation: AtomicU64,
    job: UnsafeCell<Job>,
    /// The next task to claim.
    next: AtomicUsize,
    /// Helpers that have not finished the current job.
    pending: AtomicUsize,
    /// A task of the current job panicked on a helper.
    panicked: AtomicBool,
    /// Helpers parked (or about to park) on `wake`.
    parked: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the thread holding `Pool::busy`, and only while no
// helper reads it (between jobs: `pending` is 0 and `generation` not yet bumped); helpers read
// it after seeing the new generation (acquire) and before decrementing `pending` (release).
// The task it points at is `Sync`.
#[allow(unsafe_code)]
unsafe impl Sync for Shared {}
#[allow(unsafe_code)]
unsafe impl Send for Shared {}

struct Pool {
    shared: Arc<Shared>,
    helpers: usize,
    /// Held for the duration of a job.
    busy: Mutex<()>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: UnsafeCell::new(Job {
                task: None,
                tasks: 0,
            }),
            next: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        // As many threads in all as rayon uses (RAYON_NUM_THREADS or the cores).
        let helpers = rayon::current_num_threads().saturating_sub(1);
        let mut started = 0;
        for i in 0..helpers {
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("spade-decode-{i}"))
                .spawn(move || helper(&s));
            if spawned.is_ok() {
                started += 1;
            }
        }
        Pool {
            shared,
            helpers: started,
            busy: Mutex::new(()),
        }
    })
}

/// Threads a job runs on: the caller and the helpers.
pub fn threads() -> usize {
    pool().helpers + 1
}

/// Runs `task(i)` for every `i` in `0..tasks`, each exactly once, on the caller and the
/// helper threads, and returns when all have finished. A panic in a task is resumed here.
pub fn run(tasks: usize, task: &(dyn Fn(usize) + Sync)) {
    let p = pool();
    if tasks <= 1 || p.helpers == 0 {
        (0..tasks).for_each(task);
        return;
    }
    let _busy = match p.busy.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => {
            (0..tasks).into_par_iter().for_each(task);
            return;
        }
    };
    let s = &*p.shared;
    // SAFETY: we hold `busy` and the previous job has finished (`pending` reached 0 before
    // its `run` returned), so no helper reads `job` now. The lifetime is erased; we wait
    // below until no helper can touch the task again.
    #[allow(unsafe_code)]
    unsafe {
        let erased: *const TaskFn = std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), _>(
            task as *const (dyn Fn(usize) + Sync),
        );
        *s.job.get() = Job {
            task: Some(erased),
            tasks,
        };
    }
    s.next.store(0, Ordering::Relaxed);
    s.panicked.store(false, Ordering::Relaxed);
    s.pending.store(p.helpers, Ordering::Relaxed);
    s.generation.fetch_add(1, Ordering::SeqCst);
    if s.parked.load(Ordering::SeqCst) > 0 {
        let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
        s.wake.notify_all();
    }
    let mine = catch_unwind(AssertUnwindSafe(|| claim(s, task, tasks)));
    let mut spins = 0u32;
    while s.pending.load(Ordering::Acquire) != 0 {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) {
            // A helper was descheduled mid-task: let it have the core.
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
    if let Err(panic) = mine {
        resume_unwind(panic);
    }
    if s.panicked.load(Ordering::Relaxed) {
        panic!("a decode task panicked on a helper thread");
    }
}

/// Splits `data` into chunks of `size` (the last may be shorter) and runs `f(index, chunk)`
/// for each, as [`run`] does.
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    size: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(size > 0, "chunks need a size");
    let len = data.len();
    let ends: Vec<usize> = (1..=len.div_ceil(size))
        .map(|i| (i * size).min(len))
        .collect();
    for_each_part_mut(data, &ends, f);
}

/// Runs `f(index, part)` for every part of `data` cut at `ends` (part `i` is
/// `ends[i - 1]..ends[i]`, the first starting at 0; parts may be empty), as [`run`] does.
/// `ends` must not decrease and must end at `data.len()`.
pub fn for_each_part_mut<T: Send>(
    data: &mut [T],
    ends: &[usize],
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(
        ends.windows(2).all(|w| w[0] <= w[1]),
        "parts must be in order"
    );
    assert_eq!(
        ends.last().copied().unwrap_or(0),
        data.len(),
        "parts must cover the data"
    );
    let base = SendPtr(data.as_mut_ptr());
    run(ends.len(), &|i| {
        let start = if i == 0 { 0 } else { ends[i - 1] };
        // SAFETY: `run` calls each index once and the parts are disjoint ranges of `data`
        // (checked above), which stays mutably borrowed until `run` returns.
        #[allow(unsafe_code)]
        let part =
            unsafe { std::slice::from_raw_parts_mut(base.get().add(start), ends[i] - start) };
        f(i, part)
    });
}

struct SendPtr<T>(*mut T);

impl<T> SendPtr<T> {
    fn get(&self) -> *mut T {
        self.0
    }
}

// SAFETY: only used to hand disjoint chunks of a `Send` slice to other threads.
#[allow(unsafe_code)]
unsafe impl<T: Send> Sync for SendPtr<T> {}

fn claim(s: &Shared, task: &(dyn Fn(usize) + Sync + '_), tasks: usize) {
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= tasks {
            return;
        }
        task(i);
    }
}

fn helper(s: &Shared) {
    // Generation 0 is the pool's state before its first job. (Reading the counter here
    // instead would miss a job published before this thread got to run.)
    let mut seen = 0;
    loop {
        let spin_from = Instant::now();
        let mut spins = 0u32;
        let generation = loop {
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                break g;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && spin_from.elapsed() > SPIN {
                let guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                s.parked.fetch_add(1, Ordering::SeqCst);
                let mut guard = guard;
                while s.generation.load(Ordering::SeqCst) == seen {
                    guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                s.parked.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
                continue;
            }
            std::hint::spin_loop();
        };
        seen = generation;
        // SAFETY: the job was written before the generation we just read (acquire), and the
        // caller keeps it and its task alive until `pending` reaches 0 below.
        #[allow(unsafe_code)]
        let (task, tasks) = unsafe {
            let job = &*s.job.get();
            (&*job.task.expect("a published job has a task"), job.tasks)
        };
        if catch_unwind(AssertUnwindSafe(|| claim(s, task, tasks))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_exactly_once() {
        let counts: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..50 {
            run(counts.len(), &|i| {
                counts[i].fetch_add(1, Ordering::Relaxed);
            });
        }
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 50));
    }

    #[test]
    fn chunks_cover_the_slice_once_with_a_short_last_chunk() {
        let mut v = vec![0usize; 103];
        for_each_chunk_mut(&mut v, 10, |i, c| {
            assert_eq!(c.len(), if i == 10 { 3 } else { 10 });
            for x in c.iter_mut() {
                *x += i + 1;
            }
        });
        for (j, x) in v.iter().enumerate() {
            assert_eq!(*x, j / 10 + 1);
        }
    }

    #[test]
    fn parts_cover_the_slice_once_at_their_ends() {
        let mut v = vec![0usize; 10];
        for_each_part_mut(&mut v, &[0, 3, 4, 4, 10], |i, p| {
            assert_eq!(p.len(), [0, 3, 1, 0, 6][i]);
            for x in p.iter_mut() {
                *x += i + 1;
            }
        });
        assert_eq!(v, [2, 2, 2, 3, 5, 5, 5, 5, 5, 5]);
        let r = catch_unwind(AssertUnwindSafe(|| {
            for_each_part_mut(&mut v, &[4, 3, 10], |_, _| {})
        }));
        assert!(r.is_err(), "overlapping parts were accepted");
        let r = catch_unwind(AssertUnwindSafe(|| {
            for_each_part_mut(&mut v, &[4, 9], |_, _| {})
        }));
        assert!(r.is_err(), "parts short of the data were accepted");
    }

    #[test]
    fn nested_and_concurrent_jobs_complete() {
        let total = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for _ in 0..3 {
                sc.spawn(|| {
                    for _ in 0..20 {
                        run(8, &|_| {
                            run(4, &|_| {
                                total.fetch_add(1, Ordering::Relaxed);
                            })
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 3 * 20 * 8 * 4);
    }

    #[test]
    fn a_job_after_the_helpers_parked_still_runs_everywhere() {
        run(4, &|_| {});
        std::thread::sleep(SPIN * 3);
        let seen = Mutex::new(std::collections::HashSet::new());
        run(64, &|_| {
            seen.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(Duration::from_millis(1));
        });
        // On the pool (or on rayon, when another test holds the pool) with two threads or
        // more, more than one thread took tasks; had a parked helper missed the wake-up,
        // `run` would never have returned.
        let distinct = seen.lock().unwrap().len();
        assert!(distinct >= threads().min(2), "{distinct} threads ran tasks");
    }

    #[test]
    fn a_panicking_task_panics_the_caller_and_the_pool_keeps_working() {
        let r = catch_unwind(|| {
            run(16, &|i| {
                if i == 7 {
                    panic!("task 7");
                }
            })
        });
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        run(16, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 16);
    }
}
