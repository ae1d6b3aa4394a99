#!/bin/bash
# Runs inside the QEMU guest (nvme-qemu.sh): `tern nvme` against QEMU's
# emulated NVMe controller, then tern-server on what it carved. Prints one
# "PASS <what>" or "FAIL <what>" line per check; exits non-zero on the
# first failure.
set -uo pipefail
export PATH=/usr/local/bin:$PATH
export NVME_SHIM_CAPACITY=$((1024 << 20)) NVME_SHIM_POOL="2 3" NVME_SHIM_LIVE=1
shim=/usr/local/bin/nvme-shim
# The server's journal: 1 shard × 3 segments × 85 MiB + 1 MiB of device
# header = 256 MiB, the size `tern nvme` derives from this file.
cat > /tmp/tern.toml <<'TOML'
[jetstream]
journal_segments = 3
journal_segment_size = "85MiB"
TOML
sizing="-c /tmp/tern.toml --cores 0"

fail() { echo "FAIL $*"; exit 1; }
pass() { echo "PASS $*"; }

# nsid -> /dev/nvme0nK, through sysfs (kernel names shift).
device_of() {
  for block in /sys/block/nvme0n*; do
    [ "$(cat "$block/nsid")" = "$1" ] && { echo "/dev/$(basename "$block")"; return 0; }
  done
  return 1
}

echo "--- plan"
tern nvme plan /dev/nvme0 $sizing --nvme-cli $shim > plan.out 2>&1 || { cat plan.out; fail "plan"; }
cat plan.out
grep -q "plan: journal 268435456 bytes (new), block store 805306368 bytes (new)" plan.out || fail "plan sizes"
grep -q "detach-ns /dev/nvme0 --namespace-id=1 --controllers=0" plan.out || fail "plan detaches the factory namespace by NSID"
grep -q "create-ns /dev/nvme0 --nsze=65536 --ncap=65536 --flbas=4" plan.out || fail "plan creates the journal in the 4 KiB format"
pass "plan"

echo "--- dry run"
tern nvme carve /dev/nvme0 $sizing --nvme-cli $shim --dry-run > dry.out 2>&1 || { cat dry.out; fail "dry run"; }
[ "$(nvme list-ns /dev/nvme0 --output-format=json | jq -c '[.nsid_list[].nsid]')" = "[1]" ] || fail "dry run changed nothing"
pass "dry run changes nothing"

echo "--- carve without --yes"
tern nvme carve /dev/nvme0 $sizing --nvme-cli $shim > noyes.out 2>&1
[ $? = 2 ] && grep -q -- "--yes" noyes.out || fail "carve without --yes is refused"
pass "carve without --yes is refused"

echo "--- carve"
tern nvme carve /dev/nvme0 $sizing --nvme-cli $shim --yes > carve.out 2>&1 || { cat carve.out; fail "carve"; }
cat carve.out
journal=$(device_of 2) || fail "a block device for NSID 2"
store=$(device_of 3) || fail "a block device for NSID 3"
grep -q "^journal: $journal nsid=2 block_bytes=4096 bytes=268435456" carve.out || fail "carve reports the journal"
grep -q "^block store: $store nsid=3 block_bytes=4096 bytes=805306368" carve.out || fail "carve reports the block store"
[ "$(cat /sys/block/$(basename "$journal")/queue/logical_block_size)" = 4096 ] || fail "journal LBA 4096"
[ "$(cat /sys/block/$(basename "$store")/queue/logical_block_size)" = 4096 ] || fail "store LBA 4096"
[ ! -e /sys/block/nvme0n3 ] || fail "the factory namespace is gone"
dd if=/dev/urandom of=/tmp/block bs=4096 count=1 2>/dev/null
dd if=/tmp/block of="$journal" bs=4096 count=1 seek=100 oflag=direct 2>/dev/null || fail "O_DIRECT write"
dd if="$journal" of=/tmp/back bs=4096 count=1 skip=100 iflag=direct 2>/dev/null
cmp -s /tmp/block /tmp/back || fail "O_DIRECT read back"
dd if=/dev/zero of="$journal" bs=4096 count=1 seek=100 oflag=direct 2>/dev/null
pass "carve: journal $journal and store $store, 4096-byte blocks, O_DIRECT I/O"

echo "--- carve again"
tern nvme carve /dev/nvme0 $sizing --nvme-cli $shim --yes > again.out 2>&1 || { cat again.out; fail "second carve"; }
grep -q "^nothing to do" again.out || { cat again.out; fail "second carve changes nothing"; }
grep -q '^\$ ' again.out && fail "second carve ran no command"
pass "second carve changes nothing"

echo "--- tern-server on the carved namespaces"
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
mke2fs -q -F -t ext4 "$store" || fail "mkfs on the store namespace"
# ext4 asks for crc32c by alias, which busybox depmod does not map.
modprobe crc32c_generic 2>/dev/null
modprobe ext4 2>/dev/null
mkdir -p /mnt/store && mount -t ext4 "$store" /mnt/store || fail "mount the store namespace"
tern-server -c /tmp/tern.toml -js --journal_dir "$journal" --store_dir /mnt/store --cores 0 -p 4222 -m 8222 > server.log 2>&1 &
server=$!
for _ in $(seq 1 300); do grep -q "Server is ready" server.log && break; kill -0 $server 2>/dev/null || break; sleep 0.1; done
grep -q "Server is ready" server.log || { cat server.log; fail "tern-server starts on the raw journal"; }
grep -q "journal device $journal: formatted for 1 shard(s)" server.log || { cat server.log; fail "the journal namespace was formatted"; }
tern --server nats://127.0.0.1:4222 stream add RAW --subjects 'raw.>' --storage file --defaults > add.out 2>&1 || { cat add.out server.log; fail "stream add"; }
for index in 1 2 3; do
  tern --server nats://127.0.0.1:4222 pub raw.$index "message $index" > pub.out 2>&1 || { cat pub.out; fail "publish"; }
done
kill -9 $server; wait $server 2>/dev/null
tern-server -c /tmp/tern.toml -js --journal_dir "$journal" --store_dir /mnt/store --cores 0 -p 4222 -m 8222 > server2.log 2>&1 &
server=$!
for _ in $(seq 1 300); do grep -q "Server is ready" server2.log && break; kill -0 $server 2>/dev/null || break; sleep 0.1; done
grep -q "Server is ready" server2.log || { cat server2.log; fail "tern-server restarts after SIGKILL"; }
tern --server nats://127.0.0.1:4222 stream info RAW --json > info.out 2>&1 || { cat info.out; fail "stream info"; }
[ "$(jq .state.messages info.out)" = 3 ] || { cat info.out; fail "3 acknowledged messages after SIGKILL"; }
kill $server; wait $server 2>/dev/null
umount /mnt/store
pass "tern-server: raw journal on the NVMe namespace, store on the other; 3 acked messages survive SIGKILL"

echo "--- refusals"
printf 'TERNJDEV' | dd of="$journal" bs=8 count=1 conv=notrunc 2>/dev/null
tern nvme carve /dev/nvme0 --journal-size 128MiB --nvme-cli $shim --yes > refused.out 2>&1
[ $? = 1 ] && grep -q "holds a tern journal" refused.out || { cat refused.out; fail "a namespace holding a tern journal is refused"; }
[ "$(nvme list-ns /dev/nvme0 --output-format=json | jq -c '[.nsid_list[].nsid]')" = "[2,3]" ] || fail "nothing changed"
pass "a namespace holding a tern journal is not destroyed without --force"
tern nvme plan /dev/nvme0 $sizing > real.out 2>&1
[ $? = 1 ] && grep -q "reports no total capacity" real.out || { cat real.out; fail "QEMU's controller without the shim is refused cleanly"; }
pass "without the shim (tnvmcap 0): refused with a clear message"
echo "ALL-PASSED"
