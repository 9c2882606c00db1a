#!/usr/bin/env bash
# Checkpoint storage end to end on localkube's nodes and claims (local-path, WaitForFirstConsumer):
# the examples as they are, spec.checkpoint included, with fewer epochs. The ps example's claim
# <job>-checkpoint is made, owned by the job, and mounted by the chief alone; the job is
# suspended and resumed (what Kueue does on preemption), its chief's pod deleted, and its Workers
# scaled 2 -> 3 while it trains (every pod restarts on the new cluster spec); the all-reduce
# example's chief pod is deleted (every rank restarts: the model is only in the checkpoint).
# After each, the chief logs the step > 0 it resumed from (from the checkpoint on the claim; after
# the ps job's chief pod alone is deleted, from the run its live ps hold), and each job ends
# Succeeded with a test accuracy no more than ACCURACY_SLACK (0.005, half a point, as e2e_chaos
# allows) below that of the same manifest run uninterrupted with `kubetrain run` (which keeps
# the claim as a folder of the run) at the start of this script (for the job scaled 2 -> 3, the
# lower of its 2- and 3-worker runs). A job without spec.checkpoint
# gets the CheckpointsNotDurable warning and its chief says so in its log; deleting a job
# deletes its claim (reclaimPolicy Delete).
# Usage: checkpoint_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"
ACCURACY_SLACK=${ACCURACY_SLACK:-0.005}
EPOCHS=${EPOCHS:-3}

start_localkube_for_operator "$BIN"
k() { "$KUBECTL" "$@"; }
diagnose() {  # diagnose JOB, on stderr
  {
    [[ -n "$1" ]] && k describe tj "$1"
    k get pods,pvc -o wide
    [[ -n "$1" ]] && k logs "$1-worker-0" 2>/dev/null | tail -20
    tail -30 "$LK_DIR/operator.log"
  } >&2 || true
}

# job NAME EXAMPLE: the example renamed, $EPOCHS epochs, a checkpoint every second.
job() {
  sed -e "s/^  name: .*/  name: $1/" -e "s/--epochs=[0-9]*/--epochs=$EPOCHS/" \
      -e "s|- --seed=1|- --seed=1\n                - --checkpoint-every=1s|" \
      "deploy/examples/$2.yaml"
}
# The chief summary's test_accuracy in the text on stdin.
accuracy_of() {
  grep -o '{"event":"training_complete".*}' | tail -1 |
    python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["test_accuracy"])'
}
uid() { k get pod "$1" -o jsonpath='{.metadata.uid}' 2>/dev/null || true; }
# Polls CHECK (a command) every 0.2 s until it succeeds or SECONDS pass: wait_for SECONDS WHAT CHECK...
wait_for() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || { diagnose "${JOB:-}"; fail "$what"; }
    sleep 0.2
  done
}
# The global_step of the last checkpoint the current chief of job $1 saved (0 when none).
saved_step() {
  k logs "$1-worker-0" 2>/dev/null | sed -n 's/.*msg="Saved checkpoint".* global_step=\([0-9]*\).*/\1/p' |
    tail -1 | grep . || echo 0
}
saved_beyond() { (($(saved_step "$1") > $2)); }
# The step the chief of job $1 (pod uid other than $2) restored, once it logged it: the line
# matching $3. Fails when it initialised the model afresh or ended without restoring.
resumed_step() {
  local job=$1 old=$2 pattern=$3 line=""
  replaced() { [[ -n "$(uid "$job-worker-0")" && "$(uid "$job-worker-0")" != "$old" ]]; }
  wait_for 120 "the chief of $job was not recreated" replaced
  logged() {
    local log
    log=$(k logs "$job-worker-0" 2>/dev/null || true)
    line=$(grep -E "$pattern" <<<"$log" | head -1 || true)
    [[ -n "$line" ]] && return 0
    has -E 'Initialised the parameter servers|"event":"training_complete"' <<<"$log" && {
      diagnose "$job"
      fail "the chief of $job started again without restoring a checkpoint"
    }
    return 1
  }
  wait_for 180 "the chief of $job logged no restore" logged
  local s
  s=$(sed -n 's/.*global_step=\([0-9]*\).*/\1/p' <<<"$line")
  [[ -n "$s" && "$s" -gt 0 ]] || fail "the chief of $job resumed from step ${s:-?}: $line"
  echo "$s"
}
RESTORED_PS='msg="(Restored the parameter servers from the latest checkpoint|Resuming the run the parameter servers hold)"'
RESTORED_CKPT_PS='msg="Restored the parameter servers from the latest checkpoint"'
RESTORED_CKPT_AR='msg="Restored the latest checkpoint"'
# Fails unless job $1 Succeeded with an accuracy at least $2 - ACCURACY_SLACK.
succeeded_as_well() {
  JOB=$1
  k wait --for=condition=Succeeded --timeout=300s "tj/$1" >/dev/null || { diagnose "$1"; fail "$1 did not succeed"; }
  local acc
  acc=$(k logs "$1-worker-0" | accuracy_of) || fail "no summary in the chief of $1's log"
  python3 - "$acc" "$2" "$ACCURACY_SLACK" <<'PY' || fail "$1: accuracy $acc, uninterrupted $2"
import sys
acc, clean, slack = map(float, sys.argv[1:])
print(f"test accuracy {acc:.4f}; uninterrupted {clean:.4f} (at least {clean - slack:.4f})")
assert acc >= clean - slack
PY
}

step "the same manifests uninterrupted (kubetrain run, $EPOCHS epochs): the accuracy to match"
# clean_accuracy EXAMPLE [WORKERS]: the test accuracy of `kubetrain run` of the job (with WORKERS
# Worker replicas instead of 2).
clean_accuracy() {
  local log="$LK_DIR/clean-$1-${2:-2}.log" acc
  job "clean" "$1" | sed "s/replicas: 2/replicas: ${2:-2}/" >"$LK_DIR/clean-$1.yaml"
  TMPDIR="$LK_DIR" "$BIN/kubetrain" run --bin-dir "$BIN" "$LK_DIR/clean-$1.yaml" >"$log" 2>&1 ||
    { tail -30 "$log" >&2; fail "kubetrain run of $1 failed"; }
  acc=$(accuracy_of <"$log") || fail "no chief summary from kubetrain run of $1"
  # spec.checkpoint's claim is a folder of the run.
  has '"checkpoint":"[^"]*/clean-checkpoint/clean/ckpt-' <"$log" ||
    fail "kubetrain run of $1 did not checkpoint into its claim's folder"
  echo "$acc"
}
clean_ps=$(clean_accuracy fashion-mnist)
# Scaled 2 -> 3, the ps job trains its last steps with a 1.5 times larger global batch (and takes
# 2/3 as many steps for them): its bar is the lower of the two sizes' uninterrupted runs.
clean_ps3=$(clean_accuracy fashion-mnist 3)
clean_ar=$(clean_accuracy fashion-mnist-allreduce)
echo "uninterrupted: ps-sync $clean_ps (3 workers: $clean_ps3), all-reduce $clean_ar"

step "CRD, RBAC and operator"
deploy_operator "$BIN"

step "the claim is made, owned by the job, and the chief alone mounts it"
JOB=ck
job ck fashion-mnist | k apply -f - >/dev/null
k wait --for=jsonpath='{.metadata.name}'=ck-checkpoint --timeout=30s pvc/ck-checkpoint >/dev/null ||
  fail "no claim ck-checkpoint"
owner=$(k get pvc ck-checkpoint -o jsonpath='{.metadata.ownerReferences[0].name}')
[[ "$owner" == ck ]] || fail "the claim's owner is '$owner', not the job"
claim_uid=$(k get pvc ck-checkpoint -o jsonpath='{.metadata.uid}')
exists() { [[ -n "$(uid "$1")" ]]; }
wait_for 60 "no chief pod for ck" exists ck-worker-0
k get pod ck-worker-0 -o jsonpath='{.spec.volumes[*].persistentVolumeClaim.claimName}' |
  has -x ck-checkpoint || fail "the chief does not mount the claim"
k get pod ck-worker-1 -o jsonpath='{.spec.volumes[*].persistentVolumeClaim.claimName}' |
  has ck-checkpoint && fail "worker 1 mounts the chief's claim"
k get events --field-selector reason=CheckpointsNotDurable -o name | has . &&
  fail "a job with spec.checkpoint was warned CheckpointsNotDurable"

step "suspend and resume: the chief resumes from its checkpoint"
wait_for 180 "ck saved no checkpoint beyond step 50" saved_beyond ck 50
old=$(uid ck-worker-0)
k patch tj ck --type=merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null
k wait --for=condition=Suspended --timeout=60s tj/ck >/dev/null || fail "ck was not suspended"
no_pods() { [[ -z "$(k get pods -l kubetrain.dev/job-name=ck -o name)" ]]; }
wait_for 60 "ck's pods stayed" no_pods
[[ "$(k get pvc ck-checkpoint -o jsonpath='{.metadata.uid}')" == "$claim_uid" ]] ||
  fail "suspending ck replaced or deleted its claim"
k patch tj ck --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}' >/dev/null
s1=$(resumed_step ck "$old" "$RESTORED_CKPT_PS")
echo "resumed from step $s1 after suspend"

step "the chief's pod deleted: it resumes at step > 0 (the run its ps hold)"
wait_for 180 "ck saved no checkpoint beyond step $s1" saved_beyond ck "$s1"
old=$(uid ck-worker-0)
k delete pod ck-worker-0 --wait=false >/dev/null
s2=$(resumed_step ck "$old" "$RESTORED_PS")
echo "resumed from step $s2 after the chief's pod was deleted"

step "Workers scaled 2 -> 3 while it trains: every pod restarts, the chief resumes from its checkpoint"
wait_for 180 "ck saved no checkpoint beyond step $s2" saved_beyond ck "$s2"
old=$(uid ck-worker-0)
k scale tj/ck --replicas=3 | has scaled || fail "kubectl scale tj/ck --replicas=3"
s3=$(resumed_step ck "$old" "$RESTORED_CKPT_PS")
((s3 > s1)) || fail "after the replica change ck resumed from step $s3, not beyond $s1"
echo "resumed from step $s3 after the replica change"
k get events --field-selector reason=ClusterSpecChanged -o jsonpath='{.items[*].message}' |
  has "old=ps=1,worker=2 new=ps=1,worker=3" || fail "no ClusterSpecChanged event"
wait_for 60 "worker-2 never started" exists ck-worker-2
succeeded_as_well ck "$(python3 -c "print(min($clean_ps, $clean_ps3))")"
[[ "$(k get pvc ck-checkpoint -o jsonpath='{.metadata.uid}')" == "$claim_uid" ]] ||
  fail "ck's claim was replaced while it ran"

step "the all-reduce example's chief pod deleted: every rank restarts from the checkpoint"
JOB="ar"
job ar fashion-mnist-allreduce | k apply -f - >/dev/null
wait_for 60 "no chief pod for ar" exists ar-worker-0
wait_for 180 "ar saved no checkpoint beyond step 50" saved_beyond ar 50
old=$(uid ar-worker-0)
k delete pod ar-worker-0 --wait=false >/dev/null
s=$(resumed_step ar "$old" "$RESTORED_CKPT_AR")
echo "resumed from step $s after the chief's pod was deleted"
succeeded_as_well ar "$clean_ar"

step "a job without durable storage is warned, and its chief says so"
JOB=plain
job plain fashion-mnist | sed '/^  checkpoint:/,/^  runPolicy:/{/^  runPolicy:/!d}' |
  k apply -f - >/dev/null
k get pvc plain-checkpoint >/dev/null 2>&1 && fail "a job without spec.checkpoint got a claim"
k wait --for=condition=Ready --timeout=120s pod/plain-worker-0 >/dev/null || fail "no chief for plain"
k get events --field-selector reason=CheckpointsNotDurable -o jsonpath='{.items[*].message}' |
  has "plain-worker-0 and are lost when it is recreated" || fail "no CheckpointsNotDurable event"
warned() { k logs plain-worker-0 2>/dev/null | has "Checkpoints are inside the pod and are lost when it is recreated"; }
wait_for 60 "the chief did not warn" warned

step "deleting a job deletes its claim (reclaimPolicy Delete)"
k delete tj ck ar plain --wait=true >/dev/null
k wait --for=delete --timeout=60s pvc/ck-checkpoint pvc/ar-checkpoint >/dev/null 2>&1 ||
  [[ -z "$(k get pvc -o name)" ]] || fail "a claim outlived its job: $(k get pvc -o name)"
echo PASS
