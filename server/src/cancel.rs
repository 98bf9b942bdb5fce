//! A cancellation token's future that is cheap to poll again and again.
//!
//! A connection's loop selects over its kill token (CLIENT KILL, client eviction,
//! shutdown) on every pass, so the token's future is polled once a request when
//! requests come one at a time. `CancellationToken`'s own future takes two mutexes
//! on each poll (the token node's and its `Notify`'s waiter list): ~560
//! instructions of a `-P 1` GET's ~6,000 (callgrind). [`Cancelled`] polls it only
//! on its first poll and after it has signalled: it hands that future a waker of
//! its own, which raises a flag and wakes the task that polled last, so a poll in
//! between, by the task that polled last, is a load of the flag: re-registering
//! the same waker (`AtomicWaker::register`, two locked instructions and ~40
//! others) on every pass of the loop was most of its cost.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Completes once `token` is cancelled; see the module docs.
pub struct Cancelled {
    inner: Pin<Box<WaitForCancellationFutureOwned>>,
    signal: Arc<Signal>,
    /// The inner future has been polled (so holds `signal`'s waker) and was pending.
    armed: bool,
    /// The waker last registered in `signal.task`.
    registered: Option<Waker>,
}

/// The waker handed to the token's future.
struct Signal {
    fired: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Cancelled {
    pub fn new(token: CancellationToken) -> Cancelled {
        Cancelled {
            inner: Box::pin(token.cancelled_owned()),
            signal: Arc::new(Signal {
                fired: AtomicBool::new(false),
                task: AtomicWaker::new(),
            }),
            armed: false,
            registered: None,
        }
    }
}

impl Future for Cancelled {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        // The flag down means no signal has taken the waker registered last (a
        // signal raises the flag before it wakes), so if that is this task's
        // waker, a signal to come will wake it: nothing to do. That holds because
        // the token's future signals once, on the cancel, and is ready when polled
        // after it: a source that could signal twice could have its first wake take
        // a waker registered after its flag was read, and the next go unheard.
        if this.armed
            && !this.signal.fired.load(Ordering::Acquire)
            && this
                .registered
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        // Registered before the flag is read: a signal after the read wakes this task.
        this.signal.task.register(cx.waker());
        this.registered = Some(cx.waker().clone());
        if this.armed && !this.signal.fired.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let waker = Waker::from(this.signal.clone());
        match this.inner.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(()) => Poll::Ready(()),
            Poll::Pending => {
                this.armed = true;
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn completes_on_cancel_not_before() {
        let token = CancellationToken::new();
        let mut c = Box::pin(Cancelled::new(token.clone()));
        // Polled many times while the token stands: pending every time.
        for _ in 0..100 {
            tokio::select! {
                biased;
                _ = &mut c => panic!("completed before cancel"),
                _ = tokio::task::yield_now() => {}
            }
        }
        let t = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            t.cancel();
        });
        tokio::time::timeout(Duration::from_secs(5), c)
            .await
            .expect("woken by the cancel");
    }

    #[tokio::test]
    async fn a_parent_cancels_it_too() {
        let parent = CancellationToken::new();
        let mut c = Box::pin(Cancelled::new(parent.child_token()));
        tokio::select! {
            biased;
            _ = &mut c => panic!("completed before cancel"),
            _ = tokio::task::yield_now() => {}
        }
        parent.cancel();
        tokio::time::timeout(Duration::from_secs(5), c)
            .await
            .expect("woken by the parent's cancel");
    }

    #[tokio::test]
    async fn already_cancelled_completes_at_once() {
        let token = CancellationToken::new();
        token.cancel();
        tokio::time::timeout(Duration::from_millis(100), Cancelled::new(token))
            .await
            .expect("ready on its first poll");
    }
}
