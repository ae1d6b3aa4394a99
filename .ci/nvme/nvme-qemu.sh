#!/usr/bin/env bash
# nvme-qemu.sh [TERN_BIN_DIR]: `tern nvme` end to end against QEMU's
# emulated NVMe controller (TCG: KVM is not usable on these machines), and
# tern-server on the namespaces it carved. Installs what it needs when
# missing (QEMU 10 from bookworm-backports, nvme-cli, busybox-static, jq,
# cpio, and an unpacked Debian kernel for the guest), builds a busybox
# initramfs holding tern, tern-server, the nvme-cli shim and
# guest-test.sh, boots it with a factory namespace (NSID 1, 1 GiB,
# attached) and a pool of two detached namespaces (256 MiB and 768 MiB,
# what the plan creates), and passes when the guest prints ALL-PASSED.
#
# Facts behind it (../shared/OPS-TESTING.md): QEMU emulates id-ctrl,
# id-ns, attach/detach and Format NVM but not create-ns/delete-ns (0x4001),
# so the guest's nvme-shim emulates those two over the pool; everything
# else is the real controller.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../target/debug}
work=${TERN_NVME_WORK:-/tmp/tern-nvme-qemu}
mkdir -p "$work"

apt_install() {
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
}
if ! qemu-system-x86_64 --version 2>/dev/null | grep -q "version 10"; then
  if [ ! -f /etc/apt/sources.list.d/backports.sources ]; then
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    cat > /etc/apt/sources.list.d/backports.sources <<SOURCES
Types: deb
URIs: ${uri:-http://deb.debian.org/debian}
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    apt-get update -qq
  fi
  apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 >/dev/null; }
fi
for tool in nvme:nvme-cli busybox:busybox-static jq:jq cpio:cpio mke2fs:e2fsprogs; do
  command -v "${tool%%:*}" >/dev/null || apt_install "${tool#*:}"
done
[ -x /bin/busybox ] || apt_install busybox-static
if [ ! -d "$work/kroot/boot" ]; then
  package=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image/ {print $2; exit}')
  (cd "$work" && chmod 777 . && apt-get download -qq "$package" && dpkg-deb -x linux-image-*.deb kroot && rm -f linux-image-*.deb)
fi

# TERN_NVME_PREPARE_ONLY=1: install and download only (CI does it while
# the code builds).
[ -n "${TERN_NVME_PREPARE_ONLY:-}" ] && exit 0

# The guest's binaries, stripped (the initramfs lives in guest RAM).
for binary in tern tern-server; do
  strip -o "$work/$binary" "$bin/$binary"
done
"$here/build-initramfs.sh" "$work/kroot" "$work/initramfs.cpio.gz" "$here/guest-test.sh" \
  "$work/tern=/usr/local/bin/tern" "$work/tern-server=/usr/local/bin/tern-server" \
  "$here/nvme-shim=/usr/local/bin/nvme-shim" "$(command -v mke2fs)=/usr/local/bin/mke2fs"

# A factory namespace and the pool the plan will ask for (sparse files).
rm -f "$work"/*.img
truncate -s 1G "$work/factory.img"
truncate -s 256M "$work/pool-journal.img"
truncate -s 768M "$work/pool-store.img"
started=$SECONDS
timeout 240 qemu-system-x86_64 -M q35,accel=tcg -cpu max -m 1536 -smp 1 \
  -nodefaults -no-user-config -display none -serial stdio -no-reboot \
  -kernel "$(ls "$work"/kroot/boot/vmlinuz-* | head -1)" -initrd "$work/initramfs.cpio.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=3" \
  -device nvme-subsys,id=subsys0,nqn=nqn.2026-12.tern:carve \
  -device nvme,id=ctrl0,serial=TERN0001,subsys=subsys0 \
  -drive file="$work/factory.img",if=none,id=factory,format=raw -device nvme-ns,drive=factory,bus=ctrl0,nsid=1 \
  -drive file="$work/pool-journal.img",if=none,id=pool2,format=raw -device nvme-ns,drive=pool2,bus=ctrl0,nsid=2,detached=on \
  -drive file="$work/pool-store.img",if=none,id=pool3,format=raw -device nvme-ns,drive=pool3,bus=ctrl0,nsid=3,detached=on \
  > "$work/serial.log" 2>&1 || true
grep -E "^(PASS|FAIL) " "$work/serial.log" || true  # the guest's verdicts
echo "guest ran $((SECONDS - started)) s"
if grep -q "^ALL-PASSED" "$work/serial.log"; then
  echo "nvme-qemu: passed"
  rm -f "$work"/*.img
else
  echo "nvme-qemu: FAILED; the guest's console:"
  tail -60 "$work/serial.log"
  exit 1
fi
