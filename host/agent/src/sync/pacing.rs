//! How many of the runtime's heavy calls (RunPodSandbox, CreateContainer,
//! StartContainer) a burst of pod starts makes at once. Unpaced, 100 pods bound together
//! ask containerd for 100 sandboxes at the same moment and every call waits on every
//! other; paced, a few run at a time and each returns sooner. A call that takes longer
//! than [`HOLD`] gives its turn back and carries on, so a stuck runtime call (a CNI plugin
//! hanging) never holds up the node's other pods for longer than that.
//!
//! A free turn goes to the waiting call of the latest [`Step`] (then the longest
//! waiting): a pod whose sandbox is made has its container created and started before
//! another pod's sandbox is begun, so the pods of a burst reach Running one after
//! another instead of all together at its end.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// Calls at once per CPU by default: on two cores, 8 started 100 pods on containerd in
/// 0.84× the time of the runtime's own unpaced floor, each Running stored ≤ 38 ms after
/// its container started at p99 (unpaced: 0.99× and 248 ms; 2 per CPU: 0.89× and 25 ms).
pub const PER_CPU: u64 = 4;

/// The default number of calls at once on a node of `cpus` CPUs.
pub fn default_limit(cpus: u64) -> usize {
    usize::try_from(cpus.max(1) * PER_CPU).unwrap_or(usize::MAX)
}

/// The longest a call keeps its turn.
pub const HOLD: Duration = Duration::from_secs(1);

/// Which of a pod's start calls is paced: a later step goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// RunPodSandbox.
    Sandbox = 0,
    /// CreateContainer.
    Create = 1,
    /// StartContainer.
    Start = 2,
}

/// Turns for heavy runtime calls.
#[derive(Debug, Default)]
pub struct Pacer {
    /// `None`: unpaced.
    turns: Option<Arc<Turns>>,
}

/// The free turns, and who waits for one, by step.
#[derive(Debug)]
struct Turns(Mutex<(usize, [VecDeque<oneshot::Sender<Turn>>; 3])>);

/// A turn held: given back (to the next waiter, else to the free ones) when dropped.
#[derive(Debug)]
struct Turn(Arc<Turns>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

impl Turns {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, [VecDeque<oneshot::Sender<Turn>>; 3])> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A turn for a call of `step`: at once if one is free, else when given.
    async fn take(self: &Arc<Self>, step: Step) -> Option<Turn> {
        let given = {
            let mut state = self.lock();
            if state.0 > 0 {
                state.0 -= 1;
                return Some(Turn(self.clone()));
            }
            let (tx, rx) = oneshot::channel();
            state.1[step as usize].push_back(tx);
            rx
        };
        given.await.ok()
    }

    /// Hands a turn to the waiter of the latest step, else frees it. A waiter that has
    /// gone meanwhile refuses it, and dropping the refused turn hands it on again.
    fn give_back(self: &Arc<Self>) {
        let next = {
            let mut state = self.lock();
            match state.1.iter_mut().rev().find_map(VecDeque::pop_front) {
                Some(waiter) => waiter,
                None => {
                    state.0 += 1;
                    return;
                }
            }
        };
        let _ = next.send(Turn(self.clone()));
    }
}

impl Pacer {
    /// At most `limit` calls at once (0: no limit).
    pub fn new(limit: usize) -> Self {
        Pacer {
            turns: (limit > 0).then(|| Arc::new(Turns(Mutex::new((limit, Default::default()))))),
        }
    }

    /// Runs `call`, a pod's `step`, in its turn.
    pub async fn run<F: Future>(&self, step: Step, call: F) -> F::Output {
        let Some(turns) = &self.turns else {
            return call.await;
        };
        let turn = turns.take(step).await;
        tokio::pin!(call);
        tokio::select! {
            out = &mut call => return out,
            _ = tokio::time::sleep(HOLD) => {}
        }
        drop(turn);
        call.await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn at_most_the_limit_run_and_a_stuck_call_gives_its_turn_back() {
        let pacer = Arc::new(Pacer::new(2));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let call = |pacer: Arc<Pacer>, running: Arc<AtomicUsize>, most: Arc<AtomicUsize>| async move {
            pacer
                .run(Step::Sandbox, async {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                })
                .await;
        };
        let begun = tokio::time::Instant::now();
        let calls: Vec<_> = (0..6)
            .map(|_| tokio::spawn(call(pacer.clone(), running.clone(), most.clone())))
            .collect();
        for c in calls {
            c.await.expect("call");
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert_eq!(
            begun.elapsed(),
            Duration::from_millis(300),
            "three turns of two"
        );

        // A call that never ends holds its turn for HOLD only.
        let stuck = Arc::new(Pacer::new(1));
        let forever = tokio::spawn({
            let stuck = stuck.clone();
            async move { stuck.run(Step::Start, std::future::pending::<()>()).await }
        });
        tokio::task::yield_now().await;
        let begun = tokio::time::Instant::now();
        stuck.run(Step::Sandbox, async {}).await;
        assert_eq!(begun.elapsed(), HOLD);
        forever.abort();

        // Unpaced: nothing waits.
        let free = Pacer::new(0);
        let begun = tokio::time::Instant::now();
        free.run(Step::Sandbox, tokio::time::sleep(Duration::from_millis(5)))
            .await;
        assert_eq!(begun.elapsed(), Duration::from_millis(5));
    }

    /// Runs a 100 ms call of `step` named `name` through `pacer`, noting its name when
    /// it ends.
    fn paced(
        pacer: &Arc<Pacer>,
        step: Step,
        name: &'static str,
        ended: &Arc<std::sync::Mutex<Vec<&'static str>>>,
    ) -> tokio::task::JoinHandle<()> {
        let (pacer, ended) = (pacer.clone(), ended.clone());
        tokio::spawn(async move {
            pacer
                .run(step, async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                })
                .await;
            ended.lock().expect("ended").push(name);
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_turn_goes_to_the_latest_step_then_the_longest_waiting() {
        let pacer = Arc::new(Pacer::new(1));
        let ended = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut calls = vec![paced(&pacer, Step::Sandbox, "first sandbox", &ended)];
        tokio::task::yield_now().await;
        for (step, name) in [
            (Step::Sandbox, "second sandbox"),
            (Step::Create, "first create"),
            (Step::Start, "start"),
            (Step::Create, "second create"),
        ] {
            calls.push(paced(&pacer, step, name, &ended));
            tokio::task::yield_now().await;
        }
        for c in calls {
            c.await.expect("call");
        }
        assert_eq!(
            *ended.lock().expect("ended"),
            [
                "first sandbox",
                "start",
                "first create",
                "second create",
                "second sandbox"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_went_away_hands_its_turn_on() {
        let pacer = Arc::new(Pacer::new(1));
        let ended = Arc::new(std::sync::Mutex::new(Vec::new()));
        let holder = paced(&pacer, Step::Sandbox, "holder", &ended);
        tokio::task::yield_now().await;
        let gone = paced(&pacer, Step::Start, "gone", &ended);
        tokio::task::yield_now().await;
        let next = paced(&pacer, Step::Sandbox, "next", &ended);
        tokio::task::yield_now().await;
        gone.abort();
        let begun = tokio::time::Instant::now();
        holder.await.expect("holder");
        tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .expect("the turn reached the next waiter")
            .expect("next");
        assert_eq!(begun.elapsed(), Duration::from_millis(200), "no turn lost");
        assert_eq!(*ended.lock().expect("ended"), ["holder", "next"]);
    }
}
