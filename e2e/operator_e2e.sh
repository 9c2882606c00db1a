#!/usr/bin/env bash
# The operator end to end on localkube with real pods (processes), RBAC on and the operator
# running as its service account with only deploy/rbac's grants: kubectl apply of a
# TrainingJob runs kubetrain-ps and kubetrain-worker pods to Succeeded; the example passes Pod
# Security "restricted" in a namespace that enforces it; a ps killed mid-training
# is restarted and refilled by the chief; restarting the operator mid-job creates no duplicates;
# an all-reduce job (no ps) survives a killed worker by restarting and resuming from the chief's
# checkpoint; deleting the job collects its pods and Service.
# Usage: operator_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"

start_localkube_for_operator "$BIN"
k() { "$KUBECTL" "$@"; }

# The examples keep their checkpoints on a claim of the job's own (spec.checkpoint), provisioned
# by localkube's local-path class on the node the chief lands on, as on a cluster: a pod's own
# /tmp goes with it.
# A short job: 1 ps, 2 workers, fast enough for CI.
job() {  # job NAME EPOCHS
  sed -e "s/name: fashion-mnist/name: $1/" -e "s/--epochs=20/--epochs=$2/" \
      -e "s|- --seed=1|- --seed=1\n                - --checkpoint-every=2s|" \
      deploy/examples/fashion-mnist.yaml
}
# The pid of job $1's process matching pattern $2: other programs on the machine (tests run in
# parallel) may run kubetrain binaries too, so match the job name in the process's environment.
pid_of() {
  local pid
  for pid in $(pgrep -f "$2"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | has -x "KUBETRAIN_JOB_NAME=$1" && {
      echo "$pid"
      return 0
    }
  done
  return 1
}
step_of() { k get tj "$1" -o jsonpath='{.status.progress.step}' 2>/dev/null || true; }

step "CRD, RBAC and operator (as its service account)"
deploy_operator "$BIN"
denied=$("$KUBECTL" --kubeconfig "$OP_KUBECONFIG" get configmaps 2>&1 || true)
has "cannot list resource" <<<"$denied" || fail "the operator's token lists configmaps: RBAC is not enforced"

step "a job runs to Succeeded"
job fm 2 | k apply -f - >/dev/null
k wait --for=condition=Succeeded --timeout=240s tj/fm || { k describe tj fm; k get pods; tail -40 "$LK_DIR/operator.log"; fail "fm did not succeed"; }
summary=$(k logs fm-worker-0 | grep '"event":"training_complete"') || fail "no summary in the chief's log"
echo "$summary"
python3 - "$summary" <<'PY' || fail "accuracy too low"
import json, sys
s = json.loads(sys.argv[1])
assert s["test_accuracy"] >= 0.80, s
PY
# The finished job's status carries the chief's final figures, not the last scrape of its
# metrics, and no pod of it is active any more.
status=$(k get tj fm -o json)
python3 - "$summary" "$status" <<'PY' || fail "status.progress is not the chief's final summary"
import json, sys
s, st = json.loads(sys.argv[1]), json.loads(sys.argv[2])["status"]
p = st["progress"]
assert p["step"] == s["steps"] and abs(p["accuracy"] - s["test_accuracy"]) < 1e-9, (p, s)
active = {t: r.get("active", 0) for t, r in st["replicaStatuses"].items()}
assert not any(active.values()), active
print("status.progress step=%d accuracy=%s, no active pods" % (p["step"], p["accuracy"]))
PY
k get tj fm

step "the example runs in a namespace that enforces Pod Security restricted"
k create namespace secure >/dev/null
k label namespace secure pod-security.kubernetes.io/enforce=restricted >/dev/null
refused=$(k -n secure run bare --image=kubetrain/worker:0.1.0 --restart=Never 2>&1 || true)
has "violates PodSecurity" <<<"$refused" || fail "a bare pod was admitted to a restricted namespace: $refused"
job sec 1 | k -n secure apply -f - >/dev/null
k -n secure wait --for=condition=Succeeded --timeout=240s tj/sec ||
  { k -n secure describe tj sec; k -n secure get pods; tail -40 "$LK_DIR/operator.log"; fail "sec did not succeed"; }
k -n secure delete tj sec --wait --timeout=60s >/dev/null

step "a ps killed mid-training is restarted, refilled, and the job still succeeds"
# Killed once the chief has initialised it and training is under way, whatever the machine's
# speed: waiting for a reported step lets a fast machine finish the job first.
job kill 3 | k apply -f - >/dev/null
for _ in $(seq 600); do
  k logs kill-worker-0 2>/dev/null | has "Initialised the parameter servers" && break; sleep 0.1
done
k logs kill-worker-0 | has "Initialised the parameter servers" || { k logs kill-worker-0 || true; fail "the chief of job kill did not initialise the ps"; }
sleep 0.3
ps_pid=$(pid_of kill "kubetrain-ps") || fail "no kubetrain-ps process of job kill (finished before a kill?)"
kill -9 "$ps_pid"
echo "killed kubetrain-ps pid $ps_pid at step $(step_of kill)"

step "restarting the operator mid-job creates no duplicates"
kill "$OP_PID"; wait "$OP_PID" 2>/dev/null || true
start_operator "$BIN"
k wait --for=condition=Succeeded --timeout=300s tj/kill || { k describe tj kill; k get pods; tail -60 "$LK_DIR/operator.log"; fail "kill did not succeed"; }
[[ -n "$(step_of kill)" ]] || fail "no progress reported for job kill"
restarts=$(k get tj kill -o jsonpath='{.status.replicaStatuses.PS.restarts}')
[[ "$restarts" == "1" ]] || fail "PS restarts=$restarts, want 1"
k logs kill-worker-0 | has "Refilled a parameter server" || fail "the chief did not refill the ps"
pods=$(k get pods -l kubetrain.dev/job-name=kill -o name | wc -l)
[[ "$pods" -le 3 ]] || fail "$pods pods for job kill: duplicates"
k describe tj kill | has "Restarted Pod pod=kill-ps-0" || fail "no restart event"

step "an all-reduce job (workers only): a worker killed mid-run restarts the job, which resumes"
# Gloo, as between the pods of a real cluster (pods share no /dev/shm).
ar_job() {  # ar_job NAME EPOCHS
  sed -e "s/name: fashion-mnist-allreduce/name: $1/" -e "s/--epochs=20/--epochs=$2/" \
      -e "s|- --seed=1|- --seed=1\n                - --communicator=gloo\n                - --checkpoint-every=500ms|" \
      deploy/examples/fashion-mnist-allreduce.yaml
}
# The worker is killed as soon as the chief has saved a checkpoint to resume from, not after a
# fixed step or sleep: on a fast machine the whole job takes a few seconds.
ar_job ar 2 | k apply -f - >/dev/null
for _ in $(seq 600); do
  k logs ar-worker-0 2>/dev/null | has "Saved checkpoint" && break; sleep 0.1
done
k logs ar-worker-0 | has "Saved checkpoint" || { k logs ar-worker-0 || true; fail "job ar saved no checkpoint"; }
worker_pid=$(pid_of ar "kubetrain-worker --mode=allreduce") || fail "no all-reduce worker of job ar (finished before a kill?)"
kill -9 "$worker_pid"
echo "killed an all-reduce worker (pid $worker_pid) at step $(step_of ar)"
k wait --for=condition=Succeeded --timeout=300s tj/ar || { k describe tj ar; k get pods; tail -60 "$LK_DIR/operator.log"; fail "ar did not succeed"; }
restarts=$(k get tj ar -o jsonpath='{.status.replicaStatuses.Worker.restarts}')
[[ "${restarts:-0}" -ge 1 ]] || fail "Worker restarts=$restarts, want >= 1"
k logs ar-worker-0 | has "Restored the latest checkpoint" || fail "the restarted chief did not resume"
k logs ar-worker-0 | has '"event":"training_complete"' || fail "no summary in the chief's log"
[[ -n "$(step_of ar)" ]] || fail "no progress reported for job ar"
k get tj ar

step "deleting a job collects its pods and Service"
k delete tj fm kill ar --wait --timeout=60s >/dev/null
for _ in $(seq 100); do
  [[ -z "$(k get pods,svc -l app.kubernetes.io/managed-by=kubetrain-operator -o name)" ]] && break
  sleep 0.1
done
[[ -z "$(k get pods,svc -l app.kubernetes.io/managed-by=kubetrain-operator -o name)" ]] || fail "objects left"
echo "PASS operator e2e"
