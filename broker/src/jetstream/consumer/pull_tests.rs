use super::*;

const SECOND_NS: u64 = 1_000_000_000;

fn request(reply: &'static str, batch: u64) -> PullRequest {
    PullRequest {
        reply: Bytes::from_static(reply.as_bytes()),
        batch,
        max_bytes: 0,
        expires_at_ns: None,
        no_wait: false,
        heartbeat_ns: 0,
    }
}

fn target(queue: &mut PullQueue, size_bytes: u64, now_ns: u64) -> Option<Target> {
    let mut replies = Vec::new();
    let target = queue.take(size_bytes, now_ns, &mut replies);
    assert!(replies.is_empty(), "unexpected statuses {replies:?}");
    target
}

fn reply_of(target: Option<Target>) -> &'static str {
    let target = target.expect("a request takes it");
    match &target.reply[..] {
        b"a" => "a",
        b"b" => "b",
        other => panic!("unexpected reply {other:?}"),
    }
}

#[test]
fn requests_take_turns_until_their_batch_is_done() {
    let mut queue = PullQueue::new(512);
    queue.add(request("a", 2), 0, 0, &mut Vec::new()).unwrap();
    queue.add(request("b", 1), 0, 0, &mut Vec::new()).unwrap();
    assert_eq!(queue.batch_pending(), 3);
    assert_eq!(reply_of(target(&mut queue, 10, 0)), "a");
    assert_eq!(reply_of(target(&mut queue, 10, 0)), "b");
    assert_eq!(reply_of(target(&mut queue, 10, 0)), "a");
    assert_eq!(target(&mut queue, 10, 0), None);
    assert!(queue.is_empty());
}

#[test]
fn no_wait_is_answered_at_once_or_at_the_end_of_the_stream() {
    let mut queue = PullQueue::new(512);
    let mut no_wait = request("a", 5);
    no_wait.no_wait = true;
    assert_eq!(
        queue.add(no_wait.clone(), 0, 0, &mut Vec::new()),
        Err(Some(Status::NoMessages))
    );
    queue.add(no_wait, 2, 0, &mut Vec::new()).unwrap();
    target(&mut queue, 1, 0).unwrap();
    target(&mut queue, 1, 0).unwrap();
    let mut replies = Vec::new();
    assert_eq!(queue.process(0, true, &mut replies), None);
    assert_eq!(
        replies,
        vec![Reply {
            reply: Bytes::from_static(b"a"),
            status: Status::NoMessages
        }]
    );
    // With expires and nothing delivered it waits for a message instead.
    let mut waiting = request("b", 1);
    waiting.no_wait = true;
    waiting.expires_at_ns = Some(5 * SECOND_NS);
    queue.add(waiting, 0, 0, &mut Vec::new()).unwrap();
    let mut replies = Vec::new();
    assert_eq!(queue.process(0, true, &mut replies), Some(5 * SECOND_NS));
    assert!(replies.is_empty());
    queue.process(5 * SECOND_NS, true, &mut replies);
    assert_eq!(
        replies[0].status,
        Status::RequestTimeout {
            pending_messages: 1,
            pending_bytes: 0
        }
    );
}

#[test]
fn no_wait_behind_requests_covering_everything_is_refused() {
    let mut queue = PullQueue::new(512);
    queue.add(request("a", 10), 3, 0, &mut Vec::new()).unwrap();
    let mut no_wait = request("b", 1);
    no_wait.no_wait = true;
    assert_eq!(
        queue.add(no_wait, 3, 0, &mut Vec::new()),
        Err(Some(Status::RequestsPending))
    );
}

#[test]
fn max_bytes_ends_a_request_and_reports_what_is_left() {
    let mut queue = PullQueue::new(512);
    let mut limited = request("a", 10);
    limited.max_bytes = 100;
    queue.add(limited.clone(), 0, 0, &mut Vec::new()).unwrap();
    assert_eq!(target(&mut queue, 60, 0).unwrap().then, None);
    let mut replies = Vec::new();
    assert_eq!(queue.take(60, 0, &mut replies), None);
    assert_eq!(
        replies[0].status,
        Status::MessageSizeExceedsMaxBytes {
            pending_messages: 9,
            pending_bytes: 40
        }
    );
    // A batch that completes with bytes to spare says so after the message.
    let mut small = limited;
    small.batch = 1;
    queue.add(small, 0, 0, &mut Vec::new()).unwrap();
    assert_eq!(
        target(&mut queue, 10, 0).unwrap().then,
        Some(Status::BatchCompleted { pending_bytes: 90 })
    );
    // Exactly the remaining bytes: delivered, and the request ends.
    let mut exact = request("b", 5);
    exact.max_bytes = 10;
    queue.add(exact, 0, 0, &mut Vec::new()).unwrap();
    assert_eq!(target(&mut queue, 10, 0).unwrap().then, None);
    assert!(queue.is_empty());
}

#[test]
fn max_waiting_refuses_unless_a_heartbeat_makes_it_silent() {
    let mut queue = PullQueue::new(1);
    let mut expiring = request("a", 1);
    expiring.expires_at_ns = Some(SECOND_NS);
    queue.add(expiring, 0, 0, &mut Vec::new()).unwrap();
    assert_eq!(
        queue.add(request("b", 1), 0, 0, &mut Vec::new()),
        Err(Some(Status::ExceededMaxWaiting))
    );
    let mut beating = request("b", 1);
    beating.heartbeat_ns = SECOND_NS;
    assert_eq!(queue.add(beating, 0, 0, &mut Vec::new()), Err(None));
    // Once the first expired there is room, and it is answered.
    let mut replies = Vec::new();
    queue
        .add(request("b", 1), 0, 2 * SECOND_NS, &mut replies)
        .unwrap();
    assert_eq!(
        replies[0].status,
        Status::RequestTimeout {
            pending_messages: 1,
            pending_bytes: 0
        }
    );
}

#[test]
fn idle_heartbeats_fire_while_nothing_is_delivered() {
    let mut queue = PullQueue::new(512);
    let mut beating = request("a", 2);
    beating.heartbeat_ns = SECOND_NS;
    beating.expires_at_ns = Some(10 * SECOND_NS);
    queue.add(beating, 0, 0, &mut Vec::new()).unwrap();
    let mut replies = Vec::new();
    assert_eq!(
        queue.process(SECOND_NS / 2, false, &mut replies),
        Some(SECOND_NS)
    );
    assert!(replies.is_empty());
    assert_eq!(
        queue.process(SECOND_NS, false, &mut replies),
        Some(2 * SECOND_NS)
    );
    assert_eq!(replies[0].status, Status::IdleHeartbeat);
    // A delivery pushes the next beat back.
    target(&mut queue, 1, (3 * SECOND_NS) / 2).unwrap();
    let mut replies = Vec::new();
    queue.process(2 * SECOND_NS, false, &mut replies);
    assert!(replies.is_empty());
}

#[test]
fn closing_answers_every_request() {
    let mut queue = PullQueue::new(512);
    queue.add(request("a", 1), 0, 0, &mut Vec::new()).unwrap();
    queue.add(request("b", 1), 0, 0, &mut Vec::new()).unwrap();
    let replies = queue.close();
    assert_eq!(replies.len(), 2);
    assert!(replies
        .iter()
        .all(|reply| reply.status == Status::ConsumerDeleted));
    assert!(queue.is_empty());
}

#[test]
fn requests_whose_inbox_lost_interest_are_dropped_silently() {
    let mut queue = PullQueue::new(512);
    queue.add(request("a", 2), 0, 0, &mut Vec::new()).unwrap();
    queue.add(request("b", 2), 0, 0, &mut Vec::new()).unwrap();
    assert_eq!(queue.drop_uninterested(|_| true), 0);
    assert_eq!(queue.drop_uninterested(|reply| reply != b"a"), 1);
    assert_eq!(queue.len(), 1);
    assert_eq!(reply_of(target(&mut queue, 10, 0)), "b");
}
