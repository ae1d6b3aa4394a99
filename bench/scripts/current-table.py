#!/usr/bin/env python3
"""The markdown table of BENCHMARKS.md from bench/scripts/current-table.sh's
output directory: per workload and store, tern and nats-server throughput,
PubAck/delivery latency p50/p99, the server's CPU per message and its peak
RSS, and the tern / nats-server ratios of latency and CPU.

usage: bench/scripts/current-table.py OUT_DIR
"""
import json
import pathlib
import sys


def load(path):
    report = json.loads(path.read_text())
    return {run["label"]: run for run in report["runs"]}, report["workload"]


def cpu_per_message_micros(run):
    usage = run.get("usage") or {}
    percent = usage.get("server_cpu_percent")
    rate = run.get("throughput_msgs_per_second") or 0
    if percent is None or rate <= 0:
        return None
    return percent / 100.0 / rate * 1e6


def rss_mib(run):
    peak = (run.get("usage") or {}).get("server_peak_rss_bytes")
    return None if peak is None else peak / (1 << 20)


def number(value, digits=0):
    return "—" if value is None else f"{value:,.{digits}f}"


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def cell(run):
    if run is None or run.get("status") != "ok":
        return ["failed" if run else "—"] * 5, (None, None, None)
    latency = run["latency"]
    cpu = cpu_per_message_micros(run)
    values = [
        number(run["throughput_msgs_per_second"]),
        f'{latency["p50_micros"]:,.0f} / {latency["p99_micros"]:,.0f}',
        number(cpu, 1),
        number(rss_mib(run), 1),
    ]
    return values, (latency["p50_micros"], latency["p99_micros"], cpu)


def row(workload, store, tern, nats):
    tern_values, tern_numbers = cell(tern)
    nats_values, nats_numbers = cell(nats)
    ratios = [ratio(a, b) for a, b in zip(tern_numbers, nats_numbers)]
    return (
        f"| {workload} | {store} | "
        + " | ".join(tern_values[:4])
        + " | "
        + " | ".join(nats_values[:4])
        + " | "
        + " / ".join(ratios[:2])
        + f" | {ratios[2]} |"
    )


def main():
    out = pathlib.Path(sys.argv[1])
    print(
        "| workload | store | tern msgs/s | tern p50 / p99 µs | tern CPU µs/msg | tern peak RSS MiB "
        "| nats-server msgs/s | nats-server p50 / p99 µs | nats-server CPU µs/msg | nats-server peak RSS MiB "
        "| p50 / p99 ratio | CPU ratio |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for store in ["disk", "tmpfs"]:
        for path in sorted((out / store).glob("*/results.json")):
            runs, workload = load(path)
            label = store if workload["kind"].startswith("js") else "—"
            print(row(workload["name"], label, runs.get("tern"), runs.get("nats-server")))
    for workload in ["r3-publish", "r3-publish-async"]:
        sides = {}
        for side in ["tern", "nats"]:
            path = out / "r3" / f"{workload}-{side}" / "results.json"
            if path.exists():
                sides[side] = next(iter(load(path)[0].values()))
        print(row(workload, "disk, 3 nodes", sides.get("tern"), sides.get("nats")))


if __name__ == "__main__":
    main()
