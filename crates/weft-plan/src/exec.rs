//! The executor: a persistent pool that runs one site's member views on
//! several threads, with no thread created per call.
//!
//! A call splits its argument struct into parts ([`KernelArgs::restrict`]
//! over the offer's [`MemberViews`]), publishes them as one job, works on
//! parts itself, and returns when every part is done. Workers spin briefly
//! after a job (the next call of a plan usually follows within
//! microseconds), then sleep on a condition variable.
//!
//! A busy neighbour (another process spinning on one of the cores) must
//! cost a call no more than losing that thread would. Three rules keep it
//! so: a call is cut into up to [`PARTS_PER_THREAD`] parts per thread
//! (fewer when its price says a part would not earn its fixed cost, see
//! [`parts_for`] and `Options::part_min_cycles`), claimed one at a time,
//! so a thread the kernel has descheduled holds back one part, not the
//! rest of the work; the caller, once it has run out of
//! parts, spins a few checks and then yields the core on every check, so
//! a worker that shares the core with it can finish; and a worker that
//! keeps arriving after the parts are gone stops spinning and sleeps until
//! the next publish instead of taking a core it does not get work on.
//!
//! A part claimed by a thread the kernel then deschedules still holds the
//! call back for up to a time slice, and waking a sleeping worker costs a
//! system call per publish. So the caller also keeps score: for each split
//! call it compares the call's whole time (publish, its own parts, the
//! wait) with what it alone would have taken (its own parts' time × parts
//! ÷ parts it ran). Over a window of [`WINDOW`] split calls, if splitting
//! took longer, [`LOST_STREAK`] windows in a row, the pool runs the next
//! calls on the caller alone — [`SOLO_CALLS`], doubling each time
//! splitting loses again (up to 64×),
//! back to the first length after [`CLEAN_WINDOWS`] won windows in a row —
//! then tries threads again. With a core to spare splitting wins and every
//! call is split; beside a busy neighbour two threads cost about what one
//! does. The estimate of the caller alone is taken while the other threads
//! share the memory bus, so it errs towards splitting.
//!
//! Invariants:
//!
//! - **Bit-identical to one call.** Each output element is computed by
//!   exactly one part, and a body's result for an element does not depend
//!   on which range it was called with (the family's `KernelArgs` promise
//!   and its contract), so any split gives the one-thread result.
//! - **No part outlives its call.** [`Executor::run_parts`] and
//!   [`Executor::for_each_part`] return only after every part has
//!   finished, so the raw pointers a job carries (to the kernel or closure
//!   and the caller's parts) are never read after they dangle.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weft_kernel::{Kernel, KernelArgs, MemberViews};

/// How long an idle worker spins before it sleeps.
const SPIN: Duration = Duration::from_micros(300);

/// Parts per thread when a call is split: enough that a stalled thread
/// holds back a small piece, few enough that a part's fixed cost (one
/// claim, one call) stays small beside its work.
pub const PARTS_PER_THREAD: u64 = 4;

/// Completion checks the caller spins through before it starts yielding.
const SPINS_BEFORE_YIELD: u32 = 64;

/// Split calls whose times are summed before splitting is judged.
pub const WINDOW: u32 = 32;

/// Lost windows in a row after which calls run on the caller alone (one
/// lost window is as likely a hiccup of the machine as a neighbour).
pub const LOST_STREAK: u32 = 2;

/// Calls run on the caller alone after the first lost streak; doubled for
/// each lost streak that follows (up to 64×), reset by [`CLEAN_WINDOWS`]
/// won windows in a row.
pub const SOLO_CALLS: u32 = 512;

/// Won windows in a row that reset the solo length.
pub const CLEAN_WINDOWS: u32 = 8;

/// Jobs in a row a worker may arrive too late for (every part claimed)
/// before it stops spinning between jobs and sleeps instead.
const LATE_STREAK: u32 = 4;

/// One published call: parts `0..n`, claimed by whoever comes first.
struct Job {
    run: unsafe fn(*const (), *const (), usize),
    kernel: *const (),
    parts: *const (),
    n: usize,
    next: AtomicUsize,
    done: AtomicUsize,
}

// SAFETY: the pointers are read only by `Job::work` while the publishing
// call waits for every part (see the module invariants); the kernel and
// argument types behind them are `Sync`/`Send` (`KernelArgs` requires it,
// `Kernel` is immutable placed code, `for_each_part` takes a `Sync`
// closure and an atomic).
unsafe impl Send for Job {}
// SAFETY: as for `Send`; the shared state is atomics.
unsafe impl Sync for Job {}

impl Job {
    /// Claim and run parts until none is left; the number this thread ran.
    fn work(&self) -> usize {
        let mut ran = 0;
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                return ran;
            }
            ran += 1;
            // SAFETY: `i < n`, and the publisher keeps `kernel` and
            // `parts[..n]` alive until `done` reaches `n`, which needs this
            // part to finish first.
            unsafe { (self.run)(self.kernel, self.parts, i) };
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// Call part `i` of a `Kernel<A>` job.
///
/// # Safety
///
/// `kernel` points to a live `Kernel<A>`, `parts` to at least `i + 1` live
/// `A`s, each valid for a call (the `Executor::run_parts` promise).
unsafe fn call_part<A: KernelArgs>(kernel: *const (), parts: *const (), i: usize) {
    // SAFETY: the caller's promise, relayed from `run_parts`' caller.
    unsafe {
        let kernel = &*(kernel as *const Kernel<A>);
        kernel.call(&*(parts as *const A).add(i));
    }
}

/// Call part `i` of a [`Executor::for_each_part`] job; a panic is caught
/// and recorded, so it never unwinds through a worker or past the waiting
/// caller.
///
/// # Safety
///
/// `f` points to a live `&(dyn Fn(usize) + Sync)`, `panicked` to a live
/// `AtomicBool` (the `for_each_part` frame, which outlives every part).
unsafe fn call_fn(f: *const (), panicked: *const (), i: usize) {
    // SAFETY: the caller's promise.
    let (f, panicked) = unsafe {
        (
            *(f as *const &(dyn Fn(usize) + Sync)),
            &*(panicked as *const AtomicBool),
        )
    };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i))).is_err() {
        panicked.store(true, Ordering::Release);
    }
}

struct Shared {
    generation: AtomicU64,
    job: Mutex<Option<Arc<Job>>>,
    sleep: Mutex<()>,
    wake: Condvar,
    sleepers: AtomicUsize,
    quit: AtomicBool,
}

/// A persistent pool of `threads - 1` workers plus the calling thread.
pub struct Executor {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    /// The caller's score of stragglers (see the module doc).
    straggle: Mutex<Straggle>,
}

/// Whether calls are split, and the evidence for it.
#[derive(Debug, Default)]
struct Straggle {
    /// Split calls scored in the current window.
    window: u32,
    /// Their whole times, summed.
    split: Duration,
    /// Their estimated times on the caller alone, summed.
    alone: Duration,
    /// Won windows in a row.
    clean: u32,
    /// Lost windows in a row.
    lost: u32,
    /// Calls left to run on the caller alone.
    solo_left: u32,
    /// How long the next solo stretch lasts, as a shift of [`SOLO_CALLS`].
    backoff: u32,
    /// Solo stretches entered so far (for tests and reports).
    stretches: u64,
}

impl Straggle {
    /// Whether the next call runs on the caller alone (and count it).
    fn take_solo(&mut self) -> bool {
        if self.solo_left > 0 {
            self.solo_left -= 1;
            return true;
        }
        false
    }

    /// Score a split call that took `whole` and that the caller alone
    /// would have taken about `alone` for.
    fn score(&mut self, whole: Duration, alone: Duration) {
        self.window += 1;
        self.split += whole;
        self.alone += alone;
        if self.window < WINDOW {
            return;
        }
        let lost = self.split > self.alone;
        (self.window, self.split, self.alone) = (0, Duration::ZERO, Duration::ZERO);
        if lost {
            self.clean = 0;
            self.lost += 1;
            if self.lost < LOST_STREAK {
                return;
            }
            self.lost = 0;
            self.solo_left = SOLO_CALLS << self.backoff;
            self.backoff = (self.backoff + 1).min(6);
            self.stretches += 1;
        } else {
            self.lost = 0;
            self.clean += 1;
            if self.clean >= CLEAN_WINDOWS {
                self.backoff = 0;
            }
        }
    }
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("threads", &self.threads)
            .finish()
    }
}

impl Executor {
    /// A pool running calls on `threads` threads (at least 1: the caller's).
    pub fn new(threads: usize) -> Executor {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            quit: AtomicBool::new(false),
        });
        let workers = (1..threads)
            .filter_map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("weft-exec-{i}"))
                    .spawn(move || worker(&s))
                    .ok()
            })
            .collect::<Vec<_>>();
        // A worker that could not be started leaves fewer threads, not an error.
        let threads = workers.len() + 1;
        Executor {
            shared,
            workers,
            threads,
            straggle: Mutex::new(Straggle::default()),
        }
    }

    /// Threads a call may use (workers that started, plus the caller).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// How many times stragglers have sent the pool to run calls on the
    /// caller alone (see the module doc).
    pub fn solo_stretches(&self) -> u64 {
        self.straggle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stretches
    }

    /// Call `kernel` on every part, the parts shared among the pool's
    /// threads; returns when all are done.
    ///
    /// # Safety
    ///
    /// Each part must be valid for [`Kernel::call`] (pointers live for the
    /// whole call), and the parts must be restrictions of one argument
    /// value to disjoint ranges (so they may run at the same time).
    pub unsafe fn run_parts<A: KernelArgs>(&self, kernel: &Kernel<A>, parts: &[A]) {
        match parts {
            [] => {}
            // SAFETY: the caller's promise for this part.
            [one] => unsafe { kernel.call(one) },
            _ if self.threads == 1 => {
                for p in parts {
                    // SAFETY: the caller's promise, one part at a time.
                    unsafe { kernel.call(p) };
                }
            }
            _ => {
                // SAFETY: `call_part::<A>` reads `kernel` as a `Kernel<A>`
                // and `parts` as `parts.len()` `A`s, both borrowed for the
                // whole dispatch; each part is valid (the caller's promise).
                unsafe {
                    self.dispatch(
                        call_part::<A>,
                        (kernel as *const Kernel<A>).cast(),
                        parts.as_ptr().cast(),
                        parts.len(),
                    )
                }
            }
        }
    }

    /// Call `f(i)` once for every `i` in `0..parts`, the calls shared among
    /// the pool's threads (the calling thread takes some); returns when all
    /// are done. For work that is not a [`Kernel`] (a bench's reference
    /// loop, say). A panic in a part is caught where it happens, the other
    /// parts still run, and it is raised again here once all are done.
    pub fn for_each_part(&self, parts: usize, f: &(dyn Fn(usize) + Sync)) {
        if parts <= 1 || self.threads == 1 {
            (0..parts).for_each(f);
            return;
        }
        let panicked = AtomicBool::new(false);
        // SAFETY: `call_fn` reads `kernel` as a `&dyn Fn(usize) + Sync`
        // (the reference `f`, on this stack frame) and `parts` as the
        // `AtomicBool` above; both outlive the dispatch, which returns only
        // after every part has finished.
        unsafe {
            self.dispatch(
                call_fn,
                (&f as *const &(dyn Fn(usize) + Sync)).cast(),
                (&panicked as *const AtomicBool).cast(),
                parts,
            )
        }
        if panicked.load(Ordering::Acquire) {
            panic!("Executor::for_each_part: a part panicked");
        }
    }

    /// Publish `n` parts of `run(kernel, parts, i)`, work on them here, and
    /// return when every part has finished.
    ///
    /// # Safety
    ///
    /// `run(kernel, parts, i)` must be sound to call for every `i < n`,
    /// concurrently, until this returns.
    unsafe fn dispatch(
        &self,
        run: unsafe fn(*const (), *const (), usize),
        kernel: *const (),
        parts: *const (),
        n: usize,
    ) {
        let solo = self
            .straggle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take_solo();
        if solo {
            for i in 0..n {
                // SAFETY: the caller's promise, one part at a time.
                unsafe { run(kernel, parts, i) };
            }
            return;
        }
        let start = Instant::now();
        let job = Arc::new(Job {
            run,
            kernel,
            parts,
            n,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        });
        self.publish(Some(Arc::clone(&job)));
        let own = Instant::now();
        let ran = job.work();
        let worked = own.elapsed();
        // The parts left are running on other threads. Spin briefly (they
        // usually finish within microseconds), then yield on every check: a
        // worker descheduled in favour of this thread or a neighbour gets
        // the core back sooner.
        let mut spins = 0u32;
        while job.done.load(Ordering::Acquire) < job.n {
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let whole = start.elapsed();
        // Drop the pool's reference so no worker sees this job again.
        *self
            .shared
            .job
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.straggle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .score(whole, alone_estimate(worked, ran, n, whole));
    }

    /// Split `args` over its member views into up to
    /// [`PARTS_PER_THREAD`] × `threads()` parts (cuts on multiples of the
    /// granule; one part on one thread) and run them.
    ///
    /// # Safety
    ///
    /// `args` must be valid for [`Kernel::call`] for the whole call.
    pub unsafe fn run<A: KernelArgs>(&self, kernel: &Kernel<A>, args: &A, views: &MemberViews) {
        // SAFETY: the caller's promise.
        unsafe { self.run_at_most(kernel, args, views, u64::MAX) }
    }

    /// [`Executor::run`] cut into at most `max_parts` parts, but never
    /// fewer than one per thread ([`parts_for`]): a compiled site's budget
    /// from its price.
    ///
    /// # Safety
    ///
    /// `args` must be valid for [`Kernel::call`] for the whole call.
    pub unsafe fn run_at_most<A: KernelArgs>(
        &self,
        kernel: &Kernel<A>,
        args: &A,
        views: &MemberViews,
        max_parts: u64,
    ) {
        let parts = parts_for(self.threads as u64, max_parts);
        let ranges = split_range(args.range(), views.granule, parts);
        let parts: Vec<A> = ranges.into_iter().map(|r| args.restrict(r)).collect();
        // SAFETY: `args` is valid (the caller's promise); its restrictions to
        // the disjoint ranges above are what `KernelArgs` allows to overlap.
        unsafe { self.run_parts(kernel, &parts) }
    }

    fn publish(&self, job: Option<Arc<Job>>) {
        *self
            .shared
            .job
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = job;
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        if self.shared.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = self
                .shared
                .sleep
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.shared.wake.notify_all();
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.shared.quit.store(true, Ordering::SeqCst);
        self.publish(None);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(s: &Shared) {
    let mut seen = 0u64;
    // Jobs in a row this worker found already fully claimed: a sign that
    // it is not getting a core when the caller does (a busy neighbour).
    let mut late = 0u32;
    loop {
        let since = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.quit.load(Ordering::SeqCst) {
                return;
            }
            let g = s.generation.load(Ordering::SeqCst);
            if g != seen {
                seen = g;
                break;
            }
            spins = spins.wrapping_add(1);
            let spinning = late < LATE_STREAK && since.elapsed() < SPIN;
            if spinning {
                if spins.is_multiple_of(256) {
                    // Bounded politeness: let a neighbour on this core run.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            // Sleep until a new generation (checked under the lock, after
            // announcing ourselves, so a publish cannot be missed).
            let mut guard = s.sleep.lock().unwrap_or_else(PoisonError::into_inner);
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            while s.generation.load(Ordering::SeqCst) == seen && !s.quit.load(Ordering::SeqCst) {
                guard = s.wake.wait(guard).unwrap_or_else(PoisonError::into_inner);
            }
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        let job = s.job.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let ran = job.map_or(0, |job| job.work());
        late = if ran == 0 { late.saturating_add(1) } else { 0 };
    }
}

/// What `n` parts would take on one thread that ran `ran` of them in
/// `worked`; `whole` (no evidence either way) when it ran none.
fn alone_estimate(worked: Duration, ran: usize, n: usize, whole: Duration) -> Duration {
    if ran == 0 {
        return whole;
    }
    worked.mul_f64(n as f64 / ran as f64)
}

/// Parts a split call is cut into on `threads` threads with a budget of
/// `max_parts`: [`PARTS_PER_THREAD`] per thread, at most `max_parts`, at
/// least one per thread (one in all on one thread), and always a whole
/// number per thread. Even parts claimed by equal threads finish together
/// only then: 3 parts on 2 threads leave one thread two thirds of the work
/// (ResNet's 1×1 14×14×256→1024 took 0.61 ms in 3 parts, 0.47 in 2, Zen 4).
pub fn parts_for(threads: u64, max_parts: u64) -> u64 {
    match threads {
        0 | 1 => 1,
        t => {
            let p = (t * PARTS_PER_THREAD).min(max_parts).max(t);
            p - p % t
        }
    }
}

/// Cut `range` into at most `parts` contiguous pieces whose inner
/// boundaries are multiples of `granule` (absolute, not relative to the
/// start), as even as the granule allows; empty pieces are dropped.
pub fn split_range(range: Range<u64>, granule: u64, parts: u64) -> Vec<Range<u64>> {
    let g = granule.max(1);
    if range.start >= range.end {
        return Vec::new();
    }
    let first = range.start.div_ceil(g);
    let last = range.end / g;
    let inner = last.saturating_sub(first) + 1; // candidate cut points
    let parts = parts.clamp(1, inner.max(1));
    let mut out = Vec::with_capacity(parts as usize);
    let mut start = range.start;
    for p in 1..parts {
        // The p-th of `parts` evenly spaced cuts, on the granule.
        let cut = ((range.start + (range.end - range.start) * p / parts).div_ceil(g) * g)
            .clamp(start, range.end);
        if cut > start {
            out.push(start..cut);
            start = cut;
        }
    }
    if range.end > start {
        out.push(start..range.end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{
        alone_estimate, parts_for, split_range, Executor, Straggle, CLEAN_WINDOWS, LOST_STREAK,
        PARTS_PER_THREAD, SOLO_CALLS, WINDOW,
    };
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn parts_are_a_whole_number_per_thread_within_the_budget_and_at_most_four_each() {
        assert_eq!(parts_for(1, u64::MAX), 1);
        assert_eq!(parts_for(2, u64::MAX), 2 * PARTS_PER_THREAD);
        assert_eq!(parts_for(2, 0), 2, "a budget below the threads is one each");
        assert_eq!(parts_for(2, 3), 2, "never an odd part left to one thread");
        assert_eq!(parts_for(2, 5), 4);
        assert_eq!(parts_for(3, 2), 3);
        assert_eq!(parts_for(3, 8), 6);
        assert_eq!(parts_for(4, 1000), 4 * PARTS_PER_THREAD);
    }

    #[test]
    fn a_window_where_splitting_lost_sends_calls_to_the_caller_alone_then_back() {
        let us = Duration::from_micros;
        let mut s = Straggle::default();
        // Split calls twice as fast as the caller alone: never solo.
        for _ in 0..4 * WINDOW {
            s.score(us(50), us(100));
        }
        assert!(!s.take_solo());
        // One straggle of 5 ms among fast calls loses its window, but one
        // lost window alone is a hiccup.
        s.score(us(5000), us(100));
        for _ in 1..WINDOW {
            s.score(us(50), us(100));
        }
        assert!(!s.take_solo());
        for _ in 0..WINDOW {
            s.score(us(50), us(100));
        }
        assert!(!s.take_solo(), "a won window ends the streak");
        // Two lost windows in a row do send calls to the caller alone.
        for _ in 0..2 {
            s.score(us(5000), us(100));
            for _ in 1..WINDOW {
                s.score(us(50), us(100));
            }
        }
        for _ in 0..SOLO_CALLS {
            assert!(s.take_solo());
        }
        assert!(!s.take_solo(), "threads are tried again after the stretch");
        // Splitting slightly slower than alone, window after window: each
        // stretch twice the last.
        for _ in 0..LOST_STREAK * WINDOW {
            s.score(us(105), us(100));
        }
        assert_eq!(s.solo_left, 2 * SOLO_CALLS);
        assert_eq!(s.stretches, 2);
        // Enough won windows in a row bring the first length back.
        s.solo_left = 0;
        for _ in 0..CLEAN_WINDOWS * WINDOW {
            s.score(us(50), us(100));
        }
        for _ in 0..LOST_STREAK * WINDOW {
            s.score(us(150), us(100));
        }
        assert_eq!(s.solo_left, SOLO_CALLS);
    }

    #[test]
    fn the_caller_alone_is_estimated_from_its_own_parts() {
        let us = Duration::from_micros;
        assert_eq!(alone_estimate(us(30), 3, 8, us(99)), us(80));
        assert_eq!(alone_estimate(us(30), 0, 8, us(99)), us(99));
    }

    #[test]
    fn a_worker_that_keeps_holding_back_calls_is_left_out_until_the_stretch_ends() {
        let exec = Executor::new(2);
        assert_eq!(exec.threads(), 2, "the worker thread started");
        let caller = std::thread::current().id();
        let on_worker = AtomicUsize::new(0);
        // Parts on the worker take far longer than the caller's: every
        // split call is slower than the caller alone once the worker claims
        // a part.
        let call = || {
            exec.for_each_part(8, &|_| {
                if std::thread::current().id() == caller {
                    std::thread::sleep(Duration::from_micros(300));
                } else {
                    on_worker.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
        };
        for _ in 0..2 * WINDOW {
            call();
            if exec.solo_stretches() > 0 {
                break;
            }
        }
        assert_eq!(exec.solo_stretches(), 1, "the straggles were noticed");
        let before = on_worker.load(Ordering::Relaxed);
        for _ in 0..5 {
            call();
        }
        assert_eq!(
            on_worker.load(Ordering::Relaxed),
            before,
            "solo calls stay on the caller"
        );
    }

    #[test]
    fn for_each_part_runs_every_part_once_before_returning() {
        for threads in [1, 2, 3] {
            let exec = Executor::new(threads);
            for parts in [0usize, 1, 2, 5] {
                let hits: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
                for call in 1..=300 {
                    exec.for_each_part(parts, &|i| {
                        // A slow part: returning early would show as a
                        // count behind `call` right after the call.
                        if i == parts - 1 {
                            std::hint::black_box((0..200).sum::<u64>());
                        }
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                    for (i, h) in hits.iter().enumerate() {
                        assert_eq!(
                            h.load(Ordering::Relaxed),
                            call,
                            "t{threads} p{parts} part {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn for_each_part_raises_a_part_panic_after_all_parts_and_stays_usable() {
        let exec = Executor::new(2);
        let hits = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            exec.for_each_part(4, &|i| {
                hits.fetch_add(1, Ordering::Relaxed);
                assert_ne!(i, 1, "part 1 fails");
            })
        }));
        assert!(r.is_err());
        assert_eq!(hits.load(Ordering::Relaxed), 4);
        let after = AtomicUsize::new(0);
        exec.for_each_part(2, &|_| {
            after.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(after.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_slow_part_does_not_hold_back_the_parts_after_it() {
        // Part 0 stalls (a thread descheduled by a busy neighbour): with
        // parts claimed one at a time, the other thread runs every other
        // part meanwhile, so part 0 is the last to finish.
        let exec = Executor::new(2);
        let order = std::sync::Mutex::new(Vec::new());
        exec.for_each_part(8, &|i| {
            if i == 0 {
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            order.lock().unwrap().push(i);
        });
        let order = order.into_inner().unwrap();
        assert_eq!(order.len(), 8);
        assert_eq!(order.last(), Some(&0), "{order:?}");
    }

    #[test]
    fn split_covers_the_range_on_absolute_granules() {
        for (start, end) in [(0u64, 0u64), (0, 1), (0, 7), (3, 29), (5, 4096), (1, 2)] {
            for g in [1u64, 2, 4] {
                for parts in [1u64, 2, 3, 8] {
                    let r = split_range(start..end, g, parts);
                    let mut next = start;
                    for (i, piece) in r.iter().enumerate() {
                        assert_eq!(piece.start, next);
                        assert!(piece.end > piece.start);
                        if i > 0 {
                            assert_eq!(piece.start % g, 0, "{start}..{end} g{g} p{parts}: {r:?}");
                        }
                        next = piece.end;
                    }
                    assert_eq!(next, end.max(start));
                    assert!(r.len() as u64 <= parts);
                }
            }
        }
        assert_eq!(split_range(0..10, 1, 2), vec![0..5, 5..10]);
    }
}
