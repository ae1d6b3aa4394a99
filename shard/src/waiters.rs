//! Tasks on one shard waiting for a condition another task on the same shard
//! makes true: the waiter re-checks its condition each time it is woken.
//! Shard-local (`!Send`): no atomics, no locks.

use std::cell::RefCell;
use std::task::{Poll, Waker};

#[derive(Default)]
pub struct Waiters {
    wakers: RefCell<Vec<Waker>>,
}

impl Waiters {
    pub fn new() -> Waiters {
        Waiters::default()
    }

    /// Completes once `ready()` is true, checking it now and after every wake.
    pub async fn wait_until(&self, mut ready: impl FnMut() -> bool) {
        std::future::poll_fn(|context| {
            if ready() {
                Poll::Ready(())
            } else {
                // A waiter polled again before a wake (it also waits on
                // something else) must not pile up clones of its waker:
                // executors count waker references in a small field.
                let mut wakers = self.wakers.borrow_mut();
                if !wakers.iter().any(|waker| waker.will_wake(context.waker())) {
                    wakers.push(context.waker().clone());
                }
                Poll::Pending
            }
        })
        .await
    }

    /// Wakes every waiter (each re-checks its condition).
    pub fn wake_all(&self) {
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for waker in wakers {
            waker.wake();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.wakers.borrow().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::future::Future;
    use std::rc::Rc;

    #[test]
    fn a_waiter_polled_repeatedly_registers_once() {
        let waiters = Waiters::new();
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        for _ in 0..100 {
            let future = waiters.wait_until(|| false);
            let mut future = std::pin::pin!(future);
            assert!(future.as_mut().poll(&mut context).is_pending());
        }
        assert_eq!(waiters.wakers.borrow().len(), 1);
    }

    #[test]
    fn wakes_when_the_condition_holds() {
        let executor = glommio::LocalExecutorBuilder::default()
            .io_memory(128 * 1024)
            .make()
            .unwrap();
        executor.run(async {
            let waiters = Rc::new(Waiters::new());
            let flag = Rc::new(Cell::new(false));
            let task = {
                let (waiters, flag) = (waiters.clone(), flag.clone());
                glommio::spawn_local(async move { waiters.wait_until(|| flag.get()).await })
            };
            glommio::yield_if_needed().await;
            futures_lite::future::yield_now().await;
            assert!(!waiters.is_empty());
            waiters.wake_all();
            futures_lite::future::yield_now().await;
            assert!(
                !waiters.is_empty(),
                "woken but the condition is still false"
            );
            flag.set(true);
            waiters.wake_all();
            task.await;
        });
    }
}
