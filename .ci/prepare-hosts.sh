#!/usr/bin/env bash
# Installs and downloads what the last CI steps need (QEMU 10, nvme-cli
# and a guest kernel for .ci/nvme/nvme-qemu.sh; Ansible, debootstrap,
# systemd-nspawn and a cached Debian base for ansible/tests/e2e.sh).
# .ci/run starts it in the background while the code builds; each of
# those scripts still installs what is missing on its own.
set -uo pipefail
cd "$(dirname "$0")/.."
TERN_NVME_PREPARE_ONLY=1 .ci/nvme/nvme-qemu.sh
TERN_E2E_PREPARE_ONLY=1 ansible/tests/e2e.sh
