#!/usr/bin/env bash
# Losing a node mid-job, as a user sees it with kubectl, on a 3-node localkube with real pods:
#  1. a node running a ps and a worker (not the chief's, which holds the local-path checkpoint
#     volume) fails: it turns Unknown and is tainted unreachable, its pods are evicted after
#     their toleration, the operator recreates them on another node, the chief refills the new
#     ps from its checkpoint (step > 0), the job Succeeds with the accuracy of the same job run
#     uninterrupted (`kubetrain run`, first), and the node
#     is Ready again once recovered;
#  2. the chief's own node fails: its checkpoints are on the shared-path class (network storage,
#     no node affinity), so the chief recreated on another node restores from them (step > 0)
#     and the job Succeeds with the uninterrupted run's accuracy;
#  3. a worker's node is partitioned for 20 s and healed: the job Succeeds, the node is Ready,
#     and no replica is left running twice (the partitioned node's kubelet stops the pods
#     deleted while it was cut off).
# Faults come from localkube's node fault API (POST /localkube/v1/nodes/<node>/fail|partition|
# recover), what pulling a machine's plug or cable does on a real cluster.
# Usage: nodeloss_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"
require_sandboxes "node faults (pods on separate nodes)"

# Short clocks so a lost node costs seconds, not minutes: the real defaults are a 40 s
# --node-monitor-grace-period (kube-controller-manager) and 300 s tolerations
# (DefaultTolerationSeconds admission); the kubelet heartbeats every 10 s by default.
GRACE=4
TOLERATION=4
start_localkube_for_operator "$BIN" --node-status-update-frequency 500ms \
  --node-monitor-grace-period "${GRACE}s" --default-toleration-seconds "$TOLERATION"
k() { "$KUBECTL" "$@"; }
node_fault() {  # node_fault NODE fail|partition|recover
  local out
  out=$(lk_curl -f -X POST "$LK_URL/localkube/v1/nodes/$1/$2") || fail "$2 $1: $out"
  has '"state"' <<<"$out" || fail "$2 $1: $out"
  echo "$2 $1: $out"
}
# Waits (up to $2 s) until pod $1 exists and is Ready.
pod_ready() {
  k wait --for=create --timeout="$2s" "pod/$1" >/dev/null &&
    k wait --for=condition=Ready --timeout="$2s" "pod/$1" >/dev/null
}
node_of() { k get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null || true; }
# Polls `$3...` every half second until it succeeds; fails with $2 after $1 seconds, showing
# the end of the job's pods' logs.
until_ok() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || { show_pods; fail "$what (after waiting)"; }
    sleep 0.5
  done
}
show_pods() {
  local p
  k get pods -o wide || true
  for p in $(k get pods -o name 2>/dev/null); do
    echo "--- $p"
    k logs "$p" 2>&1 | grep -v 'Saved checkpoint\|msg=progress' | tail -12 || true
  done
}
# The largest step (global_step, or a refill's checkpoint_step) of the lines of pod $1's log
# that match $2 (empty: none).
logged_step() {
  k logs "$1" 2>/dev/null | grep -E "$2" |
    sed -nE 's/.*(global_step|checkpoint_step)[=":]*([0-9]+).*/\2/p' | sort -n | tail -1
}
logged_step_above_0() { local s; s=$(logged_step "$1" "$2"); [[ -n "$s" && "$s" -gt 0 ]]; }
# The job's training processes of replica $2 index $3 running on this machine, whatever node.
processes_of() {  # processes_of JOB TYPE INDEX
  local pid n=0
  for pid in $(pgrep -f 'kubetrain-(worker|ps)' || true); do
    { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null |
      grep -cxE "KUBETRAIN_JOB_NAME=$1|KUBETRAIN_REPLICA_TYPE=$2|KUBETRAIN_REPLICA_INDEX=$3" |
      has -x 3 && n=$((n + 1))
  done
  echo "$n"
}
at_most_one_process() { [[ $(processes_of "$@") -le 1 ]]; }
# What processes_of JOB TYPE INDEX counts, one line each: pid, parent, age, host and program.
show_processes() {
  local pid
  for pid in $(pgrep -f 'kubetrain-(worker|ps)' || true); do
    { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null |
      grep -cxE "KUBETRAIN_JOB_NAME=$1|KUBETRAIN_REPLICA_TYPE=$2|KUBETRAIN_REPLICA_INDEX=$3" |
      has -x 3 || continue
    echo "pid $pid: $(ps -o ppid=,etime=,stat= -p "$pid" 2>/dev/null)" \
      "$({ tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -E '^HOSTNAME=')" \
      "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
  done
}
no_process() { [[ $(processes_of "$@") -eq 0 ]]; }
node_ready() { [[ $(k get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
# The taint eviction controller's event for pod $1.
evicted() {
  k get events -o jsonpath='{range .items[*]}{.reason} {.message}{"\n"}{end}' |
    has -x "TaintManagerEviction Marking for deletion Pod default/$1"
}
untainted() { ! k get node "$1" -o jsonpath='{.spec.taints[*].key}' | has unreachable; }
# How far below the uninterrupted run's test accuracy an interrupted job may end: a point, since
# the job re-draws its batches after a restart (e2e_checkpoint, restarting at once, allows half).
ACCURACY_SLACK=${ACCURACY_SLACK:-0.01}
succeeded() {  # succeeded JOB UNINTERRUPTED_ACCURACY: Succeeded, and within the slack of it
  k wait --for=condition=Succeeded --timeout=400s "tj/$1" >/dev/null ||
    { k describe tj "$1" | tail -30; k get pods -o wide; tail -40 "$LK_DIR/operator.log"; fail "$1 did not succeed"; }
  local acc
  acc=$(k get tj "$1" -o jsonpath='{.status.progress.accuracy}')
  python3 -c "import sys; sys.exit(0 if float('$acc' or 0) >= $2 - $ACCURACY_SLACK else 1)" ||
    fail "$1 succeeded with accuracy '$acc', below the uninterrupted run's $2 (slack $ACCURACY_SLACK)"
  echo "$1 Succeeded, accuracy $acc (uninterrupted: $2)"
}

# Pod templates: short grace periods (5 s, not 30) so a pod of a lost node is given up sooner.
TEMPLATE_HEAD='          terminationGracePeriodSeconds: 5'
container() {  # container COMMAND [ARGS...]
  local cmd=$1
  shift
  echo "          containers:"
  echo "            - name: kubetrain"
  echo "              image: kubetrain/worker:0.1.0-cpu"
  echo "              command: [\"$cmd\"]"
  [[ $# -gt 0 ]] && echo "              args: [$(IFS=,; echo "$*")]"
  echo "              resources: {requests: {cpu: 100m, memory: 256Mi}}"
}
checkpoint_claim() {  # checkpoint_claim [STORAGE_CLASS]
  echo "  checkpoint:"
  echo "    volumeClaimTemplate:"
  echo "      spec:"
  [[ -n "${1:-}" ]] && echo "        storageClassName: $1"
  echo "        accessModes: [${2:-ReadWriteOnce}]"
  echo "        resources: {requests: {storage: 1Gi}}"
}
# A ps-sync job: 1 ps, a chief and 1 worker. The chief runs on node-1 (where its local-path
# checkpoint volume is made); the ps and the worker anywhere but node-1.
# train_flags EPOCHS: the training both jobs run, checkpointing every second.
train_flags() {
  echo "--model=mlp --epochs=$1 --batch-size=64 --optimizer=momentum --lr=0.02 --seed=1" \
    "--checkpoint-every=1s"
}
# job_head NAME: a TrainingJob's lines down to its replicaSpecs key.
job_head() {
  printf 'apiVersion: kubetrain.dev/v1\nkind: TrainingJob\nmetadata: {name: %s}\nspec:\n' "$1"
  echo "  replicaSpecs:"
}
ps_job() {  # ps_job NAME EPOCHS
  local train
  train="--mode=ps-sync $(train_flags "$2")"
  local off_node1='          affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: NotIn, values: [node-1]}]}]}}}'
  cat <<YAML
$(job_head "$1")
    PS:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
$TEMPLATE_HEAD
$off_node1
$(container kubetrain-ps)
    Chief:
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:
$TEMPLATE_HEAD
          nodeSelector: {kubernetes.io/hostname: node-1}
$(container kubetrain-worker $train)
    Worker:
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:
$TEMPLATE_HEAD
$off_node1
$(container kubetrain-worker $train)
$(checkpoint_claim)
  runPolicy: {cleanPodPolicy: Running, backoffLimit: 5, restartScope: Pod}
YAML
}
# An all-reduce job of 2 workers (worker 0 the chief) with its checkpoints on shared-path. A
# peer lost with its node fails the survivor's collective after --collective-timeout (5 min by
# default; 15 s here), which restarts the job (restartScope Job).
allreduce_job() {  # allreduce_job NAME EPOCHS
  local train
  train="--mode=allreduce --communicator=gloo --collective-timeout=15s $(train_flags "$2")"
  cat <<YAML
$(job_head "$1")
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
$TEMPLATE_HEAD
$(container kubetrain-worker $train)
$(checkpoint_claim shared-path ReadWriteMany)
  runPolicy: {cleanPodPolicy: Running, backoffLimit: 5, restartScope: Job}
YAML
}

step "CRD, RBAC and operator"
deploy_operator "$BIN"
k wait --for=condition=Ready --timeout=60s node --all >/dev/null || fail "the nodes are not Ready"
k get sc shared-path -o jsonpath='{.provisioner} {.volumeBindingMode}{"\n"}'

step "the same jobs uninterrupted (kubetrain run, 3 epochs): the accuracy each must match"
# clean_accuracy NAME MANIFEST: the chief's test accuracy in `kubetrain run` of the manifest that
# MANIFEST (ps_job, allreduce_job) writes, which keeps its checkpoint claim as a folder.
clean_accuracy() {
  local log="$LK_DIR/clean-$1.log"
  "$2" "$1" 3 >"$LK_DIR/clean-$1.yaml"
  TMPDIR="$LK_DIR" "$BIN/kubetrain" run --bin-dir "$BIN" "$LK_DIR/clean-$1.yaml" >"$log" 2>&1 ||
    { tail -30 "$log" >&2; fail "kubetrain run of $1 failed"; }
  grep -o '{"event":"training_complete".*}' "$log" | tail -1 |
    python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["test_accuracy"])' ||
    fail "no chief summary in kubetrain run of $1"
}
CLEAN_PS=$(clean_accuracy clean-ps ps_job)
CLEAN_AR=$(clean_accuracy clean-ar allreduce_job)
echo "uninterrupted: ps-sync $CLEAN_PS, all-reduce $CLEAN_AR"

###############################################################################################
step "1. a node running a ps and a worker fails mid-job (the checkpoint volume's node survives)"
# node-3 cordoned while the job starts puts its ps and worker together on node-2.
k cordon node-3 >/dev/null
ps_job lost 3 | k apply -f - >/dev/null
for p in lost-ps-0 lost-worker-0 lost-chief-0; do
  pod_ready "$p" 120 || { k get pods -o wide; fail "$p is not Ready"; }
done
k uncordon node-3 >/dev/null
[[ $(node_of lost-ps-0) == node-2 && $(node_of lost-worker-0) == node-2 ]] ||
  { k get pods -o wide; fail "the ps and worker of lost are not both on node-2"; }
pv=$(k get pvc lost-checkpoint -o jsonpath='{.spec.volumeName}')
k get pv "$pv" -o jsonpath='{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}' |
  has -x node-1 || fail "the checkpoint volume of lost is not on node-1"
until_ok 180 "no checkpoint past step 0 in lost-chief-0's log" logged_step_above_0 lost-chief-0 'Saved checkpoint'
echo "checkpointed at step $(logged_step lost-chief-0 'Saved checkpoint')"
ps_uid=$(k get pod lost-ps-0 -o jsonpath='{.metadata.uid}')
node_fault node-2 fail
k wait --for=condition=Ready=Unknown --timeout=60s node/node-2 >/dev/null ||
  fail "node-2 did not turn Unknown"
k get node node-2 -o jsonpath='{.spec.taints[*].key}' | has node.kubernetes.io/unreachable ||
  fail "node-2 is not tainted unreachable"
k get nodes
for p in lost-ps-0 lost-worker-0; do
  until_ok 60 "$p was not evicted" evicted "$p"
done
# The replacements: new pods of the same names, on another node, Ready.
for p in lost-ps-0 lost-worker-0; do
  until_ok 120 "$p was not recreated off node-2" \
    bash -c "n=\$('$KUBECTL' get pod $p -o jsonpath='{.spec.nodeName}' 2>/dev/null); [[ -n \$n && \$n != node-2 ]]"
  pod_ready "$p" 120 || { k get pods -o wide; fail "the new $p is not Ready"; }
done
[[ $(k get pod lost-ps-0 -o jsonpath='{.metadata.uid}') != "$ps_uid" ]] || fail "lost-ps-0 is the old pod"
k get pods -o wide -l kubetrain.dev/job-name=lost
# The new ps came back empty: the chief refills it from its checkpoint (or, had the chief
# restarted, restores the parameter servers from it).
until_ok 120 "the chief of lost did not restore a checkpoint past step 0" \
  logged_step_above_0 lost-chief-0 'Refilled a parameter server|Restored the parameter servers'
k logs lost-chief-0 | grep -E 'Refilled a parameter server|Restored the parameter servers' | tail -1
succeeded lost "$CLEAN_PS"
node_fault node-2 recover
k wait --for=condition=Ready --timeout=60s node/node-2 >/dev/null || fail "node-2 is not Ready again"
until_ok 30 "node-2 kept its unreachable taint" untainted node-2
k get nodes

###############################################################################################
step "2. the chief's node fails: its checkpoints are on shared-path storage"
allreduce_job shared 3 | k apply -f - >/dev/null
k wait --for=create --timeout=30s pvc/shared-checkpoint >/dev/null || fail "no claim shared-checkpoint"
k wait --for=jsonpath='{.status.phase}'=Bound --timeout=30s pvc/shared-checkpoint >/dev/null ||
  fail "the shared-path claim was not bound before any pod"
pv=$(k get pvc shared-checkpoint -o jsonpath='{.spec.volumeName}')
[[ -z $(k get pv "$pv" -o jsonpath='{.spec.nodeAffinity}') ]] || fail "a shared-path volume has node affinity"
pod_ready shared-worker-0 120 || fail "no chief for shared"
until_ok 180 "no checkpoint past step 0 in shared-worker-0's log" logged_step_above_0 shared-worker-0 'Saved checkpoint'
chief_node=$(node_of shared-worker-0)
echo "checkpointed at step $(logged_step shared-worker-0 'Saved checkpoint') on $chief_node"
node_fault "$chief_node" fail
k wait --for=condition=Ready=Unknown --timeout=60s "node/$chief_node" >/dev/null ||
  fail "$chief_node did not turn Unknown"
until_ok 120 "the chief of shared was not recreated off $chief_node" \
  bash -c "n=\$('$KUBECTL' get pod shared-worker-0 -o jsonpath='{.spec.nodeName}' 2>/dev/null); [[ -n \$n && \$n != $chief_node ]]"
echo "the chief now runs on $(node_of shared-worker-0)"
until_ok 180 "the new chief of shared did not restore a checkpoint past step 0" \
  logged_step_above_0 shared-worker-0 'Restored the latest checkpoint'
echo "restored from step $(logged_step shared-worker-0 'Restored the latest checkpoint')"
succeeded shared "$CLEAN_AR"
node_fault "$chief_node" recover
k wait --for=condition=Ready --timeout=60s "node/$chief_node" >/dev/null ||
  fail "$chief_node is not Ready again"

###############################################################################################
step "3. a worker's node is partitioned for 20 s, then healed"
ps_job part 3 | k apply -f - >/dev/null
pod_ready part-worker-0 120 || fail "no worker for part"
until_ok 180 "no checkpoint past step 0 in part-chief-0's log" logged_step_above_0 part-chief-0 'Saved checkpoint'
worker_node=$(node_of part-worker-0)
node_fault "$worker_node" partition
k wait --for=condition=Ready=Unknown --timeout=20s "node/$worker_node" >/dev/null ||
  fail "$worker_node did not turn Unknown"
# The scenario itself: the partition lasts 20 s, whatever happens meanwhile.
sleep 20
k get pods -o wide -l kubetrain.dev/job-name=part
node_fault "$worker_node" recover
k wait --for=condition=Ready --timeout=60s "node/$worker_node" >/dev/null ||
  fail "$worker_node is not Ready again"
# One worker 0 at a time: a pod deleted while its node was cut off is stopped once it is back.
if ! (until_ok 30 "two processes of part's worker 0 run after the heal" \
  at_most_one_process part worker 0); then
  show_processes part worker 0
  fail "two processes of part's worker 0 run after the heal"
fi
succeeded part "$CLEAN_PS"
until_ok 30 "part's training processes outlived the job" no_process part worker 0
for t in ps chief; do
  until_ok 30 "part's $t outlived the job" no_process part "$t" 0
done
echo PASS
