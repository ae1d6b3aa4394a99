#!/usr/bin/env bash
# TLS on the client port against TLS off, for tern and for nats-server
# 2.15.1: the security issue's three measures (core 1 KiB pub→sub p50,
# durable publish p50, 256-in-flight throughput). For each server, a TLS
# and a plaintext instance run at once and `tern bench compare` drives one
# side, then the other. docs/benchmarks-history.md, "TLS on the client port".
#
# usage: bench/scripts/tls-on-off.sh CERT_DIR [OUT_DIR] [DURATION_SECS]
#   CERT_DIR holds ca.pem, server.pem and server-key.pem (a server
#   certificate for 127.0.0.1).
# needs: target/release/tern and tern-server (cargo build --release -p
# tern-broker -p tern-cli), nats-server on PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
certs=$(realpath "$1")
out=$(realpath -m "${2:-/tmp/tls-on-off}")
duration=${3:-15}
tern=./target/release/tern
server=./target/release/tern-server
mkdir -p "$out"
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
wait_port() {
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  return 1
}
stop_all() {
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
}
tls=(--tls --tlscert "$certs/server.pem" --tlskey "$certs/server-key.pem")
for workload in core-1kib js-publish max-throughput; do
  "$server" -a 127.0.0.1 -p 15222 -m 0 --cores 0,1 --unpinned --jetstream \
    --store_dir "$work/tern-tls" "${tls[@]}" >"$work/tern-tls.log" 2>&1 &
  pids+=($!)
  "$server" -a 127.0.0.1 -p 15223 -m 0 --cores 0,1 --unpinned --jetstream \
    --store_dir "$work/tern-plain" >"$work/tern-plain.log" 2>&1 &
  pids+=($!)
  wait_port 15222 && wait_port 15223
  "$tern" bench compare --a nats://127.0.0.1:15222 --a-label tern-tls \
    --b nats://127.0.0.1:15223 --b-label tern-plain --tls-ca "$certs/ca.pem" \
    --workload "bench/workloads/$workload.toml" --out "$out/tern-$workload" \
    --duration-secs "$duration" --warmup-secs 3 --quiet
  stop_all
  for side in tls plain; do
    printf 'jetstream { store_dir: "%s/nats-%s", sync_interval: always }\n' "$work" "$side" \
      >"$work/nats-$side.conf"
  done
  nats-server -a 127.0.0.1 -p 15224 -m 0 -c "$work/nats-tls.conf" "${tls[@]}" \
    >"$work/nats-tls.log" 2>&1 &
  pids+=($!)
  nats-server -a 127.0.0.1 -p 15225 -m 0 -c "$work/nats-plain.conf" \
    >"$work/nats-plain.log" 2>&1 &
  pids+=($!)
  wait_port 15224 && wait_port 15225
  "$tern" bench compare --a nats://127.0.0.1:15224 --a-label nats-tls \
    --b nats://127.0.0.1:15225 --b-label nats-plain --tls-ca "$certs/ca.pem" \
    --workload "bench/workloads/$workload.toml" --out "$out/nats-$workload" \
    --duration-secs "$duration" --warmup-secs 3 --quiet
  stop_all
  rm -rf "$work"/tern-* "$work"/nats-*/
done
echo "reports in $out/{tern,nats}-{core-1kib,js-publish,max-throughput}/report.md"
