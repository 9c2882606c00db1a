#!/usr/bin/env bash
# Cluster capacity as a user meets it, on a 3-node localkube with pod sandboxes (2 cpu a node)
# and the operator:
# 1. A job that does not fit waits: job A's three 2-cpu pods fill the nodes, so job B's pods (a
#    500m ps, two 1500m workers) stay Pending with PodScheduled=False and kube-scheduler's
#    FailedScheduling event ("0/3 nodes are available: 3 Insufficient cpu. ..."), as kubectl get
#    events and describe show it, and B is Created, not Running. As A's pods finish they free
#    their nodes: B's pods are bound and B trains.
# 2. kubectl drain of the node running B's worker-1 while B trains: the node is cordoned
#    (SchedulingDisabled), the pod is evicted through the Eviction API, the operator recreates it
#    on another node; kubectl uncordon makes the node schedulable again.
# 3. kubectl drain of the chief's node: the recreated chief stays Pending ("... node(s) had
#    volume node affinity conflict, ... node(s) were unschedulable"), since its checkpoint claim
#    (local-path) lives on that node; after uncordon it runs there again and resumes from its
#    checkpoint. B Succeeds without spending any of its backoffLimit on the evictions (voluntary
#    disruptions, not failures).
# Needs root and namespaces (pod sandboxes): skips (77) otherwise.
# Usage: capacity_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"

require_sandboxes "3 nodes of limited capacity (without them localkube runs one node)"

start_localkube_for_operator "$BIN" --node-capacity cpu=2,memory=8Gi,pods=110
k() { "$KUBECTL" "$@"; }

# The example job, short: NAME EPOCHS PS_CPU WORKER_CPU (each pod's request) [sed expressions...].
job() {
  local name=$1 epochs=$2 ps_cpu=$3 worker_cpu=$4
  shift 4
  # The PS template comes first in the example.
  sed -e "s/name: fashion-mnist/name: $name/" -e "s/--epochs=20/--epochs=$epochs/" \
      -e "0,/cpu: \"1\"/s//cpu: \"$ps_cpu\"/" -e "s/cpu: \"1\"/cpu: \"$worker_cpu\"/" "$@" \
      deploy/examples/fashion-mnist.yaml
}
# B checkpoints on a claim of its own (spec.checkpoint): local-path, bound where its chief lands.
CHECKPOINT='s|^spec:|spec:\n  checkpoint:\n    volumeClaimTemplate:\n      spec:\n        resources: {requests: {storage: 1Gi}}|'
EVERY_2S='s|- --seed=1|- --seed=1\n                - --checkpoint-every=2s|'

dump() {
  k get nodes || true
  k get tj -o wide || true
  k get pods -o wide || true
  k get events --sort-by=.lastTimestamp 2>/dev/null | tail -30 || true
  tail -40 "$LK_DIR/operator.log" || true
}
wait_for() {  # SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2
  local deadline=$((SECONDS + limit))
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || { dump; fail "timed out after $limit s: $what"; }
    sleep 0.2
  done
}
pods_of() { k get pods -l "kubetrain.dev/job-name=$1" -o name 2>/dev/null; }
count_pods() { [[ $(pods_of "$1" | wc -l) -eq $2 ]]; }
# NAME: every pod of the job is bound to a node (PodScheduled=True).
all_bound() {
  local s
  s=$(k get pods -l "kubetrain.dev/job-name=$1" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="PodScheduled")].status}{"\n"}{end}')
  [[ -n $s && -z $(grep -vx True <<<"$s") ]]
}
# NAME: the nodes its pods are bound to, one a line, sorted.
nodes_of() {
  k get pods -l "kubetrain.dev/job-name=$1" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort
}
conditions_of() { k get tj "$1" -o jsonpath='{.status.conditions[*].type}'; }
state_of() { k get tj "$1" -o jsonpath='{.status.conditions[-1:].type}'; }
pod_field() { k get pod "$1" -o jsonpath="$2" 2>/dev/null || true; }

step "CRD, RBAC and operator; 3 nodes of 2 cpu"
deploy_operator "$BIN"
cpus=$(k get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.allocatable.cpu}{" "}{end}')
[[ $cpus == "node-1=2 node-2=2 node-3=2 " ]] || fail "nodes and allocatable cpu: '$cpus', want 3 nodes of 2"

step "job A (three 2-cpu pods) fills the nodes"
job a 1 2 2 | k apply -f - >/dev/null
a_bound() { count_pods a 3 && all_bound a; }
wait_for 60 "A's 3 pods bound" a_bound
[[ $(nodes_of a | uniq | wc -l) -eq 3 ]] || fail "A's pods are not one a node: $(nodes_of a | tr '\n' ' ')"

step "job B (a 500m ps, two 1500m workers) does not fit: Pending, FailedScheduling, job Created"
# Two workers never share a node, so a node runs a worker and not the chief (drained below).
# B trains only while all three of its pods run (ps-sync), and must still be training when the
# second drain comes, after two drains' worth of evictions, restarts and checks: 6 epochs (2,808
# steps), about twice what it trains before that drain on 2 cores (1,411-1,471 steps in a run
# alone). With 3, workers that start a second sooner let B finish first.
job b 6 500m 1500m -e "$CHECKPOINT" -e "$EVERY_2S" | k apply -f - >/dev/null
WANT="0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
# Each pod: phase|node|PodScheduled status|reason|message, in one read (A is training meanwhile).
b_view() {
  k get pods -l kubetrain.dev/job-name=b -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase}|{.spec.nodeName}|{.status.conditions[?(@.type=="PodScheduled")].status}|{.status.conditions[?(@.type=="PodScheduled")].reason}|{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}{end}'
}
b_unschedulable() { [[ $(b_view | grep -c "|False|Unschedulable|") -eq 3 ]]; }
wait_for 30 "B's 3 pods PodScheduled=False" b_unschedulable
view=$(b_view)
events=$(k get events --field-selector reason=FailedScheduling \
  -o jsonpath='{range .items[*]}{.involvedObject.name} {.type}|{.source.component}|{.message}{"\n"}{end}')
a_state=$(state_of a)
echo "$view"
[[ $a_state != Succeeded ]] || fail "A finished before B's pods were read: A is too short for this machine"
for p in b-ps-0 b-worker-0 b-worker-1; do
  has -xF "$p Pending||False|Unschedulable|$WANT" <<<"$view" ||
    fail "$p: want 'Pending||False|Unschedulable|$WANT' (phase|node|PodScheduled|reason|message); pods: $view"
  has -xF "$p Warning|default-scheduler|$WANT" <<<"$events" ||
    fail "$p: no FailedScheduling event from default-scheduler '$WANT'; events: $events"
done
k describe pod b-worker-0 | has -F "FailedScheduling" || fail "kubectl describe pod shows no FailedScheduling"
table=$(k get events --field-selector involvedObject.name=b-worker-0)
has -E "Warning +FailedScheduling +pod/b-worker-0 +0/3 nodes are available: 3 Insufficient cpu\." <<<"$table" ||
  fail "kubectl get events shows no FailedScheduling row for b-worker-0: $table"
# The job waits as Kubeflow's do: Created, not Running; its pods exist, so they count as active.
[[ $(conditions_of b) == Created ]] || fail "B's conditions: '$(conditions_of b)', want only Created while its pods are Pending"
k get tj b | has -E "^b +Created" || { k get tj b; fail "kubectl get tj b shows no STATE Created"; }
[[ $(k get tj b -o jsonpath='{.status.replicaStatuses.Worker.active}') == 2 ]] || fail "B's Worker active is not 2"
[[ $(k get pvc b-checkpoint -o jsonpath='{.status.phase}') == Pending ]] ||
  fail "B's checkpoint claim is bound before its chief is scheduled (WaitForFirstConsumer)"
k get tj a b

step "A succeeds; its finished pods free the nodes and B's pods are bound"
k wait --for=condition=Succeeded --timeout=240s tj/a >/dev/null || { dump; fail "A did not succeed"; }
k wait --for=condition=PodScheduled --timeout=60s pod/b-ps-0 pod/b-worker-0 pod/b-worker-1 >/dev/null ||
  { dump; fail "B's pods were not bound once A ended"; }
k get events --field-selector involvedObject.name=b-worker-1,reason=Scheduled -o jsonpath='{.items[*].message}' |
  has "Successfully assigned default/b-worker-1 to node-" || fail "no Scheduled event for b-worker-1"
k wait --for=condition=Running --timeout=120s tj/b >/dev/null || { dump; fail "B is not Running"; }
k get pods -o wide

step "kubectl drain of the node running B's worker-1, mid-training"
# Drained once training is under way and the chief has saved a checkpoint (at its first step) to
# refill a ps from, should the ps share worker-1's node. The chief's node is kept: its checkpoint
# claim (local-path) pins the chief there, as on a cluster. In ps-sync the chief's steps wait
# for worker-1's gradients, so B cannot end before worker-1 is back.
training() { k logs b-worker-0 2>/dev/null | has 'Saved checkpoint'; }
wait_for 120 "B's chief saved its first checkpoint" training
node=$(pod_field b-worker-1 '{.spec.nodeName}')
chief_node=$(pod_field b-worker-0 '{.spec.nodeName}')
old_uid=$(pod_field b-worker-1 '{.metadata.uid}')
[[ -n $node && $node != "$chief_node" ]] || fail "worker-1 on '$node', the chief on '$chief_node'"
drained=$(k drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout=120s 2>&1) ||
  { echo "$drained"; dump; fail "kubectl drain $node failed"; }
echo "$drained"
has -F "evicting pod default/b-worker-1" <<<"$drained" || fail "drain did not evict b-worker-1 (Eviction API)"
has -F "pod/b-worker-1 evicted" <<<"$drained" || fail "drain did not report b-worker-1 evicted"
has -F "node/$node drained" <<<"$drained" || fail "drain did not finish"
[[ $(k get node "$node" -o jsonpath='{.spec.unschedulable}') == true ]] || fail "$node not cordoned"
k get node "$node" | has -E "^$node +Ready,SchedulingDisabled " || { k get node "$node"; fail "$node not Ready,SchedulingDisabled"; }
k get node "$node" -o jsonpath='{.spec.taints[*].key}' | has -F node.kubernetes.io/unschedulable ||
  fail "$node has no unschedulable taint"

step "the operator recreates worker-1 on another node"
new_bound() {
  local uid n
  uid=$(pod_field b-worker-1 '{.metadata.uid}')
  n=$(pod_field b-worker-1 '{.spec.nodeName}')
  [[ -n $uid && $uid != "$old_uid" && -n $n ]]
}
wait_for 60 "a new b-worker-1 bound" new_bound
new_node=$(pod_field b-worker-1 '{.spec.nodeName}')
[[ $new_node != "$node" ]] || fail "b-worker-1 was recreated on the drained node $node"
echo "b-worker-1: $node -> $new_node"
k wait --for=condition=Ready --timeout=60s pod/b-worker-1 >/dev/null || { dump; fail "the new b-worker-1 is not Ready"; }

step "kubectl uncordon $node"
k uncordon "$node" >/dev/null
[[ -z $(k get node "$node" -o jsonpath='{.spec.unschedulable}') ]] || fail "$node still cordoned"
k get node "$node" | has -E "^$node +Ready " || fail "$node not Ready after uncordon"
untainted() { ! k get node "$1" -o jsonpath='{.spec.taints[*].key}' | has unschedulable; }
wait_for 20 "$node's unschedulable taint gone" untainted "$node"

step "kubectl drain of the chief's node: its claim's node affinity keeps it Pending until uncordon"
# A local-path volume lives on one node: the recreated chief can run nowhere else, as on a
# cluster with node-local storage, and resumes from the checkpoints on it.
# Once training has moved on with the new worker-1 (steps wait for it): a checkpoint past step 1.
saved_step() {
  k logs b-worker-0 2>/dev/null | sed -n 's/.*msg="Saved checkpoint".*global_step=\([0-9]*\).*/\1/p' | tail -1
}
moved_on() { [[ $(saved_step) -gt 1 ]]; }
wait_for 60 "a checkpoint past step 1" moved_on
saved=$(saved_step)
old_chief=$(pod_field b-worker-0 '{.metadata.uid}')
drained=$(k drain "$chief_node" --ignore-daemonsets --delete-emptydir-data --timeout=120s 2>&1) ||
  { echo "$drained"; dump; fail "kubectl drain $chief_node failed"; }
echo "$drained"
has -F "pod/b-worker-0 evicted" <<<"$drained" || fail "drain did not evict the chief"
chief_pending() {
  [[ $(pod_field b-worker-0 '{.metadata.uid} {.status.conditions[?(@.type=="PodScheduled")].reason}') == *" Unschedulable" &&
     $(pod_field b-worker-0 '{.metadata.uid}') != "$old_chief" ]]
}
wait_for 60 "a new b-worker-0 unschedulable" chief_pending
why=$(pod_field b-worker-0 '{.status.conditions[?(@.type=="PodScheduled")].message}')
echo "b-worker-0: $why"
# The drained node is unschedulable; each of the other two is either full (Insufficient cpu) or
# holds room the chief's claim cannot follow it to, depending on whether the recreated ps and
# worker-1 hold it at that moment: both forms are kube-scheduler's.
[[ $why == "0/3 nodes are available: "* && $why == *"1 node(s) were unschedulable"* &&
   $why == *[12]" node(s) had volume node affinity conflict"* && $why == *". preemption: "* ]] ||
  fail "the recreated chief's PodScheduled message: '$why'"
k uncordon "$chief_node" >/dev/null
k wait --for=condition=PodScheduled --timeout=60s pod/b-worker-0 >/dev/null || { dump; fail "the chief was not bound after uncordon"; }
[[ $(pod_field b-worker-0 '{.spec.nodeName}') == "$chief_node" ]] || fail "the chief left its claim's node $chief_node"
resumed_step() {
  k logs b-worker-0 2>/dev/null |
    grep -E 'Restored the parameter servers from the latest checkpoint|Resuming the run the parameter servers hold' |
    sed -n 's/.*global_step=\([0-9]*\).*/\1/p' | head -1
}
resumed() { [[ -n $(resumed_step) ]]; }
wait_for 90 "the recreated chief resumed" resumed
echo "the chief resumed at step $(resumed_step) (checkpoint of step $saved saved before the drain)"
[[ $(resumed_step) -ge $saved ]] || fail "the chief resumed at step $(resumed_step), before its checkpoint of step $saved"

step "B succeeds; the evictions spent none of its backoffLimit"
k wait --for=condition=Succeeded --timeout=300s tj/b >/dev/null || { dump; fail "B did not succeed after the drains"; }
k logs b-worker-0 | has '"event":"training_complete"' || fail "no summary in B's chief log"
restarts=$(k get tj b -o jsonpath='{.status.replicaStatuses.Worker.restarts}/{.status.replicaStatuses.PS.restarts}')
[[ $restarts == / || $restarts == 0/0 || $restarts == 0/ || $restarts == /0 ]] ||
  fail "the drains counted as restarts: Worker/PS restarts=$restarts"
k get tj a b
wait_for 20 "$chief_node's unschedulable taint gone" untainted "$chief_node"
echo "PASS capacity e2e (${SECONDS}s)"
