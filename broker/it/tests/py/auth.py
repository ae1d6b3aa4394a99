"""nats-py against a server with users: an NKey user from a seed file
(`nkeys_seed`), a password user whose publishes to `secret.>` are denied,
and a wrong password refused. Usage: auth.py URL SEED_FILE

The server's users (written by the Rust side, python_clients.rs):
  { nkey = <public key of SEED_FILE> }
  { user = "app", password = "app-pw", permissions = { publish = { deny = "secret.>" } } }

Exits 0 when every check passes; prints what failed otherwise.
"""
import asyncio
import sys
import traceback
import uuid

import nats

TIMEOUT_SECONDS = 5


async def main(url: str, seed_file: str) -> None:
    prefix = f"py.{uuid.uuid4().hex[:8]}"

    # An NKey user: nats-py signs the INFO nonce with the seed from the file.
    keyed = await nats.connect(url, nkeys_seed=seed_file, name="auth-nkey")
    sub = await keyed.subscribe(f"{prefix}.keyed")
    await keyed.flush()
    await keyed.flush()
    await keyed.publish(f"{prefix}.keyed", b"signed")
    msg = await sub.next_msg(timeout=TIMEOUT_SECONDS)
    assert msg.data == b"signed", msg.data

    # A password user with a denied subject: the violation is reported to
    # the error callback and the connection stays usable.
    errors = []

    async def on_error(error):
        errors.append(str(error))

    app = await nats.connect(
        url, user="app", password="app-pw", error_cb=on_error, name="auth-app"
    )
    # Everything reaches the watcher, in the publisher's order: the marker
    # arriving first proves the denied message was never delivered.
    watcher = await keyed.subscribe(">")
    await keyed.flush()
    await keyed.flush()
    await app.publish(f"secret.{prefix}", b"leak")
    await app.publish(f"{prefix}.marker", b"allowed")
    await app.flush()
    msg = await watcher.next_msg(timeout=TIMEOUT_SECONDS)
    assert msg.data == b"allowed", (msg.subject, msg.data)
    for _ in range(50):
        if errors:
            break
        await asyncio.sleep(0.02)  # bounded poll for the async error callback
    # nats-py lower-cases the server's text.
    expected = f'permissions violation for publish to "secret.{prefix}"'
    assert any(expected in error.lower() for error in errors), errors
    assert app.is_connected, "a permission violation is not fatal"

    # A wrong password is refused.
    refused = []

    async def on_refused(error):
        refused.append(str(error))

    try:
        wrong = await nats.connect(
            url,
            user="app",
            password="wrong",
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=TIMEOUT_SECONDS,
            error_cb=on_refused,
        )
        await wrong.close()
        raise AssertionError("a wrong password was accepted")
    except AssertionError:
        raise
    except Exception as error:  # nats-py raises its own error types here
        refused.append(repr(error))
    assert any("uthorization" in text for text in refused), refused

    await app.close()
    await keyed.close()


if __name__ == "__main__":
    async def bounded() -> None:
        await asyncio.wait_for(main(sys.argv[1], sys.argv[2]), timeout=60)

    try:
        asyncio.run(bounded())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    print("nats-py auth: ok")
