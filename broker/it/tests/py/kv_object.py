"""nats-py Key-Value and Object Store test against a running server (started
with JetStream): KV put/get/create/update (right and wrong revision),
history, delete and purge markers, keys, a watch with initial values then
live updates (including a delete), bucket status; an object store put/get of
a multi-chunk object (the client checks the digest), info, list, overwrite
and delete.
Usage: kv_object.py nats://127.0.0.1:PORT

nats-py differs from async-nats in ways a server sees: it creates buckets
without allow_direct (gets are $JS.API.STREAM.MSG.GET), and its watches are
ordered push consumers with flow control and heartbeats.

Every bucket name carries a random suffix, so runs never collide. Exits 0
when every check passes; prints the failed step and a traceback otherwise.
"""
import asyncio
import random
import sys
import traceback
import uuid

import nats
from nats.js.errors import (
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
    NotFoundError,
    ObjectDeletedError,
    ObjectNotFoundError,
)

TIMEOUT_SECONDS = 5
STEP = {"name": "connect"}


def step(name: str) -> None:
    """Records the step being run (printed when something fails)."""
    STEP["name"] = name
    print(f"step: {name}", flush=True)


async def expect_raises(awaitable, *error_classes):
    """Awaits `awaitable`, which must raise one of `error_classes`."""
    try:
        result = await awaitable
    except error_classes as error:
        return error
    raise AssertionError(f"expected {[c.__name__ for c in error_classes]}, got success: {result!r}")


async def history_of(kv, key: str):
    """kv.history(key), asked again (bounded) on NoKeysError: nats-py's
    history() reads through the same watcher as keys(), with the same race
    (see the "keys" step); seen against nats-server."""
    for attempt in range(3):
        try:
            return await kv.history(key)
        except NoKeysError:
            if attempt == 2:
                raise


def rows(entries):
    """(key, value, revision, operation) of each entry."""
    return [(e.key, e.value, e.revision, e.operation) for e in entries]


async def kv_checks(js, suffix: str) -> None:
    bucket = f"pykv_{suffix}"

    step("create_key_value")
    kv = await js.create_key_value(bucket=bucket, history=5)
    status = await kv.status()
    assert status.bucket == bucket, status
    assert status.history == 5, status
    assert status.values == 0, status

    step("put/get")
    assert await kv.put("a", b"1") == 1
    assert await kv.put("b", b"x") == 2
    assert await kv.put("a", b"2") == 3
    entry = await kv.get("a")
    assert (entry.key, entry.value, entry.revision) == ("a", b"2", 3), entry
    entry = await kv.get("a", revision=1)
    assert (entry.value, entry.revision) == (b"1", 1), entry
    await expect_raises(kv.get("missing"), KeyNotFoundError)
    # Revision 2 is key b's.
    await expect_raises(kv.get("a", revision=2), KeyNotFoundError)

    step("create/update")
    assert await kv.create("c", b"c1") == 4
    await expect_raises(kv.create("c", b"again"), KeyWrongLastSequenceError)
    assert await kv.update("c", b"c2", last=4) == 5
    await expect_raises(kv.update("c", b"c3", last=4), KeyWrongLastSequenceError)
    assert (await kv.get("c")).value == b"c2"

    step("delete/purge")
    await kv.delete("a")  # 6
    await expect_raises(kv.get("a"), KeyNotFoundError, KeyDeletedError)
    history = await history_of(kv, "a")
    assert rows(history) == [
        ("a", b"1", 1, None),
        ("a", b"2", 3, None),
        ("a", b"", 6, "DEL"),
    ], rows(history)
    await kv.purge("b")  # 7
    history = await history_of(kv, "b")
    assert rows(history) == [("b", b"", 7, "PURGE")], rows(history)
    await expect_raises(kv.get("b"), KeyNotFoundError, KeyDeletedError)
    # Create over a delete marker.
    assert await kv.create("a", b"back") == 8

    step("keys")
    # nats-py's keys() ends at its watcher's first None, which it may queue
    # before the values when its consumer-info reply beats its own delivery
    # task (the race the watch step below allows for): NoKeysError then.
    # Seen against a nats-server cluster (and, for history(), against one
    # nats-server); asked again, bounded.
    for attempt in range(3):
        try:
            keys = sorted(await kv.keys())
            break
        except NoKeysError:
            if attempt == 2:
                raise
    assert keys == ["a", "c"], keys

    step("status after writes")
    status = await kv.status()
    # a: 1, 3, 6, 8; b: 7 (purge kept only the marker); c: 4, 5.
    assert status.values == 7, status

    step("watch: initial values then updates")
    watcher = await kv.watch("cfg.>")
    # No values yet: the first update is the "initial values done" None.
    assert await watcher.updates(timeout=TIMEOUT_SECONDS) is None
    await kv.put("cfg.x", b"x1")  # 9
    await kv.put("other", b"o")  # 10
    await kv.put("cfg.y", b"y1")  # 11
    await kv.delete("cfg.x")  # 12
    seen = [await watcher.updates(timeout=TIMEOUT_SECONDS) for _ in range(3)]
    assert rows(seen) == [
        ("cfg.x", b"x1", 9, None),
        ("cfg.y", b"y1", 11, None),
        ("cfg.x", b"", 12, "DEL"),
    ], rows(seen)
    await watcher.stop()

    step("watch with existing values")
    watcher = await kv.watch("cfg.>")
    # Last value per key, in stream order, and one None marker. The server
    # sends the marker's cue (num_pending 0) after the values, but nats-py
    # races its consumer-info check against its own delivery task: when the
    # info reply lands before the callback has run, it queues the marker
    # first (seen against nats-server in CI). Accept either position.
    updates = [await watcher.updates(timeout=TIMEOUT_SECONDS) for _ in range(3)]
    initial = [update for update in updates if update is not None]
    assert len(initial) == 2 and updates[1] is not None, updates
    assert rows(initial) == [("cfg.y", b"y1", 11, None), ("cfg.x", b"", 12, "DEL")], rows(initial)
    await kv.put("cfg.y", b"y2")  # 13
    update = await watcher.updates(timeout=TIMEOUT_SECONDS)
    assert rows([update]) == [("cfg.y", b"y2", 13, None)], update
    await watcher.stop()

    step("delete_key_value")
    assert await js.delete_key_value(bucket) is True


async def object_checks(js, suffix: str) -> None:
    bucket = f"pyobj_{suffix}"

    step("create_object_store")
    obs = await js.create_object_store(bucket=bucket)
    await expect_raises(obs.list(), NotFoundError)

    step("put multi-chunk object")
    data = random.Random(42).randbytes(1024 * 1024 + 17)
    info = await obs.put("big/blob.bin", data)
    assert info.size == len(data), info
    # 128 KiB default chunks: 8 full ones and a 17-byte tail.
    assert info.chunks == 9, info
    assert info.digest.startswith("SHA-256="), info

    step("get multi-chunk object")
    result = await obs.get("big/blob.bin")
    assert result.info.nuid == info.nuid, result.info
    assert len(result.data) == len(data) and result.data == data, len(result.data)

    step("small object, info, list")
    await obs.put("small", b"tiny")
    small = await obs.get_info("small")
    assert (small.size, small.chunks) == (4, 1), small
    assert (await obs.get("small")).data == b"tiny"
    names = sorted(entry.name for entry in await obs.list())
    assert names == ["big/blob.bin", "small"], names

    step("overwrite")
    await obs.put("small", b"replaced")
    assert (await obs.get("small")).data == b"replaced"
    state = (await js.stream_info(f"OBJ_{bucket}")).state
    # 9 + 1 chunks, two metas: the old version's chunk was purged.
    assert state.messages == 12, state

    step("delete")
    await obs.delete("big/blob.bin")
    await expect_raises(obs.get("big/blob.bin"), ObjectDeletedError, ObjectNotFoundError, NotFoundError)
    await expect_raises(obs.get("never"), ObjectNotFoundError, NotFoundError)
    names = sorted(entry.name for entry in await obs.list(ignore_deletes=True))
    assert names == ["small"], names
    state = (await js.stream_info(f"OBJ_{bucket}")).state
    assert state.messages == 3, state

    step("delete_object_store")
    assert await js.delete_object_store(bucket) is True


async def main(url: str) -> None:
    nc = await nats.connect(url, connect_timeout=TIMEOUT_SECONDS, max_reconnect_attempts=0)
    js = nc.jetstream(timeout=TIMEOUT_SECONDS)
    suffix = uuid.uuid4().hex[:8]
    await kv_checks(js, suffix)
    await object_checks(js, suffix)
    step("drain")
    await nc.drain()
    print("nats-py kv_object: ok")


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(sys.argv[1]), timeout=60))
    except BaseException as error:  # noqa: BLE001 - any failure fails the run
        print(f"nats-py kv_object: FAILED at step {STEP['name']!r}: {error!r}")
        traceback.print_exc()
        sys.exit(1)
