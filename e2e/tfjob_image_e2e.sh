#!/usr/bin/env bash
# TFJobs as TensorFlow users write them, run from the worker image (localkube --runtime=oci runs
# each pod from its image, in its own sandbox on one of 3 nodes): Kubeflow's dist-mnist shape (one image for PS and Worker, no
# `command`) and a one-replica TFJob (no TF_CONFIG) both reach Succeeded with a trained model,
# through the image's entrypoint; each pod ran the program of its role, and checkpointed under
# its own job's name. The operator runs as a local process with --tfjob.
# Skips (77) without root, buildah or the worker image (make images).
# Usage: tfjob_image_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"

WORKER_IMAGE=kubetrain/worker:0.1.0-cpu
[[ $(id -u) == 0 ]] || { echo "SKIP: the oci runtime needs root"; exit 77; }
command -v buildah >/dev/null || { echo "SKIP: no buildah (scripts/install-deps installs it)"; exit 77; }
buildah inspect --type image "$WORKER_IMAGE" >/dev/null 2>&1 ||
  { echo "SKIP: $WORKER_IMAGE is not built; run make images"; exit 77; }

start_localkube --run-pods --runtime oci
# shellcheck disable=SC2034  # start_operator (lib.sh) reads it
OP_KUBECONFIG=$KUBECONFIG
trap stop_all EXIT
k() { timeout 60 "$KUBECTL" --cache-dir "$LK_DIR/cache" "$@"; }

step "the CRDs, RBAC (not enforced: no --rbac) and the operator with --tfjob"
deploy_operator "$BIN" --tfjob

step "dist-mnist's shape and a one-replica TFJob, no command, from $WORKER_IMAGE"
started=$SECONDS
k apply -f e2e/testdata/tfjob-one-image.yaml >/dev/null
for job in one-image solo; do
  k wait --for=condition=Succeeded --timeout=300s "tfjob/$job" >/dev/null ||
    { diagnose_job tfjob "$job"; fail "$job did not succeed"; }
done
echo "both Succeeded in $((SECONDS - started)) s"
expect_sandboxed "$(k get pods -l training.kubeflow.org/job-name=one-image -o jsonpath="$PLACEMENT")"

step "each pod ran its role's program from the image, and the chiefs trained a model"
[[ $(k get pod one-image-ps-0 -o jsonpath='{.status.containerStatuses[0].containerID}') == buildah://* ]] ||
  fail "the ps pod did not run from its image"
k logs one-image-ps-0 | has "exec kubetrain-ps" || fail "the ps pod did not run kubetrain-ps: $(k logs one-image-ps-0 | head -5)"
for pod in one-image-worker-0 one-image-worker-1 solo-worker-0; do
  k logs "$pod" | has "exec kubetrain-worker" || fail "$pod did not run kubetrain-worker"
done
k logs solo-worker-0 | has "no TF_CONFIG: one process trains alone" || fail "solo: not one process"
for chief in one-image-worker-0 solo-worker-0; do
  summary=$(k logs "$chief" | grep '"event":"training_complete"') ||
    fail "no summary in $chief's log: $(k logs "$chief" | tail -5)"
  python3 - "$chief" "$summary" <<'PY' || fail "$chief: no trained model"
import json, sys
s = json.loads(sys.argv[2])
assert s["test_accuracy"] >= 0.7, s
print(sys.argv[1], "test_accuracy", s["test_accuracy"], "steps", s.get("global_step", s.get("steps")))
PY
  # KUBETRAIN_JOB_NAME: the chief checkpoints under its own job's name, not a shared "job".
  k logs "$chief" | has -E "kubetrain-[0-9]+/${chief%-worker-0}/checkpoints" ||
    fail "$chief did not checkpoint under its job's name: $(k logs "$chief" | grep -i checkpoint | head -3)"
done
k delete tfjob one-image solo --wait --timeout=60s >/dev/null
echo "PASS: tfjob_image_e2e"
