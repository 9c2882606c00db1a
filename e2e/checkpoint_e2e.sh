#!/usr/bin/env bash
# Checkpoint storage end to end on localkube: a TrainingJob with spec.checkpoint
# (volumeClaimTemplate) gets its claim <job>-checkpoint, owned by the job, before its pods; the
# chief mounts it and resumes from step > 0 after the job is suspended and resumed (what Kueue
# does on preemption) and after its pod is deleted. A job without it gets the
# CheckpointsNotDurable warning and its chief says so in its log.
# Needs localkube to provision PersistentVolumeClaims (a claim's data kept across the pods that
# mount it): not registered in e2e/CMakeLists.txt until it does.
# Usage: checkpoint_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"

start_localkube_for_operator "$BIN"
k() { "$KUBECTL" "$@"; }

# job NAME EPOCHS [durable]: the example, short, checkpointing every 2 s; with "durable", on a
# claim the operator creates.
job() {
  sed -e "s/name: fashion-mnist/name: $1/" -e "s/--epochs=20/--epochs=$2/" \
      -e "s|- --seed=1|- --seed=1\n                - --checkpoint-every=2s|" \
      deploy/examples/fashion-mnist.yaml
  if [[ "${3:-}" == durable ]]; then
    cat <<'YAML'
  checkpoint:
    volumeClaimTemplate:
      spec:
        resources:
          requests: {storage: 1Gi}
YAML
  fi
}
step_of() { k get tj "$1" -o jsonpath='{.status.progress.step}' 2>/dev/null || true; }
# Waits (up to $2 s) until job $1 reports a step of at least $3.
wait_step() {
  local deadline=$((SECONDS + $2)) s
  while ((SECONDS < deadline)); do
    s=$(step_of "$1")
    [[ -n "$s" && "$s" -ge "$3" ]] && return 0
    k wait --for=jsonpath='{.status.progress.step}' --timeout=5s "tj/$1" >/dev/null 2>&1 || true
  done
  fail "$1 did not reach step $3 (at ${s:-none})"
}
# The global_step the chief of job $1 restored, from its log; fails unless it is > 0.
resumed_step() {
  local line
  k wait --for=condition=Ready --timeout=120s "pod/$1-worker-0" >/dev/null ||
    fail "the chief of $1 did not come back"
  for _ in $(seq 60); do
    line=$(k logs "$1-worker-0" 2>/dev/null | grep -E 'Restored the parameter servers from the latest checkpoint' || true)
    [[ -n "$line" ]] && break
    k wait --for=delete --timeout=2s "pod/$1-never" >/dev/null 2>&1 || true  # a 2 s pause on the API's clock
  done
  [[ -n "$line" ]] || { k logs "$1-worker-0" | tail -20; fail "the chief of $1 restored no checkpoint"; }
  k logs "$1-worker-0" | has 'Initialised the parameter servers' &&
    fail "the chief of $1 initialised the model afresh"
  local s
  s=$(sed -n 's/.*global_step=\([0-9]*\).*/\1/p' <<<"$line" | head -1)
  [[ -n "$s" && "$s" -gt 0 ]] || fail "the chief of $1 resumed from step ${s:-?}: $line"
  echo "$s"
}

step "CRD, RBAC and operator"
k apply -f deploy/crd/kubetrain.dev_trainingjobs.yaml >/dev/null
k wait --for condition=established --timeout=20s crd/trainingjobs.kubetrain.dev >/dev/null
k apply -f deploy/rbac/cluster-role.yaml >/dev/null
start_operator "$BIN"

step "the claim is made, owned by the job, and the chief mounts it"
job ck 3 durable | k apply -f - >/dev/null
k wait --for=jsonpath='{.metadata.name}'=ck-checkpoint --timeout=30s pvc/ck-checkpoint >/dev/null ||
  fail "no claim ck-checkpoint"
owner=$(k get pvc ck-checkpoint -o jsonpath='{.metadata.ownerReferences[0].name}')
[[ "$owner" == ck ]] || fail "the claim's owner is '$owner', not the job"
k get pod ck-worker-0 -o jsonpath='{.spec.volumes[*].persistentVolumeClaim.claimName}' |
  has ck-checkpoint || fail "the chief does not mount the claim"
k get events --field-selector reason=CheckpointsNotDurable -o name | has . &&
  fail "a job with spec.checkpoint was warned CheckpointsNotDurable"

step "suspend and resume: the chief resumes from its checkpoint"
wait_step ck 240 300
k patch tj ck --type=merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null
k wait --for=condition=Suspended --timeout=60s tj/ck >/dev/null || fail "ck was not suspended"
k wait --for=delete --timeout=60s pod/ck-worker-0 >/dev/null || fail "the chief's pod stayed"
k patch tj ck --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}' >/dev/null
s=$(resumed_step ck)
echo "resumed from step $s after suspend"

step "the chief's pod deleted: it resumes from its checkpoint"
wait_step ck 240 $((s + 200))
k delete pod ck-worker-0 --wait=true >/dev/null
s=$(resumed_step ck)
echo "resumed from step $s after the chief's pod was deleted"
k wait --for=condition=Succeeded --timeout=300s tj/ck >/dev/null || fail "ck did not succeed"

step "a job without durable storage is warned, and its chief says so"
job plain 1 | k apply -f - >/dev/null
k wait --for=condition=Ready --timeout=120s pod/plain-worker-0 >/dev/null || fail "no chief for plain"
k get events --field-selector reason=CheckpointsNotDurable -o jsonpath='{.items[*].message}' |
  has "plain-worker-0 and are lost when it is recreated" || fail "no CheckpointsNotDurable event"
k logs plain-worker-0 | has "Checkpoints are inside the pod and are lost when it is recreated" ||
  fail "the chief did not warn"

step "deleting the job deletes its claim (reclaimPolicy Delete)"
k delete tj ck --wait=true >/dev/null
k wait --for=delete --timeout=60s pvc/ck-checkpoint >/dev/null || fail "the claim outlived its job"
echo PASS
