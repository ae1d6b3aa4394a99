#!/usr/bin/env python3
"""Failover time of an R3 stream, tern and nats-server 2.15.1 side by side.

For each server in turn: start a 3-node cluster on loopback, create an R3
file stream, and publish one message at a time (each with a 250 ms
timeout, retried on any error) from a client connected to a node that
does not lead the stream. Each round SIGKILLs the stream's leader and
measures the time from the kill to the first PubAck of a publish sent
after it; the killed node is then restarted and the round ends when every
replica is current again. At the end every acknowledged message is read
back (lost ones are counted).

usage: bench/scripts/cluster-failover.py [--rounds N] [--servers tern,nats]
needs: target/release/tern-server (cargo build --release -p tern-broker),
nats-server and nats-py on PATH.
"""

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

import nats
from nats.js.api import StreamConfig, StorageType

STREAM = "FAILOVER"
PUBLISH_TIMEOUT_SECONDS = 0.25


class Cluster:
    """Three nodes of one server kind, started and stopped by PID."""

    def __init__(self, kind, work, nats_sync):
        self.kind = kind
        self.work = work
        self.nats_sync = nats_sync
        base = 14260 if kind == "tern" else 14270
        self.client_ports = [base + n for n in (1, 2, 3)]
        self.route_ports = [base + 2000 + n for n in (1, 2, 3)]
        self.names = [("t" if kind == "tern" else "s") + str(n) for n in (1, 2, 3)]
        self.processes = [None, None, None]

    def url(self, node):
        return f"nats://127.0.0.1:{self.client_ports[node]}"

    def start(self, node):
        log = open(os.path.join(self.work, f"{self.names[node]}.log"), "ab")
        routes = ",".join(f"nats://127.0.0.1:{port}" for port in self.route_ports)
        store = os.path.join(self.work, self.names[node])
        if self.kind == "tern":
            command = [
                "./target/release/tern-server", "-a", "127.0.0.1",
                "-p", str(self.client_ports[node]), "-n", self.names[node],
                "--cores", "0-1", "--unpinned", "-js", "-sd", store,
                "--cluster", f"nats://127.0.0.1:{self.route_ports[node]}",
                "--cluster_name", "failover", "--routes", routes,
            ]
        else:
            config = os.path.join(self.work, f"{self.names[node]}.conf")
            sync = "sync_interval: always" if self.nats_sync == "always" else ""
            route_list = ", ".join(f"nats://127.0.0.1:{port}" for port in self.route_ports)
            with open(config, "w") as file:
                file.write(
                    f"server_name: {self.names[node]}\n"
                    f"listen: 127.0.0.1:{self.client_ports[node]}\n"
                    f"jetstream {{ store_dir: \"{store}\"\n {sync} }}\n"
                    f"cluster {{ name: failover\n listen: 127.0.0.1:{self.route_ports[node]}\n"
                    f" routes: [{route_list}] }}\n"
                )
            command = ["nats-server", "-c", config]
        self.processes[node] = subprocess.Popen(command, stdout=log, stderr=log)

    def kill(self, node):
        process = self.processes[node]
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop_all(self):
        for process in self.processes:
            if process and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            if process:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


async def quiet(_error):
    """nats-py logs every refused connection otherwise."""


async def connect(urls, reconnect=True):
    return await nats.connect(
        servers=urls, connect_timeout=1, max_reconnect_attempts=-1 if reconnect else 0,
        reconnect_time_wait=0.05, allow_reconnect=reconnect, error_cb=quiet,
    )


async def until(condition, timeout_seconds, what):
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        try:
            if await condition():
                return
        except Exception:
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout_seconds} s waiting for {what}")


async def stream_cluster(cluster, node):
    """The stream's cluster block as `node` answers it."""
    connection = await connect([cluster.url(node)], reconnect=False)
    try:
        reply = await connection.request(f"$JS.API.STREAM.INFO.{STREAM}", b"", timeout=1)
        return json.loads(reply.data).get("cluster", {})
    finally:
        await connection.close()


async def healthy(cluster, node):
    """A leader, and both other replicas current."""
    block = await stream_cluster(cluster, node)
    replicas = block.get("replicas", [])
    return bool(block.get("leader")) and len(replicas) == 2 and all(
        replica.get("current") for replica in replicas
    )


async def run(kind, rounds, nats_sync):
    work = tempfile.mkdtemp(prefix=f"failover-{kind}-")
    cluster = Cluster(kind, work, nats_sync)
    for node in range(3):
        cluster.start(node)
    acked = set()
    failovers = []
    try:
        async def js_ready():
            connection = await connect([cluster.url(0)], reconnect=False)
            try:
                reply = await connection.request("$JS.API.INFO", b"", timeout=1)
                return "error" not in json.loads(reply.data)
            finally:
                await connection.close()

        await until(js_ready, 60, "JetStream on node 1")
        admin = await connect([cluster.url(0)])
        await admin.jetstream().add_stream(
            StreamConfig(name=STREAM, subjects=["failover.>"], num_replicas=3, storage=StorageType.FILE)
        )
        await admin.close()
        await until(lambda: healthy(cluster, 0), 60, "the stream's replicas to be current")
        counter = 0
        for round_number in range(rounds):
            live = [node for node in range(3) if cluster.processes[node].poll() is None]
            block = await stream_cluster(cluster, live[0])
            leader = cluster.names.index(block["leader"])
            others = [node for node in range(3) if node != leader]
            client = await connect([cluster.url(node) for node in others])
            js = client.jetstream(timeout=PUBLISH_TIMEOUT_SECONDS)
            # Steady publishing for a moment before the kill.
            for _ in range(200):
                counter += 1
                try:
                    ack = await js.publish(f"failover.{counter}", str(counter).encode())
                    acked.add((counter, ack.seq))
                except Exception:
                    pass
            killed_at = time.monotonic()
            cluster.kill(leader)
            recovered_at = None
            while time.monotonic() - killed_at < 60:
                counter += 1
                try:
                    ack = await js.publish(f"failover.{counter}", str(counter).encode())
                    acked.add((counter, ack.seq))
                    recovered_at = time.monotonic()
                    break
                except Exception:
                    pass
            if recovered_at is None:
                raise RuntimeError(f"round {round_number}: no PubAck within 60 s of the kill")
            failovers.append((recovered_at - killed_at) * 1000)
            await client.close()
            cluster.start(leader)
            await until(lambda: healthy(cluster, others[0]), 120, "the restarted replica to be current")
        # Every acknowledged message, read back.
        reader = await connect([cluster.url(0)])
        js = reader.jetstream(timeout=2)
        stored = {}
        for counter_value, sequence in sorted(acked, key=lambda pair: pair[1]):
            message = await js.get_msg(STREAM, sequence)
            stored[sequence] = message.data
        await reader.close()
        lost = sum(1 for value, sequence in acked if stored.get(sequence) != str(value).encode())
        return failovers, len(acked), lost
    finally:
        cluster.stop_all()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--servers", default="tern,nats")
    parser.add_argument("--nats-sync", default="default", choices=["default", "always"])
    arguments = parser.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    for kind in arguments.servers.split(","):
        failovers, acked, lost = await run(kind, arguments.rounds, arguments.nats_sync)
        print(
            f"{kind:5} rounds={len(failovers)} failover_ms median={statistics.median(failovers):.0f} "
            f"min={min(failovers):.0f} max={max(failovers):.0f} "
            f"each={[round(value) for value in failovers]} acked={acked} lost={lost}"
        )


if __name__ == "__main__":
    asyncio.run(main())
