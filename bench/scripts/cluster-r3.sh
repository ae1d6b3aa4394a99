#!/usr/bin/env bash
# R3 JetStream publishes on a 3-node cluster, tern and nats-server 2.15.1
# side by side in one run: every node lists every node (what clustered
# JetStream asks of tern), the producer connects to node 1 (the stream's
# leader may be any node: its PubAcks then cross a route too).
#
# usage: bench/scripts/cluster-r3.sh [OUT_DIR] [DURATION_SECS]
# env: TERN_SERVER (the tern-server binary, default target/release/tern-server),
#      TERN_CORES (default 0-1), TERN_ARGS (more tern-server flags), WORKLOADS (default r3-publish
#      r3-publish-async), NATS_SYNC=always for nats-server's
#      `sync_interval: always` (its default syncs every 2 minutes).
# needs: target/release/tern and tern-server (cargo build --release -p
# tern-broker -p tern-cli), nats-server on PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/cluster-r3}
duration=${2:-10}
tern=./target/release/tern
server=${TERN_SERVER:-./target/release/tern-server}
mkdir -p "$out"
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -z "${KEEP_LOGS:-}" ]; then rm -rf "$work"; else echo "logs kept in $work" >&2; fi
}
trap cleanup EXIT

# Ports: tern 1424N/1824N/1624N, nats 1434N/1834N/1634N.
tern_routes=nats://127.0.0.1:16241,nats://127.0.0.1:16242,nats://127.0.0.1:16243
for n in 1 2 3; do
  "$server" -a 127.0.0.1 -p 1424$n -m 1824$n -n t$n --cores "${TERN_CORES:-0-1}" --unpinned \
    -js -sd "$work/tern-$n" --cluster nats://127.0.0.1:1624$n --cluster_name bench \
    --routes "$tern_routes" ${TERN_ARGS:-} 2>"$work/tern-$n.log" &
  pids+=($!)
  sync=""
  if [ "${NATS_SYNC:-}" = always ]; then sync="sync_interval: always"; fi
  cat >"$work/nats-$n.conf" <<CONF
server_name: s$n
listen: 127.0.0.1:1434$n
http: 127.0.0.1:1834$n
jetstream {
  store_dir: "$work/nats-$n"
  $sync
}
cluster {
  name: bench
  listen: 127.0.0.1:1634$n
  routes: [nats://127.0.0.1:16341, nats://127.0.0.1:16342, nats://127.0.0.1:16343]
}
CONF
  nats-server -c "$work/nats-$n.conf" 2>"$work/nats-$n.log" &
  pids+=($!)
done

# Ready: JetStream answers on node 1 (the meta group has a leader).
ready() {
  python3 - "$1" <<'PY'
import asyncio, json, sys
import nats
async def main():
    nc = await nats.connect(sys.argv[1], connect_timeout=1, max_reconnect_attempts=0)
    try:
        reply = await nc.request("$JS.API.INFO", b"", timeout=1)
        print("ok" if "error" not in json.loads(reply.data) else "no")
    finally:
        await nc.close()
try:
    asyncio.run(main())
except Exception:
    print("no")
PY
}
for url in nats://127.0.0.1:14241 nats://127.0.0.1:14341; do
  for _ in $(seq 100); do
    [ "$(ready "$url")" = ok ] && break
    sleep 0.2
  done
  [ "$(ready "$url")" = ok ] || { echo "JetStream behind $url never became available"; tail -5 "$work"/*.log; exit 1; }
done

for workload in ${WORKLOADS:-r3-publish r3-publish-async}; do
  for side in tern nats; do
    if [ "$side" = tern ]; then url=nats://127.0.0.1:14241; else url=nats://127.0.0.1:14341; fi
    "$tern" bench run --quiet --workload "bench/workloads/$workload.toml" \
      --duration-secs "$duration" --warmup-secs 2 --label "$side-3-nodes" \
      --url "$url" --out "$out/$workload-$side" >/dev/null 2>&1 || true
    python3 - "$out/$workload-$side/results.json" "$workload" "$side" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
latency = run["latency"]
print(f"{sys.argv[2]:17} {sys.argv[3]:5} status={run['status']} msgs/s={run['throughput_msgs_per_second']:.0f} "
      f"p50={latency['p50_micros']:.0f}us p99={latency['p99_micros']:.0f}us p999={latency['p999_micros']:.0f}us "
      f"lost={run['lost']} errors={run['errors']}")
PY
  done
done
