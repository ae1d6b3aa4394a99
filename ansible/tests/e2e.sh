#!/usr/bin/env bash
# ansible/tests/e2e.sh [BIN_DIR]: deploys a 3-node tern cluster with this
# collection to three Debian hosts and checks it, end to end, on one
# machine. Each host is a `systemd-nspawn --boot` container (systemd as
# PID 1, its own sshd) in its own network namespace on a bridge; Ansible
# runs from a controller namespace over real SSH. Sets up and tears down
# everything itself (recipes: ../shared/OPS-TESTING.md, section B).
#
# Checks: ansible-lint (offline); site.yml brings up a TLS-secured cluster
# (mutual TLS between nodes); an R3 stream created through one node takes
# publishes through another and is read through the third; a second
# site.yml changes nothing; a rolling restart (playbooks/rolling.yml) keeps
# every acknowledged message and the stream writable throughout; the
# bench playbook fetches a report; h3's store wiped, playbooks/replace.yml
# brings it back under its own name with every acknowledged message
# (TERN_E2E_SKIP_REPLACE=1 skips that; TERN_E2E_REPLACE_NEW_NAME=1 also
# replaces h3 by a new host h4). Ends with "N passed, M failed".
#
# Needs root. Installs ansible, ansible-lint, debootstrap and
# systemd-container when missing; the Debian base is cached in
# /var/cache/tern-ci/bookworm-base.tgz.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
collection=$(cd "$here/.." && pwd)
repository=$(cd "$collection/.." && pwd)
bin=${1:-$repository/target/debug}
python=${TERN_E2E_PYTHON:-python3}
prefix=ternans
subnet=10.213.0
work=$(mktemp -d /tmp/tern-ansible-e2e.XXXXXX)
passed=0
failed=0

pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}

hosts=(h1 h2 h3)
# TERN_E2E_REPLACE_NEW_NAME=1: a fourth host, h4, replaces h3 under its
# own name at the end (about a minute more).
[ -n "${TERN_E2E_REPLACE_NEW_NAME:-}" ] && hosts+=(h4)
cleanup() {
  for host in "${hosts[@]}"; do
    if [ -f "$work/$host.pid" ]; then
      kill -TERM "$(cat "$work/$host.pid")" 2>/dev/null
    fi
  done
  for host in "${hosts[@]}"; do
    if [ -f "$work/$host.pid" ]; then
      for _ in $(seq 1 100); do
        kill -0 "$(cat "$work/$host.pid")" 2>/dev/null || break
        sleep 0.1
      done
      kill -KILL "$(cat "$work/$host.pid")" 2>/dev/null
    fi
    mountpoint -q "$work/$host/root" && umount -l "$work/$host/root"
  done
  for namespace in ctl sw "${hosts[@]}"; do
    ip netns delete "$prefix-$namespace" 2>/dev/null
  done
  if [ -z "${TERN_E2E_KEEP:-}" ]; then
    rm -rf "$work"
  else
    echo "kept $work"
  fi
}
trap cleanup EXIT

# --- tools
need=()
command -v ansible-playbook >/dev/null || need+=(ansible)
command -v ansible-lint >/dev/null || need+=(ansible-lint)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
command -v ssh >/dev/null || need+=(openssh-client)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
fi

# --- lint
if (cd "$collection" && ansible-lint --offline -q site.yml playbooks/ roles/ >"$work/lint.log" 2>&1); then
  pass "ansible-lint (offline, production profile)"
else
  cat "$work/lint.log"
  fail "ansible-lint"
fi

# --- the Debian base
cache=/var/cache/tern-ci/bookworm-base.tgz
if [ ! -f "$cache" ]; then
  mkdir -p /var/cache/tern-ci
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
  debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,openssh-server,python3,iproute2,sudo,procps,iputils-ping,ca-certificates,xfsprogs \
    bookworm "$work/base-build" "${mirror:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; fail "debootstrap"; exit 1; }
  tar -C "$work/base-build" -czf "$cache.tmp" . && mv "$cache.tmp" "$cache"
  rm -rf "$work/base-build"
fi
# TERN_E2E_PREPARE_ONLY=1: install the tools and cache the base only (CI
# does it while the code builds).
if [ -n "${TERN_E2E_PREPARE_ONLY:-}" ]; then
  echo "prepared: $cache"
  exit 0
fi
bin=$(cd "$bin" && pwd) || { fail "no binaries in $bin"; finish; exit 1; }
mkdir -p "$work/base"
tar -C "$work/base" -xzf "$cache"

# --- network: a switch namespace with a bridge; the controller and each host on it
ip netns add "$prefix-sw"
ip -n "$prefix-sw" link add br0 type bridge
ip -n "$prefix-sw" link set br0 up
address=10
for namespace in ctl "${hosts[@]}"; do
  ip netns add "$prefix-$namespace"
  ip link add "v-$prefix-$namespace" type veth peer name eth0 netns "$prefix-$namespace"
  ip link set "v-$prefix-$namespace" netns "$prefix-sw"
  ip -n "$prefix-sw" link set "v-$prefix-$namespace" master br0 up
  ip -n "$prefix-$namespace" addr add "$subnet.$address/24" dev eth0
  ip -n "$prefix-$namespace" link set eth0 up
  ip -n "$prefix-$namespace" link set lo up
  address=$((address + 1))
done

# --- keys and certificates (one CA; one server certificate for every node)
mkdir -p "$work/ssh" "$work/pki"
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/id_ed25519"
(
  cd "$work/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=tern-e2e-ca \
    -keyout ca-key.pem -out ca.pem 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=tern-e2e-node \
    -keyout server-key.pem -out server.csr 2>/dev/null
  printf 'subjectAltName=IP:%s.11,IP:%s.12,IP:%s.13,IP:%s.14,IP:127.0.0.1,DNS:h1,DNS:h2,DNS:h3,DNS:h4,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' \
    "$subnet" "$subnet" "$subnet" "$subnet" > ext.cnf
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
    -extfile ext.cnf -out server-cert.pem 2>/dev/null
)

# An NKey user: the only client the cluster lets in.
"$bin/tern" nkey gen user > "$work/user.keys"
head -1 "$work/user.keys" > "$work/user.nk"
user_public=$(sed -n 2p "$work/user.keys")

# --- hosts: a copy-on-write root each, booted with systemd
address=11
for host in "${hosts[@]}"; do
  mkdir -p "$work/$host"/{upper,work,root}
  mount -t overlay overlay \
    -o "lowerdir=$work/base,upperdir=$work/$host/upper,workdir=$work/$host/work" "$work/$host/root"
  echo "$host" > "$work/$host/root/etc/hostname"
  mkdir -p -m 700 "$work/$host/root/root/.ssh"
  cp "$work/ssh/id_ed25519.pub" "$work/$host/root/root/.ssh/authorized_keys"
  SYSTEMD_NSPAWN_API_VFS_WRITABLE=network setsid systemd-nspawn -D "$work/$host/root" --boot \
    --register=no --keep-unit --network-namespace-path="/run/netns/$prefix-$host" --machine="$prefix-$host" \
    --capability=CAP_IPC_LOCK,CAP_NET_ADMIN,CAP_SYS_NICE </dev/null >"$work/$host.console" 2>&1 &
  echo $! > "$work/$host.pid"
  address=$((address + 1))
done
ssh_options=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ControlMaster=no -o ConnectTimeout=2 -o BatchMode=yes -i "$work/ssh/id_ed25519")
booted=0
for attempt in $(seq 1 120); do
  booted=0
  for number in $(seq 11 $((10 + ${#hosts[@]}))); do
    ip netns exec "$prefix-ctl" ssh "${ssh_options[@]}" "root@$subnet.$number" true 2>/dev/null && booted=$((booted + 1))
  done
  [ "$booted" = ${#hosts[@]} ] && break
  sleep 0.5
done
if [ "$booted" = ${#hosts[@]} ]; then pass "${#hosts[@]} hosts booted (systemd, sshd), attempt $attempt"; else fail "hosts boot"; finish; exit 1; fi

# --- inventory
cat > "$work/inventory.yml" <<EOF
---
tern:
  hosts:
    h1: { ansible_host: $subnet.11 }
    h2: { ansible_host: $subnet.12 }
    h3: { ansible_host: $subnet.13 }
  vars:
    ansible_user: root
    ansible_python_interpreter: /usr/bin/python3
    ansible_ssh_private_key_file: $work/ssh/id_ed25519
    ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ControlMaster=no
    tern_bin_src_dir: $work/bin
    tern_unpinned: true
    tern_journal_segments: 4
    tern_journal_segment_size: 8MiB
    tern_tls_cert_src: $work/pki/server-cert.pem
    tern_tls_key_src: $work/pki/server-key.pem
    tern_tls_ca_src: $work/pki/ca.pem
    tern_authorization_users:
      - nkey: $user_public
EOF
mkdir -p "$work/bin"
for binary in tern-server tern; do strip -o "$work/bin/$binary" "$bin/$binary"; done
export ANSIBLE_ROLES_PATH="$collection/roles" ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_NOCOLOR=1 ANSIBLE_RETRY_FILES_ENABLED=False
playbook() { ip netns exec "$prefix-ctl" ansible-playbook -i "$work/inventory.yml" "$@"; }

# --- deploy
started=$SECONDS
if playbook "$collection/site.yml" >"$work/site1.log" 2>&1; then
  pass "site.yml deployed the cluster ($((SECONDS - started)) s)"
else
  tail -40 "$work/site1.log"
  fail "site.yml"
  finish
  exit 1
fi

# --- what the hosts run
unit_ok=0
for number in 11 12 13; do
  state=$(ip netns exec "$prefix-ctl" ssh "${ssh_options[@]}" "root@$subnet.$number" \
    'systemctl is-active tern; systemctl is-enabled tern; systemctl show -p AmbientCapabilities tern; systemctl show -p User tern')
  if echo "$state" | grep -q '^active$' && echo "$state" | grep -q '^enabled$' &&
     echo "$state" | grep -q 'cap_ipc_lock' && echo "$state" | grep -q '^User=tern$'; then
    unit_ok=$((unit_ok + 1))
  else
    echo "$subnet.$number: $state"
  fi
done
[ "$unit_ok" = 3 ] && pass "tern active and enabled on 3 hosts, as user tern with CAP_IPC_LOCK" || fail "systemd units"

# --- clients across nodes, over TLS
tern() { ip netns exec "$prefix-ctl" "$bin/tern" --tlsca "$work/pki/ca.pem" --nkey "$work/user.nk" "$@"; }
url() { echo "tls://$subnet.$1:4222"; }
anonymous=$(ip netns exec "$prefix-ctl" "$bin/tern" --tlsca "$work/pki/ca.pem" -s "$(url 11)" stream ls 2>&1)
if echo "$anonymous" | grep -qi "authorization violation"; then
  pass "a client without the NKey is refused (TLS and NKey authentication on)"
else
  echo "$anonymous"; fail "a client without the NKey was not refused"
fi
if tern -s "$(url 11)" stream add E2E --subjects 'e2e.>' --storage file --replicas 3 --defaults >"$work/add.log" 2>&1; then
  pass "R3 stream created through h1 (TLS)"
else
  cat "$work/add.log"; fail "stream add"
fi
published=0
for index in $(seq 1 20); do
  tern -s "$(url 12)" pub "e2e.$index" "message $index" >/dev/null 2>&1 && published=$((published + 1))
done
[ "$published" = 20 ] && pass "20 acknowledged publishes through h2" || fail "publishes through h2 ($published of 20)"
info=$(tern -s "$(url 13)" stream info E2E --json 2>&1)
messages=$(echo "$info" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["state"]["messages"])' 2>/dev/null)
replicas=$(echo "$info" | "$python" -c 'import json,sys; i=json.load(sys.stdin)["cluster"]; print(1 + len(i.get("replicas", [])))' 2>/dev/null)
[ "$messages" = 20 ] && [ "$replicas" = 3 ] && pass "h3 reads 20 messages on 3 replicas" || { echo "$info"; fail "read through h3 (messages $messages, replicas $replicas)"; }
last=$(tern -s "$(url 13)" stream get E2E 20 --json 2>/dev/null | "$python" -c 'import json,sys,base64; print(base64.b64decode(json.load(sys.stdin)["data"]).decode())' 2>/dev/null)
[ "$last" = "message 20" ] && pass "message 20 read through h3" || fail "stream get through h3 ($last)"
# A durable pull consumer made through h1 and consumed (with acks) through h3.
tern -s "$(url 11)" consumer add E2E READER --pull --defaults >"$work/consumer.log" 2>&1
bodies=$(tern -s "$(url 13)" consumer next E2E READER --count 20 2>"$work/next.log")
if [ "$(echo "$bodies" | grep -c '^message ')" = 20 ] && [ "$(echo "$bodies" | tail -1)" = "message 20" ]; then
  pass "20 messages consumed and acked through h3 by a consumer made through h1"
else
  cat "$work/consumer.log" "$work/next.log"; echo "$bodies"; fail "consume across nodes"
fi

# --- idempotence
if playbook "$collection/site.yml" >"$work/site2.log" 2>&1 &&
   grep -E '^h[123] +:' "$work/site2.log" | grep -qv 'changed=0'; then
  grep -E '^h[123] +:' "$work/site2.log"
  fail "second site.yml changed something"
elif grep -E '^h[123] +:' "$work/site2.log" | grep -q 'changed=0'; then
  pass "second site.yml: changed=0 on every host"
else
  tail -30 "$work/site2.log"; fail "second site.yml"
fi

# --- rolling restart under publishes
cat > "$work/publisher.py" <<'EOF'
# Publishes e2e.rolling.N with acks through every node until told to stop;
# prints the acked sequences and the longest time without an ack.
import asyncio, json, ssl, sys, time
import nats

async def main(urls, ca, seed, stop_file, out):
    context = ssl.create_default_context(cafile=ca)
    client = await nats.connect(servers=urls, tls=context, nkeys_seed=seed, max_reconnect_attempts=-1,
                                reconnect_time_wait=0.2, connect_timeout=2)
    js = client.jetstream(timeout=2)
    acked, index, last_ack, longest = [], 0, time.monotonic(), 0.0
    import os
    # A publish that failed is sent again (the same Nats-Msg-Id, so a copy
    # stored before its ack was lost is deduplicated) until acknowledged,
    # also after the stop (for at most 30 s), so every message stored is
    # acknowledged.
    retrying, stop_deadline = False, None
    while True:
        if os.path.exists(stop_file):
            if not retrying:
                break
            stop_deadline = stop_deadline or time.monotonic() + 30
            if time.monotonic() > stop_deadline:
                break
        if not retrying:
            index += 1
        try:
            ack = await js.publish(f"e2e.rolling.{index}", f"rolling {index}".encode(),
                                   headers={"Nats-Msg-Id": f"rolling-{index}"})
            acked.append(ack.seq)
            retrying = False
            now = time.monotonic()
            longest = max(longest, now - last_ack)
            last_ack = now
        except Exception as error:
            print(f"{time.strftime('%H:%M:%S')} e2e.rolling.{index}: {type(error).__name__}: {error}",
                  file=sys.stderr, flush=True)
            retrying = True
            await asyncio.sleep(0.05)
    await client.close()
    json.dump({"acked": acked, "longest_gap_s": longest}, open(out, "w"))

asyncio.run(main(sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]))
EOF
ip netns exec "$prefix-ctl" "$python" "$work/publisher.py" "$(url 11),$(url 12),$(url 13)" "$work/pki/ca.pem" \
  "$work/user.nk" "$work/stop" "$work/rolling.json" >"$work/publisher.log" 2>&1 &
publisher=$!
sleep 2  # let the publisher reach a steady rate before the first restart
# An upgrade to the same binaries: the install tasks run, nothing changes
# but the restarts.
if playbook "$collection/playbooks/rolling.yml" -e tern_cluster_upgrade=true >"$work/rolling.log" 2>&1; then
  pass "rolling upgrade, one node at a time ($(grep -c 'TASK \[cluster : Restart tern\]' "$work/rolling.log") restarts)"
else
  tail -30 "$work/rolling.log"; fail "rolling restart"
fi
touch "$work/stop"
wait "$publisher"
acked=$("$python" -c 'import json; print(len(json.load(open("'"$work/rolling.json"'"))["acked"]))' 2>/dev/null)
gap=$("$python" -c 'import json; print(round(json.load(open("'"$work/rolling.json"'"))["longest_gap_s"], 2))' 2>/dev/null)
info=$(tern -s "$(url 11)" stream info E2E --json 2>&1)
stored=$(echo "$info" | "$python" -c 'import json,sys; s=json.load(sys.stdin)["state"]; print(s["messages"], s["first_seq"], s["last_seq"])' 2>/dev/null)
expected="$((20 + acked)) 1 $((20 + acked))"
if [ -n "$acked" ] && [ "$acked" -gt 0 ] && [ "$stored" = "$expected" ]; then
  pass "every acknowledged publish kept through the rolling restart ($acked acked, stream $stored)"
else
  cat "$work/publisher.log"; echo "$info"
  # Which sequences differ: a subject stored twice (a retry not
  # deduplicated) or stored and never acknowledged.
  cat > "$work/stored.py" <<'PYEOF'
import asyncio, json, ssl, sys
import nats

async def main(url, ca, seed, acked_file):
    client = await nats.connect(servers=[url], tls=ssl.create_default_context(cafile=ca), nkeys_seed=seed)
    js = client.jetstream(timeout=5)
    acked = set(json.load(open(acked_file))["acked"])
    info = await js.stream_info("E2E")
    seqs = {}
    for seq in range(1, info.state.last_seq + 1):
        message = await js.get_msg("E2E", seq)
        seqs.setdefault(message.subject, []).append(seq)
    twice = {subject: found for subject, found in seqs.items() if len(found) > 1}
    unacked = [(seq, subject) for subject, found in seqs.items() for seq in found
               if seq not in acked and subject.startswith("e2e.rolling.")]
    print("stored twice:", twice, "stored, not acked:", unacked)
    await client.close()

asyncio.run(main(*sys.argv[1:]))
PYEOF
  ip netns exec "$prefix-ctl" "$python" "$work/stored.py" "$(url 11)" "$work/pki/ca.pem" "$work/user.nk" "$work/rolling.json" 2>&1 | tail -3
  fail "rolling restart kept the acked publishes (acked $acked, stream $stored, expected $expected)"
fi
if [ -n "$gap" ] && "$python" -c "import sys; sys.exit(0 if $gap < 10 else 1)"; then
  pass "writable throughout: longest time without an ack ${gap} s"
else
  fail "writable throughout (longest gap $gap s)"
fi

# --- bench
cat > "$work/bench.toml" <<'EOF'
name = "e2e-publish"
description = "R3 publishes through the cluster, a few seconds."
kind = "js_publish"
rate_per_second = 200
window = 1
payload_bytes = 256
storage = "file"
replicas = 3
warmup_secs = 1
duration_secs = 3
EOF
ip netns exec "$prefix-ctl" scp -q "${ssh_options[@]}" "$work/user.nk" "root@$subnet.11:/etc/tern/bench-user.nk"
if playbook "$collection/playbooks/bench.yml" -e "tern_bench_workload=$work/bench.toml" \
     -e "tern_bench_fetch_dir=$work/bench-results" -e "tern_bench_tls_ca=/etc/tern/ca.pem" \
     -e "tern_bench_nkey_seed=/etc/tern/bench-user.nk" >"$work/bench.log" 2>&1 &&
   [ -s "$work/bench-results/h1/report.md" ] && [ -s "$work/bench-results/h1/results.json" ]; then
  pass "bench playbook fetched report.md and results.json"
else
  tail -30 "$work/bench.log"; fail "bench playbook"
fi

# --- replace h3 under its own name: its store wiped (a new disk), the
# playbook deploys it again; the new store joins under a new identity,
# which replaces the old one, and the R3 stream's replica is rebuilt on it.
# TERN_E2E_SKIP_REPLACE=1 skips it.
if [ -z "${TERN_E2E_SKIP_REPLACE:-}" ]; then
  on_h3() { ip netns exec "$prefix-ctl" ssh "${ssh_options[@]}" "root@$subnet.13" "$@"; }
  state() { tern -s "$(url "$1")" stream info E2E --json 2>&1 |
    "$python" -c 'import json,sys; s=json.load(sys.stdin)["state"]; print(s["messages"], s["first_seq"], s["last_seq"])' 2>/dev/null; }
  before=$(state 11)
  old_id=$(on_h3 'sed -n "s/^id //p" /var/lib/tern/jetstream/node')
  started=$SECONDS
  on_h3 'systemctl stop tern && find /var/lib/tern -mindepth 1 -delete'
  if playbook "$collection/playbooks/replace.yml" -e tern_replace_host=h3 >"$work/replace.log" 2>&1; then
    pass "replace.yml rebuilt h3 on an empty store under its own name; every node and replica current ($((SECONDS - started)) s)"
  else
    tail -40 "$work/replace.log"; fail "replace.yml (h3, empty store)"
  fi
  new_id=$(on_h3 'sed -n "s/^id //p" /var/lib/tern/jetstream/node')
  if [ -n "$old_id" ] && [ -n "$new_id" ] && [ "$old_id" != "$new_id" ]; then
    pass "h3 joined under a new Raft identity ($old_id, now $new_id)"
  else
    fail "h3's identity (before $old_id, after $new_id)"
  fi
  if grep -E '^h[12] +:' "$work/replace.log" | grep -q 'changed=0' &&
     [ "$(grep -cE '^h[12] +:.*changed=0' "$work/replace.log")" = 2 ]; then
    pass "h1 and h2 unchanged by the replacement (same inventory, no restart)"
  else
    grep -E '^h[123] +:' "$work/replace.log"; fail "h1 and h2 changed"
  fi
  after=$(state 13)
  replicas=$(tern -s "$(url 13)" stream info E2E --json 2>/dev/null | "$python" -c '
import json,sys
c=json.load(sys.stdin)["cluster"]
print(" ".join(sorted([c["leader"]] + [r["name"] for r in c.get("replicas", []) if r.get("current")])))' 2>/dev/null)
  if [ -n "$before" ] && [ "$after" = "$before" ] && [ "$replicas" = "h1 h2 h3" ]; then
    pass "every acknowledged message kept ($after), read through h3; replicas h1 h2 h3 current"
  else
    fail "the stream after the replacement (before $before, after $after, current $replicas)"
  fi
fi

# --- replace h3 by a new host, h4 (TERN_E2E_REPLACE_NEW_NAME=1): h3's
# machine dies, the inventory trades it for h4, the playbook deploys h4,
# removes h3 for good (`tern server raft peer-remove h3 -f`, as the NKey
# user) and rewrites h1's and h2's routes without restarting them.
if [ -n "${TERN_E2E_REPLACE_NEW_NAME:-}" ]; then
  on() { ip netns exec "$prefix-ctl" ssh "${ssh_options[@]}" "root@$subnet.$1" "${@:2}"; }
  state() { tern -s "$(url "$1")" stream info E2E --json 2>&1 |
    "$python" -c 'import json,sys; s=json.load(sys.stdin)["state"]; print(s["messages"], s["first_seq"], s["last_seq"])' 2>/dev/null; }
  before=$(state 11)
  pids_before="$(on 11 systemctl show -p MainPID --value tern) $(on 12 systemctl show -p MainPID --value tern)"
  kill -TERM "$(cat "$work/h3.pid")"
  for _ in $(seq 1 100); do kill -0 "$(cat "$work/h3.pid")" 2>/dev/null || break; sleep 0.1; done
  ip netns exec "$prefix-ctl" scp -q "${ssh_options[@]}" "$work/user.nk" "root@$subnet.14:/root/admin.nk"
  sed -e "s/^    h3: { ansible_host: $subnet.13 }/    h4: { ansible_host: $subnet.14 }/" "$work/inventory.yml" >"$work/inventory-h4.yml"
  started=$SECONDS
  if ip netns exec "$prefix-ctl" ansible-playbook -i "$work/inventory-h4.yml" "$collection/playbooks/replace.yml" \
       -e tern_replace_host=h4 -e tern_replace_dead_host=h3 \
       -e '{"tern_replace_cli_args": ["--nkey", "/root/admin.nk"]}' >"$work/replace-h4.log" 2>&1; then
    pass "replace.yml: h4 joined, h3 removed for good, every node and replica current ($((SECONDS - started)) s)"
  else
    tail -40 "$work/replace-h4.log"; fail "replace.yml (h4 for h3)"
  fi
  size=$(ip netns exec "$prefix-ctl" curl -s "http://$subnet.11:8222/jsz" 2>/dev/null |
    "$python" -c 'import json,sys; print(json.load(sys.stdin)["meta_cluster"]["cluster_size"])' 2>/dev/null)
  [ "$size" = 3 ] && pass "the meta group has 3 voters" || fail "meta group size $size"
  pids_after="$(on 11 systemctl show -p MainPID --value tern) $(on 12 systemctl show -p MainPID --value tern)"
  if on 11 grep -q "$subnet.14:6222" /etc/tern/tern.toml && on 12 grep -q "$subnet.14:6222" /etc/tern/tern.toml &&
     ! on 11 grep -q "$subnet.13:6222" /etc/tern/tern.toml && [ "$pids_before" = "$pids_after" ]; then
    pass "h1's and h2's routes list h4, not h3, without a restart"
  else
    fail "h1's and h2's routes (PIDs before $pids_before, after $pids_after)"
  fi
  after=$(state 14)
  replicas=$(tern -s "$(url 14)" stream info E2E --json 2>/dev/null | "$python" -c '
import json,sys
c=json.load(sys.stdin)["cluster"]
print(" ".join(sorted([c["leader"]] + [r["name"] for r in c.get("replicas", []) if r.get("current")])))' 2>/dev/null)
  if [ -n "$before" ] && [ "$after" = "$before" ] && [ "$replicas" = "h1 h2 h4" ]; then
    pass "every acknowledged message kept ($after), read through h4; replicas h1 h2 h4 current"
  else
    fail "the stream after h4 replaced h3 (before $before, after $after, current $replicas)"
  fi
fi

finish
