//! The calling thread's CPU time, for `capture bench`'s split of a pass into what the
//! submitting thread spent and what it waited for. On a driver that runs its work on
//! threads of its own (lavapipe's queue thread) or on a device, end-to-end time mixes
//! both; the calling thread's CPU time is the part the library (or the floor) costs on
//! the host, and on a 2-CPU machine it is far steadier than the wall clock.

#![allow(unsafe_code)]

use std::time::Duration;

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`); `None` where the
/// clock is missing.
#[cfg(unix)]
pub fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// CPU time the calling thread has used: unknown on this platform.
#[cfg(not(unix))]
pub fn thread_cpu() -> Option<Duration> {
    None
}

/// The calling thread's CPU time spent in `f`, beside what `f` returns.
pub fn spent<R>(f: impl FnOnce() -> R) -> (R, Option<Duration>) {
    let before = thread_cpu();
    let r = f();
    let spent = before.zip(thread_cpu()).map(|(b, a)| a.saturating_sub(b));
    (r, spent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn the_clock_counts_work_and_not_sleep() {
        // Work advances it: 20 ms of CPU come within seconds of wall time, however busy
        // the machine.
        let start = std::time::Instant::now();
        let from = thread_cpu().expect("the clock is there");
        while thread_cpu().unwrap() - from < Duration::from_millis(20) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the clock stands still"
            );
            std::hint::black_box(0u64);
        }
        // Sleep does not: 50 ms asleep costs far less than 20 ms of CPU.
        let ((), slept) = spent(|| std::thread::sleep(Duration::from_millis(50)));
        assert!(slept.expect("the clock is there") < Duration::from_millis(20));
    }
}
