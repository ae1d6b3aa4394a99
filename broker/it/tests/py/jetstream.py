"""nats-py JetStream test against a running server (started with JetStream):
stream management (add/update/info/list/names/delete), publish and PubAck,
Nats-Msg-Id de-duplication, expected-last-sequence / expected-stream
errors, get/delete message and purge.
Usage: jetstream.py nats://127.0.0.1:PORT [REPLICAS]
(REPLICAS: what a stream created without `num_replicas` gets; 1 on one
server, 3 on a cluster whose client proxy asks for them.)

Every name carries a random suffix, so runs never collide. Exits 0 when
every check passes; prints the failed step and a traceback otherwise.
"""
import asyncio
import json
import sys
import traceback
import uuid

import nats
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import (
    APIError,
    BadRequestError,
    NoStreamResponseError,
    NotFoundError,
    ServerError,
)

TIMEOUT_SECONDS = 5
STEP = {"name": "connect"}
REPLICAS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
# "nats" when the server is the reference nats-server: a loaded nats-server
# cluster drops API requests during a meta leader change, so an unanswered
# idempotent request is asked once more there; tern's are never retried.
REFERENCE = len(sys.argv) > 3 and sys.argv[3] == "nats"


async def asked_again_on_reference(make):
    """Awaits make(); on the reference server, once more if unanswered."""
    try:
        return await make()
    except NoStreamResponseError:
        if not REFERENCE:
            raise
        return await make()


def step(name: str) -> None:
    """Records the step being run (printed when something fails)."""
    STEP["name"] = name
    print(f"step: {name}", flush=True)


async def expect_api_error(awaitable, error_class, err_code: int, contains: str = ""):
    """Awaits `awaitable`, which must raise `error_class` with `err_code`."""
    try:
        result = await awaitable
    except APIError as error:
        assert isinstance(error, error_class), f"expected {error_class.__name__}, got {error!r} ({error})"
        assert error.err_code == err_code, f"expected err_code {err_code}, got {error}"
        assert contains in (error.description or ""), f"expected {contains!r} in {error}"
        return error
    raise AssertionError(f"expected {error_class.__name__} {err_code}, got success: {result!r}")


def assert_no_duplicate(ack, stream: str, seq: int) -> None:
    assert ack.stream == stream, ack
    assert ack.seq == seq, ack
    assert not ack.duplicate, ack


async def stream_names(nc) -> list:
    """`$JS.API.STREAM.NAMES` (nats-py 2.16 has no helper for the full list)."""
    reply = await nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=TIMEOUT_SECONDS)
    body = json.loads(reply.data)
    assert body.get("type") == "io.nats.jetstream.api.v1.stream_names_response", body
    assert "error" not in body, body
    return body["streams"] or []


async def main(url: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    name = f"PYJS_{suffix}"
    other = f"PYJS_OTHER_{suffix}"
    prefix = f"pyjs.{suffix}"
    other_prefix = f"pyjs2.{suffix}"

    nc = await nats.connect(url, name="py-jetstream")
    js = nc.jetstream(timeout=TIMEOUT_SECONDS)

    step("add_stream")
    info = await js.add_stream(name=name, subjects=[f"{prefix}.>"], storage=StorageType.FILE)
    assert info.config.name == name, info.config
    assert info.config.subjects == [f"{prefix}.>"], info.config
    assert info.config.storage == StorageType.FILE, info.config
    assert info.config.retention == "limits", info.config
    assert info.config.max_msgs == -1, info.config
    assert info.config.max_bytes == -1, info.config
    assert info.config.num_replicas == REPLICAS, info.config
    assert info.config.duplicate_window == 120, info.config  # seconds (2 min default)
    assert info.state.messages == 0, info.state
    assert info.state.last_seq == 0, info.state

    step("add_stream again, same config: idempotent")
    again = await js.add_stream(name=name, subjects=[f"{prefix}.>"], storage=StorageType.FILE)
    assert again.config.name == name, again.config
    assert again.state.messages == 0, again.state

    step("add_stream again, different config: 10058")
    await expect_api_error(
        js.add_stream(name=name, subjects=[f"{prefix}.other.>"], storage=StorageType.FILE),
        BadRequestError,
        10058,
        "stream name already in use",
    )

    step("add_stream with overlapping subjects: 10065")
    await expect_api_error(
        js.add_stream(name=f"PYJS_OVERLAP_{suffix}", subjects=[f"{prefix}.a"]),
        BadRequestError,
        10065,
        "subjects overlap",
    )

    step("stream_info of an empty stream")
    info = await js.stream_info(name)
    assert info.config.name == name, info
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (0, 0, 0), info.state

    step("publish: PubAck stream/seq")
    for seq, subject in enumerate(["a", "b", "a"], start=1):
        ack = await js.publish(f"{prefix}.{subject}", f"message {seq}".encode())
        assert_no_duplicate(ack, name, seq)

    step("publish with headers and Nats-Msg-Id")
    ack = await js.publish(
        f"{prefix}.b", b"with id", headers={"Nats-Msg-Id": "id-1", "X-Trace": "t1"}
    )
    assert_no_duplicate(ack, name, 4)

    step("publish a duplicate Nats-Msg-Id: not stored")
    ack = await js.publish(f"{prefix}.b", b"with id again", headers={"Nats-Msg-Id": "id-1"})
    assert ack.stream == name and ack.seq == 4 and ack.duplicate is True, ack
    info = await js.stream_info(name)
    assert (info.state.messages, info.state.last_seq) == (4, 4), info.state

    step("publish with a new Nats-Msg-Id")
    ack = await js.publish(f"{prefix}.c", b"another id", headers={"Nats-Msg-Id": "id-2"})
    assert_no_duplicate(ack, name, 5)

    step("Nats-Expected-Last-Sequence matching")
    ack = await js.publish(f"{prefix}.a", b"expected 5", headers={"Nats-Expected-Last-Sequence": "5"})
    assert_no_duplicate(ack, name, 6)

    step("Nats-Expected-Last-Sequence wrong: 10071")
    error = await expect_api_error(
        js.publish(f"{prefix}.a", b"expected 5 again", headers={"Nats-Expected-Last-Sequence": "5"}),
        BadRequestError,
        10071,
        "wrong last sequence: 6",
    )
    assert error.code == 400, error
    info = await js.stream_info(name)
    assert info.state.last_seq == 6, info.state

    step("expected stream wrong: 10060")
    await expect_api_error(
        js.publish(f"{prefix}.a", b"wrong stream", stream=f"NOPE_{suffix}"),
        BadRequestError,
        10060,
        "expected stream does not match",
    )

    step("expected stream right")
    ack = await js.publish(f"{prefix}.a", b"right stream", stream=name)
    assert_no_duplicate(ack, name, 7)

    step("publish to a subject no stream captures")
    try:
        await js.publish(f"pyjs.nostream.{suffix}", b"nowhere")
        raise AssertionError("publish without a stream was acked")
    except NoStreamResponseError:
        pass

    step("get_msg by sequence")
    msg = await js.get_msg(name, 1)
    assert (msg.subject, msg.seq, msg.data) == (f"{prefix}.a", 1, b"message 1"), msg
    assert not msg.headers, msg.headers
    msg = await js.get_msg(name, 4)
    assert (msg.subject, msg.seq, msg.data) == (f"{prefix}.b", 4, b"with id"), msg
    assert msg.headers == {"Nats-Msg-Id": "id-1", "X-Trace": "t1"}, msg.headers

    step("get_msg last by subject")
    msg = await js.get_msg(name, subject=f"{prefix}.b")
    assert (msg.seq, msg.data) == (4, b"with id"), msg
    msg = await js.get_msg(name, subject=f"{prefix}.a")
    assert (msg.seq, msg.data) == (7, b"right stream"), msg

    step("get_msg next by subject")
    msg = await js.get_msg(name, seq=2, subject=f"{prefix}.a", next=True)
    assert (msg.seq, msg.data) == (3, b"message 3"), msg

    step("get_msg missing: 10037")
    await expect_api_error(js.get_msg(name, 99), NotFoundError, 10037, "no message found")

    step("update_stream from stream_info config")
    config = (await js.stream_info(name)).config
    config.subjects = [f"{prefix}.>", f"{prefix}x.*"]
    config.description = "updated by nats-py"
    config.max_msgs = 1000
    info = await asked_again_on_reference(lambda: js.update_stream(config))
    assert info.config.subjects == [f"{prefix}.>", f"{prefix}x.*"], info.config
    assert info.config.description == "updated by nats-py", info.config
    assert info.config.max_msgs == 1000, info.config
    assert info.state.messages == 7, info.state
    ack = await js.publish(f"{prefix}x.new", b"new subject")
    assert_no_duplicate(ack, name, 8)
    info = await js.stream_info(name)
    assert info.config.description == "updated by nats-py", info.config
    assert (info.state.messages, info.state.last_seq) == (8, 8), info.state

    step("update_stream keyword form")
    info = await js.update_stream(
        name=name, subjects=[f"{prefix}.>", f"{prefix}x.*"], storage=StorageType.FILE, max_msgs=2000
    )
    assert info.config.max_msgs == 2000, info.config

    step("update_stream cannot change storage: 10052")
    await expect_api_error(
        js.update_stream(name=name, subjects=[f"{prefix}.>"], storage=StorageType.MEMORY),
        ServerError,
        10052,
        "storage type",
    )

    step("update_stream of a missing stream: 10059")
    await expect_api_error(
        js.update_stream(name=f"NOPE_{suffix}", subjects=[f"pyjs.nope.{suffix}"]),
        NotFoundError,
        10059,
        "stream not found",
    )

    step("delete_msg")
    assert await js.delete_msg(name, 2) is True
    info = await js.stream_info(name)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (7, 1, 8), info.state
    assert info.state.num_deleted == 1, info.state
    await expect_api_error(js.get_msg(name, 2), NotFoundError, 10037, "no message found")

    # nats-server 2.15.1 answers a missing sequence in three ways: an interior
    # gap is 400/10043, below first_seq 500/10057 "no message found", beyond
    # last_seq 500/10057 (text "stream store EOF").
    step("delete_msg of an interior deleted sequence: 10043")
    await expect_api_error(js.delete_msg(name, 2), BadRequestError, 10043, "sequence 2 not found")

    step("delete_msg beyond last_seq: 10057")
    await expect_api_error(js.delete_msg(name, 99), ServerError, 10057)

    step("delete_msg first: first_seq moves")
    assert await js.delete_msg(name, 1) is True
    info = await js.stream_info(name)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (6, 3, 8), info.state

    step("delete_msg below first_seq: 10057")
    await expect_api_error(js.delete_msg(name, 1), ServerError, 10057, "no message found")

    step("purge_stream by subject")
    assert await js.purge_stream(name, subject=f"{prefix}.a") is True
    info = await js.stream_info(name)
    # left: 4 (b), 5 (c), 8 (x.new); 3, 6, 7 were on .a
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 4, 8), info.state
    await expect_api_error(js.get_msg(name, subject=f"{prefix}.a"), NotFoundError, 10037)

    step("purge_stream everything")
    assert await js.purge_stream(name) is True
    info = await js.stream_info(name)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (0, 9, 8), info.state

    step("publish after purge continues the sequence")
    ack = await js.publish(f"{prefix}.a", b"after purge")
    assert_no_duplicate(ack, name, 9)
    info = await js.stream_info(name)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (1, 9, 9), info.state

    step("second stream, streams_info and stream names")
    info = await js.add_stream(name=other, subjects=[f"{other_prefix}.*"])
    assert info.config.name == other, info.config
    ack = await js.publish(f"{other_prefix}.x", b"other")
    assert_no_duplicate(ack, other, 1)
    infos = {info.config.name: info for info in await js.streams_info()}
    assert name in infos and other in infos, list(infos)
    assert infos[name].state.messages == 1, infos[name].state
    assert infos[other].state.messages == 1, infos[other].state
    assert infos[other].config.subjects == [f"{other_prefix}.*"], infos[other].config
    names = await stream_names(nc)
    assert name in names and other in names, names
    assert names == sorted(names), names
    assert await js.find_stream_name_by_subject(f"{other_prefix}.x") == other
    assert await js.find_stream_name_by_subject(f"{prefix}.q.r") == name

    step("delete_stream")
    assert await js.delete_stream(other) is True
    await expect_api_error(js.stream_info(other), NotFoundError, 10059, "stream not found")
    await expect_api_error(js.delete_stream(other), NotFoundError, 10059, "stream not found")
    names = await stream_names(nc)
    assert other not in names and name in names, names
    try:
        await js.publish(f"{other_prefix}.x", b"deleted stream")
        raise AssertionError("publish into a deleted stream was acked")
    except NoStreamResponseError:
        pass

    step("delete the first stream")
    assert await js.delete_stream(name) is True
    names = await stream_names(nc)
    assert name not in names, names

    step("drain")
    await nc.drain()
    print("nats-py jetstream: ok")


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(sys.argv[1]), timeout=60))
    except BaseException as error:  # noqa: BLE001 - any failure fails the run
        print(f"nats-py jetstream: FAILED at step {STEP['name']!r}: {error!r}")
        traceback.print_exc()
        sys.exit(1)
