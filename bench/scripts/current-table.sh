#!/usr/bin/env bash
# The current table of BENCHMARKS.md: every single-node workload of
# bench/workloads, tern and nats-server 2.15.1 side by side in one
# `tern bench compare` each (server on CPU 1, client on CPU 0), the
# JetStream ones once with both stores on the disk and once on a tmpfs;
# then the R3 workloads on 3-node clusters (bench/scripts/cluster-r3.sh,
# both stores on the disk). Prints the markdown table
# (bench/scripts/current-table.py) on stdout.
#
# usage: bench/scripts/current-table.sh [OUT_DIR] [DURATION_SECS]
# env: TMPFS (default /mnt/tern-bench-tmpfs, mounted as a tmpfs when it is
#      not a mount point; tern refuses a journal under /dev, so not /dev/shm):
#      where the tmpfs runs keep their stores; PARTS (default "disk tmpfs r3"):
#      which parts run (the table shows what the output directory holds).
# needs: target/release/tern and tern-server (cargo build --release -p
# tern-broker --bin tern-server -p tern-cli --bin tern), nats-server on PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/current-table}
duration=${2:-10}
tmpfs=${TMPFS:-/mnt/tern-bench-tmpfs}
parts=${PARTS:-disk tmpfs r3}
tern=./target/release/tern
mkdir -p "$out"

core="core-1kib latency-1k latency-10k latency-50k payload-16k subjects-1024 request-reply"
jetstream="js-publish js-publish-async max-throughput many-streams js-end-to-end js-end-to-end-10k js-pull-drain js-pull-drain-ack js-push-throughput"

compare() { # workload, output directory, extra environment
  local workload=$1 dir=$2
  shift 2
  echo "== $workload -> $dir" >&2
  env "$@" "$tern" bench compare --workload "bench/workloads/$workload.toml" --out "$dir" \
    --a-tern ./target/release/tern-server --a-label tern --b-nats --b-label nats-server \
    --server-cpus 1 --client-cpus 0 --duration-secs "$duration" --quiet >/dev/null \
    || echo "(a run failed: see $dir/report.md)" >&2
}

if [[ " $parts " == *" disk "* ]]; then
  for workload in $core $jetstream; do
    compare "$workload" "$out/disk/$workload"
  done
fi
if [[ " $parts " == *" tmpfs "* ]]; then
  if ! mountpoint -q "$tmpfs"; then
    mkdir -p "$tmpfs"
    mount -t tmpfs -o size=8g tmpfs "$tmpfs"
  fi
  for workload in $jetstream; do
    scratch=$(mktemp -d -p "$tmpfs")
    compare "$workload" "$out/tmpfs/$workload" TMPDIR="$scratch"
    rm -rf "$scratch"
  done
fi
if [[ " $parts " == *" r3 "* ]]; then
  WORKLOADS="r3-publish r3-publish-async" bench/scripts/cluster-r3.sh "$out/r3" "$duration" >&2 2>/dev/null
fi
python3 bench/scripts/current-table.py "$out"
