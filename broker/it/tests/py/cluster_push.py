"""nats-py push consumers on a three-node cluster: a durable push
consumer of an R3 file stream with a deliver group (nats-py's queue
subscription: the queue name is the durable's), flow control and idle
heartbeats, made through `js.subscribe` from a node that does not lead
the stream, with a member on each of the two nodes that do not lead it.
Publishes (each with a `Nats-Msg-Id`, retried on timeouts, no responders
and 5xx) go on while the stream's and the consumer's leaders step down;
every acknowledged publish reaches the group and is acked, and the
consumer's ack floor reaches the last sequence.
Usage: cluster_push.py nats://127.0.0.1:PORT1 nats://127.0.0.1:PORT2 nats://127.0.0.1:PORT3
(nodes n1, n2, n3 in that order).

Every wait is bounded (polls of a condition with a deadline).
Exits 0 when every check passes; prints what failed otherwise.
"""
import asyncio
import json
import sys
import traceback

import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, StorageType
from nats.js.errors import APIError, NoStreamResponseError

STREAM = "PYPUSH"
QUEUE = "pyworkers"
MESSAGES = 300
STEPDOWN_AT = 150
# 300 x 8 KiB: past the first flow control window (2 MiB), which only an
# answered flow control request lets delivery go past.
PAYLOAD_BYTES = 8 << 10
BOUND_SECONDS = 30
POLL_SECONDS = 0.02
# Retried: a leader changing, or the meta group forming.
RETRIED_ERR_CODES = {10008, 10009}


def deadline_after(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


def past(deadline: float) -> bool:
    return asyncio.get_running_loop().time() > deadline


def retried(error: Exception) -> bool:
    """Whether a failed request is worth asking again through a failover."""
    if isinstance(error, (NatsTimeoutError, NoRespondersError, NoStreamResponseError)):
        return True
    if isinstance(error, APIError):
        return error.code in (500, 503) or error.err_code in RETRIED_ERR_CODES
    return False


async def with_retries(what: str, attempt):
    """`attempt()` until it does not fail with a retried error (bounded)."""
    deadline = deadline_after(BOUND_SECONDS)
    while True:
        try:
            return await attempt()
        except Exception as error:  # noqa: BLE001 - filtered by retried()
            if not retried(error) or past(deadline):
                raise AssertionError(f"{what}: {error!r}") from error
            await asyncio.sleep(POLL_SECONDS)  # poll interval of a bounded wait


async def api(connection, subject: str) -> dict:
    reply = await connection.request(subject, b"", timeout=2)
    return json.loads(reply.data)


async def leader_of(connection, info_subject: str) -> str:
    deadline = deadline_after(BOUND_SECONDS)
    while True:
        try:
            info = await api(connection, info_subject)
        except (NatsTimeoutError, NoRespondersError):
            info = {}
        leader = info.get("cluster", {}).get("leader")
        if leader:
            return leader
        if past(deadline):
            raise AssertionError(f"{info_subject}: no leader: {info}")
        await asyncio.sleep(POLL_SECONDS)


async def step_down(connection, stepdown_subject: str, info_subject: str) -> None:
    """Asks for a stepdown (again while refused: a follower not current
    yet) until `info_subject` names another leader."""
    before = await leader_of(connection, info_subject)
    deadline = deadline_after(BOUND_SECONDS)
    while True:
        try:
            answer = await api(connection, stepdown_subject)
        except (NatsTimeoutError, NoRespondersError):
            answer = {}
        if answer.get("success"):
            break
        if past(deadline):
            raise AssertionError(f"{stepdown_subject}: {answer}")
        await asyncio.sleep(POLL_SECONDS * 5)
    while await leader_of(connection, info_subject) == before:
        if past(deadline):
            raise AssertionError(f"{info_subject}: {before} still leads")
        await asyncio.sleep(POLL_SECONDS)


async def main(urls) -> None:
    problems = []

    async def on_error(error):
        # Heartbeats name the last delivery to the group, not to each
        # member, so members report sequence mismatches; anything else
        # (a slow consumer, ...) is a failure.
        if not isinstance(error, nats.js.errors.ConsumerSequenceMismatchError):
            problems.append(repr(error))

    async def connect(node: int):
        return await nats.connect(
            servers=[urls[node - 1]],
            name=f"cluster-push-n{node}",
            dont_randomize=True,
            allow_reconnect=False,
            error_cb=on_error,
        )

    bootstrap = await connect(1)
    bootstrap_js = bootstrap.jetstream()
    await with_retries(
        "add_stream",
        lambda: bootstrap_js.add_stream(
            name=STREAM, subjects=["pypush.>"], storage=StorageType.FILE, num_replicas=3
        ),
    )
    leader = await leader_of(bootstrap, f"$JS.API.STREAM.INFO.{STREAM}")
    members = [node for node in (1, 2, 3) if f"n{node}" != leader]
    assert len(members) == 2, (leader, members)

    # The consumer is made by the first member's subscribe (through a node
    # that does not lead), the second binds to it.
    connections = [await connect(node) for node in members]
    subscriptions = []
    for connection in connections:
        js = connection.jetstream()
        subscriptions.append(
            await with_retries(
                "subscribe",
                lambda js=js: js.subscribe(
                    "pypush.>",
                    queue=QUEUE,
                    stream=STREAM,
                    config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=3),
                    flow_control=True,
                    idle_heartbeat=1.0,
                    manual_ack=True,
                ),
            )
        )
    admin = connections[0]
    info = await connections[1].jetstream().consumer_info(STREAM, QUEUE)
    assert info.config.deliver_group == QUEUE, info
    assert info.config.flow_control, info

    received = {}  # stream sequence -> deliveries
    per_member = [0, 0]
    done = asyncio.Event()

    async def serve(member: int, subscription) -> None:
        while not done.is_set():
            try:
                message = await subscription.next_msg(timeout=0.25)
            except NatsTimeoutError:
                continue
            sequence = message.metadata.sequence.stream
            received[sequence] = received.get(sequence, 0) + 1
            per_member[member] += 1
            await message.ack()

    serving = [asyncio.create_task(serve(member, sub)) for member, sub in enumerate(subscriptions)]

    publisher = connections[1].jetstream()
    acked = set()
    payload = b"p" * PAYLOAD_BYTES
    for index in range(MESSAGES):
        if index == STEPDOWN_AT:
            await step_down(
                admin,
                f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}",
                f"$JS.API.STREAM.INFO.{STREAM}",
            )
            await step_down(
                admin,
                f"$JS.API.CONSUMER.LEADER.STEPDOWN.{STREAM}.{QUEUE}",
                f"$JS.API.CONSUMER.INFO.{STREAM}.{QUEUE}",
            )
        headers = {"Nats-Msg-Id": f"py-{index}"}
        ack = await with_retries(
            f"publish {index}",
            lambda: publisher.publish("pypush.work", payload, headers=headers, timeout=2),
        )
        acked.add(ack.seq)
    last = max(acked)

    deadline = deadline_after(BOUND_SECONDS)
    while not acked.issubset(received):
        if past(deadline):
            missing = sorted(acked - set(received))
            raise AssertionError(f"acknowledged, never delivered: {missing[:20]} ({len(missing)})")
        await asyncio.sleep(POLL_SECONDS)
    assert all(count > 0 for count in per_member), per_member

    info_js = admin.jetstream()
    while True:
        info = await with_retries("consumer_info", lambda: info_js.consumer_info(STREAM, QUEUE))
        if (
            info.ack_floor.stream_seq == last
            and info.delivered.stream_seq == last
            and info.num_ack_pending == 0
            and info.num_pending == 0
        ):
            break
        if past(deadline):
            raise AssertionError(f"the ack floor never reached {last}: {info}")
        await asyncio.sleep(POLL_SECONDS)
    assert not problems, problems

    done.set()
    await asyncio.gather(*serving)
    for connection in [bootstrap, *connections]:
        await connection.close()
    print(f"nats-py cluster_push: {len(acked)} acked, {per_member} delivered per member")
    print("nats-py cluster_push: ok")


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(sys.argv[1:4]), timeout=80))
    except (AssertionError, NatsTimeoutError, asyncio.TimeoutError, NoRespondersError, APIError) as error:
        print(f"nats-py cluster_push: FAILED: {error!r}")
        traceback.print_exc()
        sys.exit(1)
