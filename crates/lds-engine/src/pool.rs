//! The threads of parallel search (SifrDB §4.3's search threads): a queue of jobs, threads
//! that poll it briefly before sleeping, and a wait for every job to finish (a closing store
//! waits, since a job holds the store). Nothing here knows what a job does.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    jobs: VecDeque<Job>,
    /// Jobs submitted and not finished (a job holds the store until it finishes).
    in_flight: usize,
    closed: bool,
}

struct Inner {
    queue: Mutex<Queue>,
    ready: Condvar,
    idle: Condvar,
    /// Jobs in the queue (read without the lock while a thread polls).
    queued: AtomicUsize,
    /// Threads asleep on `ready` (a submit wakes one only then).
    sleeping: AtomicUsize,
    /// How long a job waits from its submit to its start.
    handoff: Latency,
}

/// A moving average of a latency in nanoseconds (each new sample weighs an eighth).
pub(crate) struct Latency(AtomicU64);

impl Latency {
    pub(crate) const fn new(initial_ns: u64) -> Self {
        Self(AtomicU64::new(initial_ns))
    }

    pub(crate) fn record(&self, sample: std::time::Duration) {
        let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX);
        // Racing updates may lose a sample: an estimate, not a count.
        let old = self.0.load(Ordering::Relaxed);
        self.0.store(old - old / 8 + sample / 8, Ordering::Relaxed);
    }

    pub(crate) fn nanos(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// How long a search thread polls for the next job, and a lookup for its results, before
/// sleeping: SifrDB's server thread polls, since a wake-up costs more than a search.
const POLL: std::time::Duration = std::time::Duration::from_micros(20);

/// Polls `ready` until it is true or `POLL` passes; true if it became true.
pub(crate) fn poll(ready: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() > POLL {
            return false;
        }
    }
}

/// The search threads (SifrDB's background search threads).
pub(crate) struct SearchPool {
    inner: Arc<Inner>,
}

impl SearchPool {
    /// A pool of `threads` threads.
    pub(crate) fn new(threads: usize) -> std::io::Result<Self> {
        let queue = Queue { jobs: VecDeque::new(), in_flight: 0, closed: false };
        let inner = Arc::new(Inner {
            queue: Mutex::new(queue),
            ready: Condvar::new(),
            idle: Condvar::new(),
            queued: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            // A wake-up of a sleeping thread on this kind of machine, until measured.
            handoff: Latency::new(20_000),
        });
        for number in 0..threads {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new().name(format!("lds-search-{number}")).spawn(move || work(&inner))?;
        }
        Ok(Self { inner })
    }

    pub(crate) fn submit(&self, job: Job) {
        let (inner, submitted) = (Arc::clone(&self.inner), std::time::Instant::now());
        let job: Job = Box::new(move || {
            inner.handoff.record(submitted.elapsed());
            job();
        });
        let mut queue = self.inner.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.jobs.push_back(job);
        queue.in_flight += 1;
        self.inner.queued.fetch_add(1, Ordering::Release);
        let sleeping = self.inner.sleeping.load(Ordering::Acquire) > 0;
        drop(queue);
        if sleeping {
            self.inner.ready.notify_one();
        }
    }

    /// The average time from a submit to the job's start, in nanoseconds.
    pub(crate) fn handoff_ns(&self) -> u64 {
        self.inner.handoff.nanos()
    }

    /// Waits until every job submitted has finished (and let go of the store): a store
    /// closing waits, so that its volume is free once it is closed.
    pub(crate) fn wait_idle(&self) {
        let mut queue = self.inner.queue.lock().unwrap_or_else(PoisonError::into_inner);
        while queue.in_flight > 0 {
            queue = self.inner.idle.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for SearchPool {
    /// The threads end once the queue is empty; not joined (a job may hold the last reference
    /// to the store that owns the pool).
    fn drop(&mut self) {
        self.inner.queue.lock().unwrap_or_else(PoisonError::into_inner).closed = true;
        self.inner.ready.notify_all();
    }
}

fn work(inner: &Inner) {
    loop {
        poll(|| inner.queued.load(Ordering::Acquire) > 0);
        let job = {
            let mut queue = inner.queue.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                if let Some(job) = queue.jobs.pop_front() {
                    inner.queued.fetch_sub(1, Ordering::Release);
                    break job;
                }
                if queue.closed {
                    return;
                }
                // `sleeping` is raised under the lock a submit takes: no job is missed.
                inner.sleeping.fetch_add(1, Ordering::AcqRel);
                queue = inner.ready.wait(queue).unwrap_or_else(PoisonError::into_inner);
                inner.sleeping.fetch_sub(1, Ordering::AcqRel);
            }
        };
        // The job's captures (the store among them) are dropped when it returns.
        job();
        let mut queue = inner.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.in_flight -= 1;
        if queue.in_flight == 0 {
            inner.idle.notify_all();
        }
    }
}
