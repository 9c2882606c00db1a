#!/usr/bin/env bash
# Chaos: six small jobs (ps-sync, ps-async, all-reduce) on a localkube that fails 10% of
# requests, cuts every watch every 5 s and compacts its history every 10 s, while a driver
# SIGKILLs one training process of every job and the operator itself (e2e/chaos_driver.py says
# what is asserted). CHAOS_SEED=N repeats a run's random choices. First, as root, a job whose
# checkpoint folder is on a 16 MiB tmpfs that the driver fills mid-run and frees again.
# Usage: chaos_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"

start_localkube --run-pods \
  --image-map "kubetrain/=$BIN" --error-rate 0.1 --drop-watches-every 5s --compact-every 10s

# A small file system for the full-disk case (root only; skipped otherwise), unmounted on exit
# however the script ends.
FULL_DISK_DIR=""
unmount_full_disk() {
  if [[ -n "$FULL_DISK_DIR" ]]; then
    umount "$FULL_DISK_DIR" 2>/dev/null || umount -l "$FULL_DISK_DIR" 2>/dev/null || true
    rmdir "$FULL_DISK_DIR" 2>/dev/null || true
  fi
}
trap 'rc=$?; unmount_full_disk; (exit $rc); stop_localkube' EXIT
if [[ $(id -u) -eq 0 ]]; then
  FULL_DISK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-full-disk.XXXXXX")
  mount -t tmpfs -o size=16m,mode=0700 tmpfs "$FULL_DISK_DIR" || fail "cannot mount a tmpfs"
  export FULL_DISK_DIR
else
  echo "SKIP full-disk case: mounting a tmpfs needs root"
fi

step "CRD (retried: the server fails a share of requests)"
for _ in $(seq 20); do
  "$KUBECTL" apply -f deploy/crd/kubetrain.dev_trainingjobs.yaml >/dev/null 2>&1 && break
  sleep 0.5
done
for _ in $(seq 20); do
  "$KUBECTL" wait --for condition=established --timeout=20s crd/trainingjobs.kubetrain.dev \
    >/dev/null 2>&1 && break
  sleep 0.5
done

step "clean runs, then the same jobs under chaos"
python3 e2e/chaos_driver.py "$KUBECTL" "$BIN" "$LK_DIR" "$KUBECONFIG" ||
  { tail -40 "$LK_DIR/operator.log" || true; fail "chaos"; }
echo "PASS chaos e2e"
