"""nats-py over TLS against a running server whose INFO says tls_required:
an ssl.SSLContext trusting the test CA, one message published and received.
Usage: tls.py nats://127.0.0.1:PORT CA_PEM_FILE

Exits 0 when every check passes; prints what failed otherwise.
"""
import asyncio
import ssl
import sys
import traceback
import uuid

import nats
from nats.errors import TimeoutError as NatsTimeoutError

TIMEOUT_SECONDS = 5


async def main(url: str, ca_file: str) -> None:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    connection = await nats.connect(url, tls=context, name="tls", allow_reconnect=False)
    assert connection.connected_server_version is not None
    info = connection._server_info
    assert info.get("tls_required") is True, info
    # The socket under the protocol is TLS, not plaintext.
    transport = connection._transport
    assert transport._io_writer.get_extra_info("ssl_object") is not None, "not a TLS socket"

    subject = f"py.tls.{uuid.uuid4().hex[:8]}"
    sub = await connection.subscribe(subject)
    # nats-py queues SUB for its flusher but writes PING directly: two
    # flushes put the SUB on the wire before the second PING.
    await connection.flush()
    await connection.flush()
    await connection.publish(subject, b"over tls")
    msg = await sub.next_msg(timeout=TIMEOUT_SECONDS)
    assert msg.data == b"over tls", msg.data
    assert msg.subject == subject, msg.subject
    await connection.drain()
    print("nats-py tls: ok")


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2]), timeout=30))
    except (AssertionError, NatsTimeoutError, asyncio.TimeoutError) as error:
        print(f"nats-py tls: FAILED: {error!r}")
        traceback.print_exc()
        sys.exit(1)
