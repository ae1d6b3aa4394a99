"""nats-py smoke test against a running server: pub/sub, request/reply,
queue group, headers, no-responders. Usage: smoke.py nats://127.0.0.1:PORT

Exits 0 when every check passes; prints what failed otherwise.
"""
import asyncio
import sys
import traceback
import uuid

import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeoutError

TIMEOUT_SECONDS = 5


async def settle(connection) -> None:
    """Makes the connection's subscriptions active on the server.

    nats-py 2.16 queues SUB for its flusher task but writes PING straight to
    the socket, so a single flush() can return before the server has read
    the SUB (against nats-server too). The flusher runs while the first
    flush() waits, so the second PING follows the SUB on the wire.
    """
    await connection.flush()
    await connection.flush()


async def main(url: str) -> None:
    prefix = f"py.{uuid.uuid4().hex[:8]}"
    publisher = await nats.connect(url, name="smoke-publisher")
    subscriber = await nats.connect(url, name="smoke-subscriber")

    # pub/sub across two connections (possibly two shards)
    sub = await subscriber.subscribe(f"{prefix}.greet")
    await settle(subscriber)
    await publisher.publish(f"{prefix}.greet", b"hello")
    msg = await sub.next_msg(timeout=TIMEOUT_SECONDS)
    assert msg.data == b"hello", msg.data
    assert msg.subject == f"{prefix}.greet", msg.subject

    # headers round trip
    await publisher.publish(f"{prefix}.greet", b"with headers", headers={"X-Trace": "abc"})
    msg = await sub.next_msg(timeout=TIMEOUT_SECONDS)
    assert msg.headers == {"X-Trace": "abc"}, msg.headers

    # request/reply
    async def responder(message):
        await message.respond(b"pong:" + message.data)

    await subscriber.subscribe(f"{prefix}.service", cb=responder)
    await settle(subscriber)
    reply = await publisher.request(f"{prefix}.service", b"ping", timeout=TIMEOUT_SECONDS)
    assert reply.data == b"pong:ping", reply.data

    # no responders
    try:
        await publisher.request(f"{prefix}.nobody", b"x", timeout=TIMEOUT_SECONDS)
        raise AssertionError("request without responders succeeded")
    except NoRespondersError:
        pass

    # queue group: every message to exactly one member
    received = {"a": 0, "b": 0}

    def counter(name):
        async def handler(message):
            received[name] += 1
        return handler

    member_a = await nats.connect(url, name="smoke-member-a")
    member_b = await nats.connect(url, name="smoke-member-b")
    await member_a.subscribe(f"{prefix}.work", queue="workers", cb=counter("a"))
    await member_b.subscribe(f"{prefix}.work", queue="workers", cb=counter("b"))
    await settle(member_a)
    await settle(member_b)
    total = 200
    for index in range(total):
        await publisher.publish(f"{prefix}.work", str(index).encode())
    await publisher.flush()
    deadline = asyncio.get_running_loop().time() + TIMEOUT_SECONDS
    while received["a"] + received["b"] < total:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"queue group got {received} of {total}")
        await asyncio.sleep(0.01)
    # Allow a moment for any duplicate delivery to show up, then check exactness.
    await member_a.flush()
    await member_b.flush()
    assert received["a"] + received["b"] == total, received
    assert received["a"] > 0 and received["b"] > 0, received

    for connection in (publisher, subscriber, member_a, member_b):
        await connection.drain()
    print("nats-py smoke: ok")


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(sys.argv[1]), timeout=60))
    except (AssertionError, NatsTimeoutError, asyncio.TimeoutError) as error:
        print(f"nats-py smoke: FAILED: {error!r}")
        traceback.print_exc()
        sys.exit(1)
