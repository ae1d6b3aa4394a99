"""nats-py across two nodes of a cluster: a subscriber on node 2 gets 100
messages published on node 1 (each once, in order), and a request from
node 1 is answered by a responder on node 2.
Usage: cluster.py nats://127.0.0.1:PORT1 nats://127.0.0.1:PORT2

Interest made on node 2 reaches node 1 some time later, so the script
waits for it without sleeping blindly: it publishes probes until one
arrives, and retries a request with a short timeout until one is answered.
Exits 0 when every check passes; prints what failed otherwise.
"""
import asyncio
import sys
import traceback
import uuid

import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeoutError

TIMEOUT_SECONDS = 5
PROBE = b"__probe__"
PROBE_END = b"__probe_end__"
MESSAGES = 100


async def settle(connection) -> None:
    """Makes the connection's subscriptions active on its server (see smoke.py)."""
    await connection.flush()
    await connection.flush()


async def wait_interest(publisher, subject: str, sub) -> None:
    """Publishes probes on `subject` until `sub` gets one, then an end
    marker, and consumes `sub` up to it (one publisher's messages arrive in
    order, so no probe is left behind)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_SECONDS
    while True:
        await publisher.publish(subject, PROBE)
        await publisher.flush()
        try:
            msg = await sub.next_msg(timeout=0.025)
        except NatsTimeoutError:
            if loop.time() > deadline:
                raise AssertionError(f"interest in {subject} never reached node 1")
            continue
        assert msg.data == PROBE, msg.data
        break
    await publisher.publish(subject, PROBE_END)
    await publisher.flush()
    while True:
        msg = await sub.next_msg(timeout=TIMEOUT_SECONDS)
        if msg.data == PROBE_END:
            return
        assert msg.data == PROBE, msg.data


async def wait_responder(requester, subject: str):
    """Retries a request (250 ms each) until it is answered."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_SECONDS
    while True:
        try:
            return await requester.request(subject, PROBE, timeout=0.25)
        except (NoRespondersError, NatsTimeoutError) as error:
            if loop.time() > deadline:
                raise AssertionError(f"no reply on {subject}: {error!r}")
            await asyncio.sleep(0.02)  # poll interval of a bounded wait


async def main(url1: str, url2: str) -> None:
    prefix = f"py.cluster.{uuid.uuid4().hex[:8]}"
    # Each connection stays on its node.
    on1 = await nats.connect(servers=[url1], name="cluster-node1", dont_randomize=True,
                             allow_reconnect=False)
    on2 = await nats.connect(servers=[url2], name="cluster-node2", dont_randomize=True,
                             allow_reconnect=False)

    # pub/sub: node 1 -> node 2
    subject = f"{prefix}.topic"
    sub = await on2.subscribe(subject)
    await settle(on2)
    await wait_interest(on1, subject, sub)
    for index in range(MESSAGES):
        await on1.publish(subject, str(index).encode())
    await on1.publish(subject, b"END")
    await on1.flush()
    got = []
    while True:
        msg = await sub.next_msg(timeout=TIMEOUT_SECONDS)
        if msg.data == b"END":
            break
        got.append(msg.data.decode())
    assert got == [str(index) for index in range(MESSAGES)], got

    # request/reply: requester on node 1, responder on node 2
    async def responder(message):
        await message.respond(b"re:" + message.data)

    service = f"{prefix}.service"
    await on2.subscribe(service, cb=responder)
    await settle(on2)
    reply = await wait_responder(on1, service)
    assert reply.data == b"re:" + PROBE, reply.data
    for index in range(10):
        reply = await on1.request(service, f"q{index}".encode(), timeout=TIMEOUT_SECONDS)
        assert reply.data == f"re:q{index}".encode(), reply.data

    for connection in (on1, on2):
        await connection.drain()
    print("nats-py cluster: ok")


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2]), timeout=60))
    except (AssertionError, NatsTimeoutError, asyncio.TimeoutError, NoRespondersError) as error:
        print(f"nats-py cluster: FAILED: {error!r}")
        traceback.print_exc()
        sys.exit(1)
