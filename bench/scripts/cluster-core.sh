#!/usr/bin/env bash
# Core NATS across the nodes of a 3-node cluster, tern and nats-server 2.15.1
# side by side in one run: each workload's producer connects to node 1 and
# its subscriber (or responder) to node 2, so every message crosses a route.
#
# usage: bench/scripts/cluster-core.sh [OUT_DIR] [DURATION_SECS]
# needs: target/release/tern and tern-server (cargo build --release -p
# tern-broker -p tern-cli), nats-server on PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/cluster-core}
duration=${2:-10}
tern=./target/release/tern
server=./target/release/tern-server
mkdir -p "$out"
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Ports: tern 1423N/1823N/1623N, nats 1433N/1833N/1633N.
for n in 1 2 3; do
  "$server" -a 127.0.0.1 -p 1423$n -m 1823$n -n t$n --cores "${TERN_CORES:-0-1}" --unpinned \
    -sd "$work/tern-$n" --cluster nats://127.0.0.1:1623$n --cluster_name bench \
    --routes nats://127.0.0.1:16231 2>"$work/tern-$n.log" &
  pids+=($!)
  nats-server -a 127.0.0.1 -p 1433$n -m 1833$n -n s$n \
    --cluster nats://127.0.0.1:1633$n --cluster_name bench \
    --routes nats://127.0.0.1:16331 2>"$work/nats-$n.log" &
  pids+=($!)
done

# Formed: every node routes to two distinct peers.
formed() {
  local port=$1
  curl -sf "http://127.0.0.1:$port/routez" |
    python3 -c 'import json,sys; print(len({r["remote_id"] for r in json.load(sys.stdin)["routes"]}))' 2>/dev/null
}
for port in 18231 18232 18233 18331 18332 18333; do
  for _ in $(seq 100); do
    [ "$(formed "$port")" = 2 ] && break
    sleep 0.1
  done
  [ "$(formed "$port")" = 2 ] || { echo "cluster behind :$port did not form"; exit 1; }
done

for workload in ${WORKLOADS:-latency-1k latency-10k request-reply}; do
  for side in tern nats; do
    if [ "$side" = tern ]; then urls=nats://127.0.0.1:14231,nats://127.0.0.1:14232; else urls=nats://127.0.0.1:14331,nats://127.0.0.1:14332; fi
    "$tern" bench run --quiet --workload "bench/workloads/$workload.toml" \
      --duration-secs "$duration" --warmup-secs 2 --label "$side-3-nodes" \
      --url "$urls" --out "$out/$workload-$side" >/dev/null 2>&1
    python3 - "$out/$workload-$side/results.json" "$workload" "$side" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
latency = run["latency"]
print(f"{sys.argv[2]:14} {sys.argv[3]:5} status={run['status']} msgs/s={run['throughput_msgs_per_second']:.0f} "
      f"p50={latency['p50_micros']:.0f}us p99={latency['p99_micros']:.0f}us p999={latency['p999_micros']:.0f}us "
      f"lost={run['lost']} errors={run['errors']}")
PY
  done
done
