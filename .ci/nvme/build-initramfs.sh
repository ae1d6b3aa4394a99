#!/usr/bin/env bash
# build-initramfs.sh KROOT OUT TEST [SOURCE=DEST...]: a busybox initramfs
# for the QEMU NVMe test (see nvme-qemu.sh): the unpacked Debian kernel's
# NVMe, block and ext4 modules, bash, nvme-cli, jq, the guest test script
# (run as /test.sh) and each extra SOURCE file at DEST (with the shared
# libraries it links).
# /init mounts the pseudo filesystems, loads nvme, runs /test.sh and prints
# GUEST-TEST-RC=<status> on the serial console before powering off.
set -euo pipefail
kroot=$1 out=$2 test=$3
shift 3
kver=$(ls "$kroot/lib/modules")
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,etc,run,mnt,lib/modules/$kver/kernel}
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
copy_binary() {
  local binary=$1
  mkdir -p "$root$(dirname "$binary")"
  cp -L "$binary" "$root$binary"
  ldd "$binary" 2>/dev/null | grep -o '/[^ ]*' | while read -r library; do
    mkdir -p "$root$(dirname "$library")"
    cp -L "$library" "$root$library"
  done
}
rm -f "$root/bin/sh"
copy_binary /bin/bash
ln -sf bash "$root/bin/sh"
copy_binary /usr/sbin/nvme
copy_binary /usr/bin/jq
for directory in drivers/nvme block lib crypto arch/x86/crypto fs/ext4 fs/jbd2 fs/mbcache.ko; do
  if [ -e "$kroot/lib/modules/$kver/kernel/$directory" ]; then
    mkdir -p "$root/lib/modules/$kver/kernel/$(dirname "$directory")"
    cp -r "$kroot/lib/modules/$kver/kernel/$directory" "$root/lib/modules/$kver/kernel/$(dirname "$directory")/"
  fi
done
cp "$kroot/lib/modules/$kver"/modules.{builtin,order} "$root/lib/modules/$kver/"
/bin/busybox depmod -b "$root" "$kver"
cp "$test" "$root/test.sh"
for pair in "$@"; do
  source=${pair%%=*} destination=${pair#*=}
  mkdir -p "$root$(dirname "$destination")"
  cp -L "$source" "$root$destination"
  { ldd "$source" 2>/dev/null || true; } | { grep -o '/[^ ]*' || true; } | while read -r library; do
    mkdir -p "$root$(dirname "$library")"
    cp -L "$library" "$root$library"
  done
done
cat > "$root/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
modprobe nvme
for _ in $(seq 1 100); do [ -e /dev/nvme0 ] && break; sleep 0.1; done
/bin/bash /test.sh
echo "GUEST-TEST-RC=$?"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
