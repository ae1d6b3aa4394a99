#!/usr/bin/env python3
"""What one isolated write costs on this host: O_DIRECT writes of 12 KiB
(a journal batch holding one 1 KiB message: header, record, parity),
with and without O_DSYNC, back to back and paced at one per millisecond
(the one-in-flight workloads' rate, the CPU idle in between).

On a VM each isolated write pays the host's wake-ups (its I/O thread, and
the vCPU's return from idle) that back-to-back writes do not: this is the
floor under any durable publish at that rate, whatever the broker does.

usage: bench/scripts/paced-write.py [DIR] [WRITES]   (DIR on the journal's filesystem)
"""

import mmap
import os
import sys
import time

BATCH_BYTES = 12288
FILE_BYTES = 64 << 20
PACE_SECONDS = 0.001


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "."
    writes = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    path = os.path.join(directory, f"paced-write.{os.getpid()}.tmp")
    buffer = mmap.mmap(-1, BATCH_BYTES)  # page-aligned, as O_DIRECT needs
    buffer.write(b"x" * BATCH_BYTES)
    # Written once whole, so the measured writes overwrite allocated blocks.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"\0" * FILE_BYTES)
        os.fsync(fd)
        os.close(fd)
        slots = FILE_BYTES // BATCH_BYTES
        for flags, name in [(os.O_DSYNC, "O_DSYNC"), (0, "plain")]:
            fd = os.open(path, os.O_RDWR | os.O_DIRECT | flags)
            for paced in [False, True]:
                micros = []
                for index in range(writes):
                    start = time.perf_counter()
                    os.pwritev(fd, [buffer], (index % slots) * BATCH_BYTES)
                    micros.append((time.perf_counter() - start) * 1e6)
                    if paced:
                        until = time.perf_counter() + PACE_SECONDS
                        while time.perf_counter() < until:
                            time.sleep(0.0002)
                micros.sort()
                pace = "one per ms" if paced else "back to back"
                print(
                    f"{name:8} {pace:13} p50 {micros[len(micros) // 2]:7.0f} µs"
                    f"  p99 {micros[len(micros) * 99 // 100]:7.0f} µs  ({writes} writes)"
                )
            os.close(fd)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
