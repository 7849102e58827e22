//! How the host waits for a repeated GPU step (a decode step) so that it sees the result
//! at once without holding a CPU core for the whole step.
//!
//! A blocking wait ends with a thread wake-up after the GPU's finish: on the H200's host
//! that cost a 0.1B decode step ≈ 100 µs of its ≈ 680, during which the GPU idles (the
//! next step needs the token). Polling without blocking (`RWKV_SPIN_WAIT_US`,
//! [`crate::gpu::GpuContext::wait_for`]) sees the finish within a poll, but busies a core for
//! the whole step. A [`Pacer`] sleeps through the part of a step the recent steps say
//! cannot hold its finish, and spins only for the rest (benchmarks.md, "the host's wait for
//! a decode step").

use std::collections::VecDeque;
use std::time::Duration;

/// Waits remembered (the steps of one loop are alike; the shortest of them is the guide).
const RECENT: usize = 8;
/// Waits seen before the pacer sleeps at all.
const WARM_UP: usize = 3;
/// Spin kept before the expected finish at first: a sleep's overshoot on Linux (timer
/// slack ≈ 50 µs) and a step's jitter fit in it.
const START_MARGIN: Duration = Duration::from_micros(250);
/// The margin never grows past this (a step shorter than it is not slept through at all).
const MAX_MARGIN: Duration = Duration::from_millis(4);

/// Sleep planner for the read-backs of a loop of alike GPU steps.
#[derive(Debug, Clone)]
pub struct Pacer {
    recent: VecDeque<Duration>,
    margin: Duration,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer {
            recent: VecDeque::with_capacity(RECENT),
            margin: START_MARGIN,
        }
    }
}

impl Pacer {
    /// How long to sleep before polling for the next step's result: the shortest of the
    /// recent waits less the margin, zero until a few waits are known.
    pub fn sleep(&self) -> Duration {
        if self.recent.len() < WARM_UP {
            return Duration::ZERO;
        }
        let shortest = self.recent.iter().min().copied().unwrap_or_default();
        shortest.saturating_sub(self.margin)
    }

    /// Records one step's wait (from the end of its submission to its result in hand) and
    /// whether its result was already there at the first poll after a sleep — the sleep
    /// then lasted past the finish, and the margin doubles (up to 4 ms).
    pub fn record(&mut self, waited: Duration, overslept: bool) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(waited);
        if overslept {
            self.margin = (self.margin * 2).min(MAX_MARGIN);
        }
    }

    /// The current margin (tests, reports).
    pub fn margin(&self) -> Duration {
        self.margin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// No sleep before three waits are known; then the shortest recent wait less the
    /// margin; an oversleep doubles the margin up to its cap; old waits drop out.
    #[test]
    fn sleeps_through_the_shortest_recent_wait_less_the_margin() {
        let mut p = Pacer::default();
        assert_eq!(p.sleep(), Duration::ZERO);
        p.record(us(2_000), false);
        p.record(us(2_100), false);
        assert_eq!(p.sleep(), Duration::ZERO);
        p.record(us(1_900), false);
        assert_eq!(p.sleep(), us(1_900 - 250));
        p.record(us(1_950), true);
        assert_eq!(p.margin(), us(500));
        assert_eq!(p.sleep(), us(1_900 - 500));
        for _ in 0..10 {
            p.record(us(3_000), true);
        }
        assert_eq!(p.margin(), MAX_MARGIN);
        // The 1,900 µs wait has dropped out: only 3,000 µs ones remain.
        assert_eq!(p.sleep(), Duration::ZERO);
        let mut q = Pacer::default();
        for _ in 0..RECENT {
            q.record(us(100), false);
        }
        for _ in 0..RECENT {
            q.record(us(5_000), false);
        }
        assert_eq!(q.sleep(), us(5_000 - 250));
        // A step shorter than the margin is not slept through.
        let mut r = Pacer::default();
        for _ in 0..4 {
            r.record(us(200), false);
        }
        assert_eq!(r.sleep(), Duration::ZERO);
    }
}
