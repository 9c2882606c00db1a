#!/usr/bin/env bash
# An elastic TrainingJob end to end on localkube with real pods (processes), RBAC on and the
# operator running as its service account: deploy/examples/fashion-mnist-elastic.yaml (1 ps, 2
# workers, minReplicas 1, maxReplicas 4) is scaled 2 -> 3 -> 1 -> 2 with `kubectl scale` while it
# trains, then one worker pod is deleted. Each change reaches the parameter servers' membership
# (the ps log), the chief and the ps run throughout (same pod uid, no restart), the job records
# a Scaled event per change and a WorkerLost event for the deleted pod, a scaled-down worker says
# its goodbye to the ps (which then logs "Worker left"), and it ends Succeeded
# with test accuracy >= 0.88. While it finishes, the all-reduce example, made elastic, runs
# beside it and is scaled 2 -> 3, one of its worker pods is deleted, and it is scaled 3 -> 2:
# its workers form their group again at each change, and it ends Succeeded with no restart.
# Usage: elastic_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"

start_localkube_for_operator "$BIN"
k() { "$KUBECTL" "$@"; }
uid() { k get pod "$1" -o jsonpath='{.metadata.uid}' 2>/dev/null || true; }
phase() { k get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true; }
members() {  # the ps's last count of members
  k logs el-ps-0 2>/dev/null | sed -n 's/.*msg="\(Membership changed\|Worker left\)".* members=\([0-9]*\).*/\2/p' |
    tail -1
}
wait_for() {  # wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds
  local seconds=$1 what=$2
  shift 2
  for _ in $(seq $((seconds * 5))); do
    "$@" && return 0
    sleep 0.2
  done
  diagnose_job tj el
  fail "$what (after ${seconds}s)"
}
running() { [[ "$(phase "$1")" == Running ]]; }
gone() { [[ -z "$(uid "$1")" ]]; }
members_are() { [[ "$(members)" == "$1" ]]; }
replaced() { [[ -n "$(uid "$1")" && "$(uid "$1")" != "$2" && "$(phase "$1")" == Running ]]; }

step "CRD, RBAC and operator (as its service account)"
deploy_operator "$BIN"

step "the elastic example, slowed to ~25 ms a step so that it trains while it is scaled"
# 5 epochs (~70 s at that pace): the scale steps below take about a third of that, and
# `kubetrain run` of the same 5 epochs ends at 0.8875.
sed -e "s/name: fashion-mnist-elastic/name: el/" -e "s/--epochs=10/--epochs=5/" \
  -e "s|- --seed=1|- --seed=1\n                - --inject-delay=20ms|" \
  deploy/examples/fashion-mnist-elastic.yaml | k apply -f - >/dev/null
wait_for 120 "both workers never joined the ps" members_are 2
chief=$(uid el-worker-0)
ps=$(uid el-ps-0)

step "kubectl scale 2 -> 3: worker-2 joins, nothing restarts"
k scale tj/el --replicas=3 | has "scaled" || fail "kubectl scale tj/el --replicas=3"
wait_for 60 "worker-2 never ran" running el-worker-2
wait_for 60 "the ps never counted 3 members" members_are 3

step "kubectl scale 3 -> 1: worker-1 and worker-2 leave"
k scale tj/el --replicas=1 >/dev/null
wait_for 60 "worker-2 was not removed" gone el-worker-2
wait_for 60 "worker-1 was not removed" gone el-worker-1
wait_for 60 "the ps never counted 1 member" members_are 1

step "kubectl scale 1 -> 2: worker-1 comes back"
k scale tj/el --replicas=2 >/dev/null
wait_for 60 "worker-1 never ran again" running el-worker-1
wait_for 60 "the ps never counted 2 members" members_are 2

step "a worker pod deleted mid-run is recreated; the job goes on"
k get tj el -o jsonpath='{.status.conditions[-1:].type}' | has -x Running ||
  { diagnose_job tj el; fail "the job was not Running before the pod delete"; }
lost=$(uid el-worker-1)
k delete pod el-worker-1 --wait=false >/dev/null
wait_for 90 "worker-1 was not recreated" replaced el-worker-1 "$lost"

# The ps's log now: cleanPodPolicy Running deletes the ps once the job has ended.
[[ "$(uid el-ps-0)" == "$ps" ]] || fail "the ps pod was replaced"
ps_log=$(k logs el-ps-0)
[[ $(grep -c 'msg="Initialised shard"' <<<"$ps_log") == 1 ]] || fail "the ps was initialised more than once"

step "all-reduce, beside el: the elastic all-reduce example scaled 2 -> 3 -> 2 while it trains"
# 4 epochs (~45 s), of which its scale steps take about a third.
sed -e "s/name: fashion-mnist-allreduce/name: ar/" -e "s/--epochs=20/--epochs=4/" \
  -e "s|^spec:|spec:\n  elastic: {minReplicas: 1, maxReplicas: 3}|" \
  -e "s|- --seed=1|- --seed=1\n                - --inject-delay=20ms|" \
  deploy/examples/fashion-mnist-allreduce.yaml | k apply -f - >/dev/null
group_size() {  # the last all-reduce group worker-0 formed
  k logs ar-worker-0 2>/dev/null | sed -n 's/.*msg="Formed the all-reduce group".* workers=\([0-9]*\).*/\1/p' | tail -1
}
group_is() { [[ "$(group_size)" == "$1" ]]; }
generations() { k logs ar-worker-0 2>/dev/null | grep -c 'msg="Formed the all-reduce group"' || true; }
generations_above() { (( $(generations) > $1 )); }
wait_for 120 "the first all-reduce group never formed" group_is 2
ar_chief=$(uid ar-worker-0)
k scale tj/ar --replicas=3 >/dev/null
wait_for 90 "the group never grew to 3" group_is 3
step "all-reduce: worker-2's pod deleted: the group goes on without it, then with its replacement"
before=$(generations)
lost=$(uid ar-worker-2)
k delete pod ar-worker-2 --wait=false >/dev/null
wait_for 90 "worker-2 was not recreated" replaced ar-worker-2 "$lost"
wait_for 90 "the group never re-formed without and with worker-2" generations_above $((before + 1))
wait_for 90 "the group never grew back to 3" group_is 3
step "all-reduce: kubectl scale 3 -> 2"
k scale tj/ar --replicas=2 >/dev/null
wait_for 90 "the group never shrank to 2" group_is 2
step "the job ends Succeeded with accuracy >= 0.875, the chief never restarted"
k wait --for=condition=Succeeded --timeout=400s tj/el || { diagnose_job tj el; fail "el did not succeed"; }
summary=$(k logs el-worker-0 | grep '"event":"training_complete"') || fail "no summary in the chief's log"
echo "$summary"
[[ "$(uid el-worker-0)" == "$chief" ]] || fail "the chief's pod was replaced"
events=$(k get events --field-selector involvedObject.name=el -o json)
python3 - "$summary" "$(k get tj el -o json)" "$events" "$ps_log" <<'PY' || { diagnose_job tj el; fail "the elastic job's outcome"; }
import json, re, sys
s, job, events, ps_log = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
assert s["test_accuracy"] >= 0.875, s
st = job["status"]
reasons = [c["reason"] for c in st["conditions"]]
assert "ClusterSpecChanged" not in reasons, reasons  # no job restart
for rs in st["replicaStatuses"].values():
    assert rs.get("restarts", 0) == 0, st["replicaStatuses"]
assert st["elastic"]["targetWorkers"] == 2, st["elastic"]
by_reason = {}
for e in events["items"]:
    by_reason.setdefault(e["reason"], []).append(e)
scaled = [e["message"] for e in by_reason.get("Scaled", [])]
for change in ("2 → 3", "3 → 1", "1 → 2"):
    assert any(change in m for m in scaled), (change, scaled)
lost = [e["message"] for e in by_reason.get("WorkerLost", [])]
assert any("el-worker-1" in m for m in lost), lost
assert "ClusterSpecChanged" not in by_reason, by_reason.keys()
counts = [int(m) for m in re.findall(r'msg="(?:Membership changed|Worker left)".* members=(\d+)', ps_log)]
assert 3 in counts and 1 in counts, counts
# A worker that stops tells the ps (its goodbye), so a sync step never waits out its timeout.
assert 'msg="Worker left"' in ps_log, ps_log[-2000:]
print("accuracy", s["test_accuracy"], "| Scaled:", scaled, "| WorkerLost:", lost,
      "| ps member counts:", counts)
PY
step "all-reduce: the job ends Succeeded, its chief never restarted"
k wait --for=condition=Succeeded --timeout=400s tj/ar || { k describe tj ar; k logs ar-worker-0 --tail=30; fail "ar did not succeed"; }
ar_summary=$(k logs ar-worker-0 | grep '"event":"training_complete"') || fail "no summary in ar's chief log"
echo "$ar_summary"
[[ "$(uid ar-worker-0)" == "$ar_chief" ]] || fail "ar's chief pod was replaced"
python3 - "$ar_summary" "$(k get tj ar -o json)" "$(generations)" <<'PY' || fail "the elastic all-reduce job's outcome"
import json, sys
s, job = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert s["test_accuracy"] >= 0.86, s
st = job["status"]
assert "ClusterSpecChanged" not in [c["reason"] for c in st["conditions"]], st["conditions"]
for rs in st["replicaStatuses"].values():
    assert rs.get("restarts", 0) == 0, st["replicaStatuses"]
print("all-reduce accuracy", s["test_accuracy"], "| generations:", sys.argv[3])
PY

grep -q "permission\|forbidden" "$LK_DIR/operator.log" && fail "the operator was refused: $(grep -m1 'forbidden' "$LK_DIR/operator.log")"
echo "PASS: elastic_e2e"
