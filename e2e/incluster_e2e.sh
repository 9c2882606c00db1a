#!/usr/bin/env bash
# The cluster story from images, as on a real cluster: localkube runs pods from their images
# (--runtime=oci), each in its own sandbox on one of 3 nodes, with RBAC on; `helm install` of the
# chart with its default values starts the operator pod from
# kubetrain/operator:0.1.0 through its Deployment, and the operator finds the API server with the
# in-cluster config (the mounted ServiceAccount token, KUBERNETES_SERVICE_HOST/PORT; no
# --kubeconfig). `kubectl apply` of the example runs ps and worker pods from
# kubetrain/worker:0.1.0-cpu to Succeeded and `kubectl logs` shows the chief's summary; the
# authorization log shows the operator's ServiceAccount denied nothing. Then, with `delete` on
# pods taken out of the chart's ClusterRole, a finished job's cleanup is refused and the operator
# says so in its log and in a FailedDeletePod/FailedDeleteService event on the job, which still
# shows Succeeded.
# Skips (77) without root, buildah or the images (make images).
# Usage: incluster_e2e.sh LOCALKUBE KUBECTL HELM
set -euo pipefail
# shellcheck disable=SC2034  # LOCALKUBE is used by start_localkube (lib.sh)
LOCALKUBE=$1
KUBECTL=$2
HELM=$3
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source e2e/lib.sh

OPERATOR_IMAGE=kubetrain/operator:0.1.0
WORKER_IMAGE=kubetrain/worker:0.1.0-cpu
[[ $(id -u) == 0 ]] || { echo "SKIP: the oci runtime needs root"; exit 77; }
command -v buildah >/dev/null || { echo "SKIP: no buildah (scripts/install-deps installs it)"; exit 77; }
for image in "$OPERATOR_IMAGE" "$WORKER_IMAGE"; do
  buildah inspect --type image "$image" >/dev/null 2>&1 ||
    { echo "SKIP: $image is not built; run make images"; exit 77; }
done

NS=kubetrain-system
OP=kubetrain-operator
SA_USER=system:serviceaccount:$NS:$OP
AUTHZ_LOG=$(mktemp "${TMPDIR:-/tmp}/authz.XXXXXX")
LK_CLEANUP=("$AUTHZ_LOG")
start_localkube --run-pods --runtime oci --rbac --authz-log "$AUTHZ_LOG"
k() { timeout 60 "$KUBECTL" --cache-dir "$LK_DIR/cache" "$@"; }
private_helm_home
on_failure() {
  local rc=$?
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    diagnose_deployment k "$NS" "$OP" 40
    echo "--- events ---" >&2
    k get events -A >&2 || true
  fi
  (exit $rc)
  stop_localkube
}
trap on_failure EXIT

# job NAME: the example, one epoch, from the CPU worker image.
job() {
  sed -e "s/name: fashion-mnist/name: $1/" -e "s/--epochs=20/--epochs=1/" \
    -e "s|image: kubetrain/worker:0.1.0-cpu\$|image: $WORKER_IMAGE|" deploy/examples/fashion-mnist.yaml
}
# denials_of USER: how many requests of USER the authorizer refused.
denials_of() {
  python3 - "$AUTHZ_LOG" "$1" <<'PY'
import json, sys
print(sum(1 for l in open(sys.argv[1]) if (e := json.loads(l))["user"] == sys.argv[2]
          and e["decision"] == "forbid"))
PY
}

step "helm install: the operator pod runs from $OPERATOR_IMAGE with the in-cluster config"
started=$SECONDS
timeout 300 "$HELM" install kubetrain charts/kubetrain --namespace "$NS" --create-namespace \
  --wait --timeout 240s \
  >"$LK_DIR/install.out" 2>&1 || fail "helm install --wait: $(cat "$LK_DIR/install.out")"
pod=$(k -n "$NS" get pods -l app.kubernetes.io/name=kubetrain -o jsonpath='{.items[0].metadata.name}')
[[ -n "$pod" ]] || fail "no operator pod"
[[ $(k -n "$NS" get pod "$pod" -o jsonpath='{.status.containerStatuses[0].containerID}') == buildah://* ]] ||
  fail "the operator pod did not run from its image"
for _ in $(seq 150); do
  k -n "$NS" logs "$pod" 2>/dev/null | has "Caches synced" && break
  sleep 0.2
done
k -n "$NS" logs "$pod" | has "Caches synced" || fail "the operator's caches did not sync"
k -n "$NS" logs "$pod" | has -i "in-cluster" || fail "the operator did not use the in-cluster config"
# The default ports on the pod's own IP, in its own sandbox (network, IPC, PID) on its node.
pod_ip=$(k -n "$NS" get pod "$pod" -o jsonpath='{.status.podIP}')
[[ $pod_ip == 198.1[89].* ]] || fail "the operator pod's IP $pod_ip is not in the sandbox network"
curl -sf -m 5 "http://$pod_ip:8080/metrics" | has '^kubetrain_' ||
  fail "the operator's /metrics is not served on its pod IP $pod_ip:8080"
curl -sf -m 5 "http://$pod_ip:8081/readyz" >/dev/null || fail "/readyz on $pod_ip:8081"
echo "operator pod $pod ready in $((SECONDS - started)) s, serving metrics on $pod_ip:8080"

step "kubectl apply: ps and worker pods from $WORKER_IMAGE run the example to Succeeded"
started=$SECONDS
job fm | k apply -f - >/dev/null
k wait --for=condition=Succeeded --timeout=300s tj/fm >/dev/null || fail "tj/fm did not succeed"
[[ $(k get pod fm-worker-0 -o jsonpath='{.status.containerStatuses[0].containerID}') == buildah://* ]] ||
  fail "the worker pod did not run from its image"
summary=$(k logs fm-worker-0)
has '"event":"training_complete"' <<<"$summary" || fail "the chief's log has no summary: $summary"
echo "tj/fm Succeeded in $((SECONDS - started)) s; chief: $(grep training_complete <<<"$summary" | tail -1)"
expect_sandboxed "$(k get pods -l kubetrain.dev/job-name=fm -o jsonpath="$PLACEMENT")"
k delete tj fm --wait --timeout=60s >/dev/null

step "the operator's ServiceAccount was denied nothing"
denied=$(denials_of "$SA_USER")
python3 - "$AUTHZ_LOG" "$SA_USER" <<'PY'
import collections, json, sys
counts = collections.Counter()
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["user"] == sys.argv[2]:
        what = e.get("resource", e.get("path", "?")) + ("/" + e["subresource"] if "subresource" in e else "")
        counts[(e["verb"], what)] += 1
print("requests by %s:" % sys.argv[2])
for (verb, what), n in sorted(counts.items()):
    print("  %-7s %-28s %d" % (verb, what, n))
PY
[[ $denied == 0 ]] || fail "$denied requests of $SA_USER were denied: $(grep forbid "$AUTHZ_LOG" | head -5)"

step "without delete on pods, a finished job's cleanup is refused clearly"
role=$(k get clusterrole -o name | grep -E "/$OP\$|/kubetrain-operator$" | head -n1)
[[ -n "$role" ]] || fail "no operator ClusterRole"
k get "$role" -o json | python3 -c '
import json, sys
r = json.load(sys.stdin)
for rule in r["rules"]:
    if "pods" in rule.get("resources", []) and "" in rule.get("apiGroups", []):
        rule["verbs"] = [v for v in rule["verbs"] if v not in ("delete", "deletecollection", "*")]
print(json.dumps(r))' | k replace -f - >/dev/null
job nodel | k apply -f - >/dev/null
k wait --for=condition=Succeeded --timeout=300s tj/nodel >/dev/null || fail "tj/nodel did not succeed"
# refused_deletes: the FailedDelete* events on tj/nodel, one message per line.
refused_deletes() {
  k get events -o json | python3 -c '
import json, sys
for e in json.load(sys.stdin)["items"]:
    if e["involvedObject"].get("name") == "nodel" and e["reason"].startswith("FailedDelete"):
        print(e["reason"], e["message"])'
}
for _ in $(seq 100); do
  refused_deletes | has "cannot delete resource" && break
  sleep 0.2
done
events=$(refused_deletes)
has "cannot delete resource" <<<"$events" || fail "no FailedDelete* event on tj/nodel: $events"
k -n "$NS" logs "$pod" | has "cannot delete resource" || fail "the operator's log does not say why"
echo "event: $(head -n1 <<<"$events")"
[[ $(denials_of "$SA_USER") -gt 0 ]] || fail "no denial was logged"
echo "in-cluster e2e passed"
