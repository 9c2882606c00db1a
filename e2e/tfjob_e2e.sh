#!/usr/bin/env bash
# Kubeflow TFJobs served by the kubetrain operator, end to end on localkube with real pods
# (processes), RBAC on and the operator running as its service account with deploy/rbac's grants:
# kubectl apply of a TFJob in Kubeflow's dist-mnist shape (2 PS, 4 Workers) and of one with a
# Chief and Workers runs their containers (kubetrain-ps, kubetrain-worker, reading Kubeflow's
# TF_CONFIG) to Succeeded; `kubectl wait --for=condition=Succeeded tfjob/...`, `kubectl get
# tfjob` (State, Age) and `kubectl logs` work unchanged; the objects and status are Kubeflow's;
# kubectl delete removes what was made for the job.
# Usage: tfjob_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"

start_localkube_for_operator "$BIN"
k() { "$KUBECTL" "$@"; }

step "CRDs, RBAC and the operator with --tfjob (as its service account)"
deploy_operator "$BIN" --tfjob

step "the CRD's schema takes TFJob manifests whole (server-side dry run: nothing pruned)"
k create namespace kubeflow >/dev/null
for f in operator/api/testdata/tfjob/*.yaml e2e/testdata/tfjob-*.yaml; do
  kept=$(k create --dry-run=server -f "$f" -o json) || fail "$f: refused by the API server"
  python3 - "$f" "$kept" <<'PY' || fail "$f: the CRD changed it"
import json, sys, yaml
sent = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
# kubectl prints one JSON object per document.
decoder, text, kept = json.JSONDecoder(), sys.argv[2].strip(), []
while text:
    obj, end = decoder.raw_decode(text)
    kept += obj["items"] if obj.get("kind") == "List" else [obj]
    text = text[end:].strip()
assert len(kept) == len(sent), (len(sent), len(kept))
for s, k in zip(sent, kept):
    assert k["spec"] == s["spec"], (s["spec"], k["spec"])
PY
done

step "Kubeflow's dist-mnist shape: 2 PS, 4 Workers, worker 0 decides"
k apply -f e2e/testdata/tfjob-dist-mnist.yaml | has "tfjob.kubeflow.org/dist-mnist created" ||
  fail "kubectl apply of the TFJob"
k wait --for=condition=Succeeded --timeout=300s tfjob/dist-mnist ||
  { diagnose_job tfjob dist-mnist; fail "dist-mnist did not succeed"; }
summary=$(k logs dist-mnist-worker-0 | grep '"event":"training_complete"') ||
  fail "no summary in worker 0's log"
echo "$summary"
table=$(k get tfjob dist-mnist)
echo "$table"
has -E "^NAME +STATE +AGE" <<<"$table" || fail "kubectl get tfjob: not Kubeflow's columns"
has -E "^dist-mnist +Succeeded " <<<"$table" || fail "kubectl get tfjob: State is not Succeeded"
python3 - "$summary" "$(k get tfjob dist-mnist -o json)" \
  "$(k get pod dist-mnist-worker-0 -o json)" <<'PY' || fail "TFJob status or objects"
import json, sys
s, job, pod = (json.loads(a) for a in sys.argv[1:4])
assert s["test_accuracy"] >= 0.75, s
st = job["status"]
reasons = [c["reason"] for c in st["conditions"]]
assert reasons[0] == "TFJobCreated" and reasons[-1] == "TFJobSucceeded", reasons
assert "TFJobRunning" in reasons, reasons
for f in ("startTime", "completionTime", "lastReconcileTime"):
    assert f in st, (f, st)
assert set(st["replicaStatuses"]) == {"PS", "Worker"}, st["replicaStatuses"]
assert st["replicaStatuses"]["Worker"]["succeeded"] >= 1, st["replicaStatuses"]
# The chief's final summary (its termination message, from the tensorflow container) in status.
assert abs(st["progress"]["accuracy"] - s["test_accuracy"]) < 1e-9, (st.get("progress"), s)
labels = pod["metadata"]["labels"]
want = {"training.kubeflow.org/job-name": "dist-mnist", "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0", "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/job-role": "master"}
assert want.items() <= labels.items(), labels
owner = pod["metadata"]["ownerReferences"][0]
assert (owner["kind"], owner["name"]) == ("TFJob", "dist-mnist"), owner
env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
tf = json.loads(env["TF_CONFIG"])
assert tf["cluster"]["ps"] == ["dist-mnist-ps-0.default.svc:2222", "dist-mnist-ps-1.default.svc:2222"], tf
assert tf["task"] == {"type": "worker", "index": 0} and tf["environment"] == "cloud", tf
print("status reasons", reasons, "| replicaStatuses", st["replicaStatuses"])
PY
# cleanPodPolicy Running: whatever still ran when the job ended (parameter servers, workers) is
# gone, and so are the per-replica Services; worker 0, finished, stays for its log.
live() {
  k get pods -l training.kubeflow.org/job-name=dist-mnist \
    -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}' | tr ' ' '\n' |
    grep -E "=(Running|Pending)$" || true
}
for _ in $(seq 150); do [[ -z "$(live)" ]] && break; sleep 0.2; done
[[ -z "$(live)" ]] || fail "pods outlived the job (cleanPodPolicy Running): $(live)"
k get pod dist-mnist-worker-0 >/dev/null || fail "worker 0 was deleted: its log is gone"
[[ -z "$(k get services -l training.kubeflow.org/job-name=dist-mnist -o name)" ]] ||
  fail "the job's Services outlived it"

step "a Chief and Workers (all-reduce), lower-case replica keys"
k apply -f e2e/testdata/tfjob-chief.yaml >/dev/null
k wait --for=condition=Succeeded --timeout=300s tfjob/multi-worker ||
  { diagnose_job tfjob multi-worker; fail "multi-worker did not succeed"; }
k logs multi-worker-chief-0 | has '"event":"training_complete"' || fail "no summary in the chief's log"
k get pod multi-worker-chief-0 -o jsonpath='{.metadata.labels.training\.kubeflow\.org/job-role}' |
  has -x master || fail "the chief pod lacks job-role: master"
k describe tfjob multi-worker | has -E "is created: .*pods=.*multi-worker-worker-1" ||
  fail "the Created condition does not name the pods"
k get tfjob

step "kubectl delete removes what was made for the jobs"
k delete tfjob dist-mnist multi-worker --wait --timeout=60s >/dev/null
for _ in $(seq 100); do
  left=$(k get pods,services,secrets -o name | grep -E "dist-mnist|multi-worker" || true)
  [[ -z "$left" ]] && break
  sleep 0.1
done
[[ -z "$left" ]] || fail "left after delete: $left"
grep -q "permission\|forbidden" "$LK_DIR/operator.log" && fail "the operator was refused: $(grep -m1 'forbidden' "$LK_DIR/operator.log")"
echo "PASS: tfjob_e2e"
