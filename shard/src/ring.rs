//! One bounded ring from one shard to another.
//!
//! A lock-free queue (crossbeam `ArrayQueue`) and two waker slots
//! (`AtomicWaker`): the receiver parks only after finding the ring empty, the
//! sender only after finding it full, and each side wakes the other only when
//! that other side is parked. A wake crosses threads through glommio's
//! foreign-waker path, which writes the peer executor's eventfd only if that
//! executor sleeps.
//!
//! Why not glommio's `shared_channel`: its receiver notifies the sending
//! executor after every message it takes, whether or not the sender waits for
//! room. With one publish in flight the sending shard is asleep by then, so
//! each hop cost an eventfd write and a wake-up of an idle CPU for nothing
//! (measured on the 2-vCPU VM: about 45 µs of the cross-shard publish→PubAck
//! delta).
//!
//! Ordering: the waker slot is the one location both sides read-modify-write,
//! so "push, then wake" on one side and "register, then look again" on the
//! other cannot both miss (the `AtomicWaker` protocol).

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use crossbeam_queue::ArrayQueue;
use futures_util::task::AtomicWaker;

use crate::mesh::MeshError;

struct RingShared<T> {
    queue: ArrayQueue<T>,
    /// The receiver's task while it waits for a message.
    receiver_waker: AtomicWaker,
    /// The sender's task while it waits for room.
    sender_waker: AtomicWaker,
    sender_closed: AtomicBool,
    receiver_closed: AtomicBool,
    /// Messages pushed so far; written by the sender only.
    sent: Arc<AtomicU64>,
}

/// The sending end; owned by one shard.
pub struct RingSender<T> {
    shared: Arc<RingShared<T>>,
}

/// The receiving end; owned by one shard.
pub struct RingReceiver<T> {
    shared: Arc<RingShared<T>>,
}

/// A ring holding at most `capacity` messages.
pub fn ring<T: Send>(capacity: usize) -> (RingSender<T>, RingReceiver<T>) {
    assert!(capacity > 0, "a ring holds at least one message");
    let shared = Arc::new(RingShared {
        queue: ArrayQueue::new(capacity),
        receiver_waker: AtomicWaker::new(),
        sender_waker: AtomicWaker::new(),
        sender_closed: AtomicBool::new(false),
        receiver_closed: AtomicBool::new(false),
        sent: Arc::new(AtomicU64::new(0)),
    });
    (
        RingSender {
            shared: shared.clone(),
        },
        RingReceiver { shared },
    )
}

impl<T> RingSender<T> {
    /// Pushes without waiting; a full ring or a stopped receiver hands the
    /// message back.
    pub fn try_send(&self, message: T) -> Result<(), MeshError<T>> {
        let shared = &*self.shared;
        assert!(
            !shared.sender_closed.load(Ordering::Relaxed),
            "send on a closed ring"
        );
        if shared.receiver_closed.load(Ordering::Acquire) {
            return Err(MeshError::Closed(message));
        }
        match shared.queue.push(message) {
            Ok(()) => {
                shared.sent.fetch_add(1, Ordering::Release);
                shared.receiver_waker.wake();
                Ok(())
            }
            Err(message) => Err(MeshError::Full(message)),
        }
    }

    /// Pushes, waiting while the ring is full (backpressure).
    pub async fn send(&self, message: T) -> Result<(), MeshError<T>> {
        let mut message = Some(message);
        poll_fn(|context| {
            let pending = message.take().expect("polled after completion");
            match self.poll_send(context, pending) {
                Ok(()) => Poll::Ready(Ok(())),
                Err(MeshError::Full(pending)) => {
                    message = Some(pending);
                    Poll::Pending
                }
                Err(closed) => Poll::Ready(Err(closed)),
            }
        })
        .await
    }

    fn poll_send(&self, context: &mut Context<'_>, message: T) -> Result<(), MeshError<T>> {
        let message = match self.try_send(message) {
            Err(MeshError::Full(message)) => message,
            done => return done,
        };
        self.shared.sender_waker.register(context.waker());
        // Look again: the receiver may have made room before the register.
        self.try_send(message)
    }

    /// Closes the ring: the receiver gets `None` once it has drained it.
    pub fn close(&self) {
        if !self.shared.sender_closed.swap(true, Ordering::AcqRel) {
            self.shared.receiver_waker.wake();
        }
    }
}

impl<T> Drop for RingSender<T> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<T> RingReceiver<T> {
    /// The next message, or `None` once the sender closed and the ring is empty.
    pub async fn recv(&self) -> Option<T> {
        poll_fn(|context| self.poll_recv(context)).await
    }

    fn poll_recv(&self, context: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(message) = self.try_recv() {
            return Poll::Ready(Some(message));
        }
        self.shared.receiver_waker.register(context.waker());
        // Look again: the sender may have pushed (or closed) before the register.
        if let Some(message) = self.try_recv() {
            return Poll::Ready(Some(message));
        }
        if self.shared.sender_closed.load(Ordering::Acquire) {
            // A push sequenced before the close is visible now.
            return Poll::Ready(self.try_recv());
        }
        Poll::Pending
    }

    /// Messages pushed so far, written by the sender only (the receiver
    /// compares it with what it has handled).
    pub fn sent_counter(&self) -> Arc<AtomicU64> {
        self.shared.sent.clone()
    }

    /// Takes a message if one is there.
    pub fn try_recv(&self) -> Option<T> {
        let message = self.shared.queue.pop()?;
        // Wakes the sender only if it registered, i.e. it found the ring full.
        self.shared.sender_waker.wake();
        Some(message)
    }
}

impl<T> Drop for RingReceiver<T> {
    fn drop(&mut self) {
        self.shared.receiver_closed.store(true, Ordering::Release);
        self.shared.sender_waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn messages_arrive_in_order_and_a_full_ring_hands_back() {
        let (sender, receiver) = ring::<u32>(2);
        sender.try_send(1).unwrap();
        sender.try_send(2).unwrap();
        match sender.try_send(3) {
            Err(MeshError::Full(3)) => {}
            other => panic!("expected Full(3), got {other:?}"),
        }
        assert_eq!(receiver.sent_counter().load(Ordering::Acquire), 2);
        assert_eq!(receiver.try_recv(), Some(1));
        sender.try_send(3).unwrap();
        assert_eq!(receiver.try_recv(), Some(2));
        assert_eq!(receiver.try_recv(), Some(3));
        assert_eq!(receiver.try_recv(), None);
    }

    #[test]
    fn a_stopped_receiver_closes_the_ring_for_the_sender() {
        let (sender, receiver) = ring::<u32>(4);
        drop(receiver);
        match sender.try_send(7) {
            Err(MeshError::Closed(7)) => {}
            other => panic!("expected Closed(7), got {other:?}"),
        }
    }

    /// Counts how often it was woken.
    struct CountingWaker(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_waker() -> (Arc<CountingWaker>, std::task::Waker) {
        let counter = Arc::new(CountingWaker(std::sync::atomic::AtomicUsize::new(0)));
        (counter.clone(), std::task::Waker::from(counter))
    }

    fn wakes(counter: &CountingWaker) -> usize {
        counter.0.load(Ordering::SeqCst)
    }

    #[test]
    fn a_parked_side_is_woken_once_and_a_running_side_never() {
        let (sender, receiver) = ring::<u32>(1);
        let (receiver_counter, receiver_waker) = counting_waker();
        let mut receiver_context = Context::from_waker(&receiver_waker);
        let (sender_counter, sender_waker) = counting_waker();
        let mut sender_context = Context::from_waker(&sender_waker);

        // The receiver parks on an empty ring; the first push wakes it once.
        assert!(receiver.poll_recv(&mut receiver_context).is_pending());
        sender.try_send(1).unwrap();
        assert_eq!(wakes(&receiver_counter), 1);
        // Taking the message does not wake the sender: it never waited.
        assert_eq!(receiver.try_recv(), Some(1));
        assert_eq!(wakes(&sender_counter), 0);
        // A push while the receiver is not parked wakes nobody.
        sender.try_send(2).unwrap();
        assert_eq!(wakes(&receiver_counter), 1);

        // The sender parks on a full ring; the next pop wakes it once.
        match sender.poll_send(&mut sender_context, 3) {
            Err(MeshError::Full(3)) => {}
            other => panic!("expected Full(3), got {other:?}"),
        }
        assert_eq!(wakes(&sender_counter), 0);
        assert_eq!(receiver.try_recv(), Some(2));
        assert_eq!(wakes(&sender_counter), 1);
        sender.try_send(3).unwrap();
        assert_eq!(receiver.try_recv(), Some(3));
        assert_eq!(wakes(&sender_counter), 1);

        // Closing wakes a parked receiver, which then sees the end.
        assert!(receiver.poll_recv(&mut receiver_context).is_pending());
        sender.close();
        assert_eq!(wakes(&receiver_counter), 2);
        assert!(matches!(
            receiver.poll_recv(&mut receiver_context),
            Poll::Ready(None)
        ));
    }

    /// Two executors on two threads: every message arrives once, in order,
    /// through a ring small enough that both sides park many times (a lost
    /// wake-up would hang, caught by the timeout).
    #[test]
    fn two_executors_exchange_200_000_messages_through_a_small_ring() {
        const MESSAGES: u64 = 200_000;
        let (sender, receiver) = ring::<u64>(8);
        let (done_sender, done_receiver) = std::sync::mpsc::channel();
        let consumer = glommio::LocalExecutorBuilder::default()
            .io_memory(128 * 1024)
            .name("ring-consumer")
            .spawn(move || async move {
                let mut expected = 0;
                while let Some(message) = receiver.recv().await {
                    assert_eq!(message, expected);
                    expected += 1;
                    if expected % 4096 == 0 {
                        // Let the ring fill so the sender parks too.
                        glommio::yield_if_needed().await;
                    }
                }
                done_sender.send(expected).unwrap();
            })
            .unwrap();
        let producer = glommio::LocalExecutorBuilder::default()
            .io_memory(128 * 1024)
            .name("ring-producer")
            .spawn(move || async move {
                for message in 0..MESSAGES {
                    sender.send(message).await.unwrap();
                }
                sender.close();
            })
            .unwrap();
        let received = done_receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("the consumer finished within 60 s (a lost wake-up hangs)");
        assert_eq!(received, MESSAGES);
        producer.join().unwrap();
        consumer.join().unwrap();
    }
}
