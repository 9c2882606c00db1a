#!/usr/bin/env bash
# Drives real kubectl 1.33 against a fresh localkube: discovery, OpenAPI validation, CRDs and
# printer columns, apply (client- and server-side), patches, labels, watch, wait, delete, the
# `kubectl create` generators (protobuf bodies), and
# with the kubelet a pod's logs, phase and termination.
# Usage: kubectl_e2e.sh LOCALKUBE KUBECTL [KUBETRAIN_CLI]
set -euo pipefail
LOCALKUBE=$1
KUBECTL_BIN=$2
KUBETRAIN=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
source "$HERE/lib.sh"

HOSTS="${TMPDIR:-/tmp}/lk-hosts-$$"
LK_CLEANUP=("$HOSTS")
start_localkube --run-pods --hosts-file "$HOSTS"
k() { timeout 60 "$KUBECTL_BIN" --cache-dir "$LK_DIR/cache" "$@"; }
# Runs kubectl expecting failure; prints its output (and a marker if it unexpectedly succeeded).
kerr() {
  if k "$@" >"$LK_DIR/kerr.out" 2>&1; then echo "UNEXPECTED SUCCESS"; fi
  cat "$LK_DIR/kerr.out"
}

step "discovery and version"
k version | has "Server Version: v1.33" || fail "kubectl version did not show the server"
k api-resources | has -E "^deployments +deploy +apps/v1 +true +Deployment" ||
  fail "api-resources lacks deployments"

step "namespace"
k create namespace e2e >/dev/null || fail "create namespace"
k get ns e2e -o jsonpath='{.status.phase}' | has -x Active || fail "namespace not Active"
kerr create namespace e2e | has "AlreadyExists" || fail "second create did not say AlreadyExists"

step "CRD"
k apply -f "$ROOT/deploy/crd/kubetrain.dev_trainingjobs.yaml" | has created || fail "CRD apply"
k wait --for condition=established --timeout=20s crd/trainingjobs.kubetrain.dev >/dev/null ||
  fail "CRD not established"

step "TrainingJob apply, get, printer columns, describe"
k -n e2e apply -f "$ROOT/deploy/examples/fashion-mnist.yaml" | has "trainingjob.kubetrain.dev/fashion-mnist created" ||
  fail "TrainingJob apply"
k -n e2e get tj fashion-mnist -o yaml > "$LK_DIR/tj.yaml"
grep -q "cleanPodPolicy: Running" "$LK_DIR/tj.yaml" || fail "get -o yaml lacks spec"
grep -q "generation: 1" "$LK_DIR/tj.yaml" || fail "generation not 1"
k -n e2e get tj > "$LK_DIR/tj.txt"
head -1 "$LK_DIR/tj.txt" | has -E "^NAME +STATE +STEP +ACCURACY +AGE" ||
  fail "printer columns missing: $(head -1 "$LK_DIR/tj.txt")"
k -n e2e get tj -o wide | sed -n 1p | has WORKERS || fail "-o wide lacks the priority-1 column"
k -n e2e describe tj fashion-mnist | has "Replica Specs" || fail "describe"
k -n e2e apply -f "$ROOT/deploy/examples/fashion-mnist.yaml" | has unchanged ||
  fail "second apply was not unchanged"
sed 's/replicas: 2/replicas: 3/' "$ROOT/deploy/examples/fashion-mnist.yaml" | k -n e2e apply -f - |
  has configured || fail "changed apply was not configured"
[[ $(k -n e2e get tj fashion-mnist -o jsonpath='{.metadata.generation}') == 2 ]] ||
  fail "generation did not bump on a spec change"
k -n e2e apply --server-side -f "$ROOT/deploy/examples/fashion-mnist.yaml" | has "serverside-applied" ||
  fail "server-side apply"
[[ $(k -n e2e get tj fashion-mnist -o jsonpath='{.spec.replicaSpecs.Worker.replicas}') == 2 ]] ||
  fail "server-side apply did not set replicas back to 2"

step "schema validation"
sed 's/cleanPodPolicy: Running/cleanPodPolicy: Sometimes/' "$ROOT/deploy/examples/fashion-mnist.yaml" |
  sed 's/name: fashion-mnist/name: bad-job/' | kerr -n e2e apply -f - |
  has 'Unsupported value: "Sometimes"' || fail "enum violation not rejected"
sed 's/restartScope: Pod/restartScope: Pod\n    bogusField: 1/' "$ROOT/deploy/examples/fashion-mnist.yaml" |
  sed 's/name: fashion-mnist/name: bad-job/' | kerr -n e2e apply -f - |
  has 'unknown field "spec.runPolicy.bogusField"' || fail "unknown field not rejected"

step "status subresource and kubectl wait"
# kubectl wait sees the condition on its watch, or on its first read if it starts after the patch:
# either way it must return.
k -n e2e wait --for=condition=Succeeded --timeout=30s tj/fashion-mnist > "$LK_DIR/wait.out" 2>&1 &
WAIT_PID=$!
lk_curl -X PATCH -H "Content-Type: application/merge-patch+json" \
  "$LK_URL/apis/kubetrain.dev/v1/namespaces/e2e/trainingjobs/fashion-mnist/status" \
  -d '{"status":{"conditions":[{"type":"Running","status":"False"},{"type":"Succeeded","status":"True","reason":"ChiefSucceeded"}],"progress":{"step":1200,"accuracy":0.86}}}' \
  >/dev/null || fail "status patch"
wait $WAIT_PID || fail "kubectl wait: $(cat "$LK_DIR/wait.out")"
grep -q "condition met" "$LK_DIR/wait.out" || fail "kubectl wait output: $(cat "$LK_DIR/wait.out")"
k -n e2e get tj fashion-mnist | has -E "fashion-mnist +Succeeded +1200 +0.86" ||
  fail "columns after status: $(k -n e2e get tj fashion-mnist)"
[[ $(k -n e2e get tj fashion-mnist -o jsonpath='{.metadata.generation}') == 3 ]] ||
  fail "status write changed generation"

step "Deployment: merge and strategic patches, label"
k -n e2e apply -f "$HERE/testdata/deployment.yaml" | has created || fail "deployment apply"
k -n e2e patch deployment web -p '{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:1.28"}]}}}}' |
  has patched || fail "strategic patch"
[[ $(k -n e2e get deploy web -o jsonpath='{.spec.template.spec.containers[*].name}') == "app sidecar" ]] ||
  fail "strategic patch lost a container"
[[ $(k -n e2e get deploy web -o jsonpath='{.spec.template.spec.containers[0].ports[0].containerPort}') == 80 ]] ||
  fail "strategic patch lost the port"
k -n e2e patch deployment web --type merge -p '{"spec":{"replicas":3}}' | has patched || fail "merge patch"
k -n e2e patch deployment web --type json -p '[{"op":"replace","path":"/spec/replicas","value":4}]' |
  has patched || fail "json patch"
[[ $(k -n e2e get deploy web -o jsonpath='{.spec.replicas}') == 4 ]] || fail "replicas not 4"
sed 's/nginx:1.27/nginx:1.29/' "$HERE/testdata/deployment.yaml" | k -n e2e apply -f - | has configured ||
  fail "client-side apply over a patched deployment"
[[ $(k -n e2e get deploy web -o jsonpath='{.spec.template.spec.containers[0].image}') == nginx:1.29 ]] ||
  fail "apply did not update the image"
k -n e2e label deployment web tier=frontend | has labeled || fail "label"
k -n e2e get deploy -l 'tier in (frontend,backend),app=web' -o name | has -x deployment.apps/web ||
  fail "label selector list"
k -n e2e get deploy -l '!tier' -o name | has . && fail "!tier matched a labelled deployment"

step "dry runs"
k -n e2e apply --dry-run=server -f "$HERE/testdata/configmap.yaml" | has "server dry run" ||
  fail "server dry run"
kerr -n e2e get configmap settings | has NotFound || fail "dry run created the object"
if [[ -n "$KUBETRAIN" && -x "$KUBETRAIN" ]]; then
  "$KUBETRAIN" render "$ROOT/deploy/examples/fashion-mnist.yaml" | k apply --dry-run=client -f - >/dev/null ||
    fail "kubetrain render | kubectl apply --dry-run=client"
  "$KUBETRAIN" render "$ROOT/deploy/examples/fashion-mnist.yaml" | k apply --dry-run=server -f - >/dev/null ||
    fail "kubetrain render | kubectl apply --dry-run=server"
else
  echo "(kubetrain CLI not built: render dry-run step skipped)"
fi

step "watch"
k -n e2e get configmaps -w --request-timeout=20s > "$LK_DIR/watch.out" 2>&1 &
WATCH_PID=$!
# The watch is open once kubectl has printed the current list (its header at least).
for _ in $(seq 100); do grep -q NAME "$LK_DIR/watch.out" && break; sleep 0.1; done
k -n e2e apply -f "$HERE/testdata/configmap.yaml" >/dev/null
k -n e2e delete configmap settings --wait >/dev/null
for _ in $(seq 100); do grep -q "^settings" "$LK_DIR/watch.out" && break; sleep 0.1; done
kill $WATCH_PID 2>/dev/null || true
wait $WATCH_PID || true
grep -q "^settings" "$LK_DIR/watch.out" || fail "get -w saw no events: $(cat "$LK_DIR/watch.out")"

step "delete --wait and garbage collection"
k -n e2e delete deployment web --wait --timeout=20s | has deleted || fail "delete deployment"
kerr -n e2e get deploy web | has NotFound || fail "deployment still there"
OWNER_UID=$(k -n e2e get tj fashion-mnist -o jsonpath='{.metadata.uid}')
cat <<YAML | k -n e2e apply -f - >/dev/null
apiVersion: v1
kind: ConfigMap
metadata:
  name: owned
  ownerReferences:
  - {apiVersion: kubetrain.dev/v1, kind: TrainingJob, name: fashion-mnist, uid: $OWNER_UID, controller: true, blockOwnerDeletion: true}
data: {a: b}
YAML
k -n e2e delete tj fashion-mnist --wait --timeout=20s >/dev/null || fail "delete tj"
kerr -n e2e get configmap owned | has NotFound || fail "dependent not garbage collected"

step "pods under the kubelet"
k -n e2e apply -f "$HERE/testdata/pod-hello.yaml" >/dev/null || fail "pod apply"
k -n e2e wait --for=condition=Ready --timeout=20s pod/hello >/dev/null || fail "pod never Ready"
[[ $(k -n e2e get pod hello -o jsonpath='{.status.phase}') == Running ]] || fail "pod not Running"
POD_IP=$(k -n e2e get pod hello -o jsonpath='{.status.podIP}')
# As root each pod has its own network namespace on its node's bridge (198.18.0.0/15); otherwise
# pods share the host's network, each with a loopback address.
[[ $POD_IP == 198.1[89].* || ($(id -u) != 0 && $POD_IP == 127.*) ]] ||
  fail "pod IP $POD_IP is neither a sandbox nor a loopback address"
# --hosts-file: the cluster DNS names as a client outside every namespace sees them.
grep -q "^$POD_IP hello-0.greet.e2e.svc hello-0.greet.e2e.svc.cluster.local" "$HOSTS" ||
  fail "hosts file: $(cat "$HOSTS")"
for _ in $(seq 50); do k -n e2e logs hello | has tick && break; sleep 0.2; done
k -n e2e logs hello | has "hello from hello at $POD_IP" || fail "logs: $(k -n e2e logs hello)"
k -n e2e logs hello | has -x "kubetrain_ip=$POD_IP" || fail "KUBETRAIN_POD_IP not exported"
[[ $(k -n e2e logs hello --tail=1 | wc -l) == 1 ]] || fail "--tail=1"
timeout 6 "$KUBECTL_BIN" --cache-dir "$LK_DIR/cache" -n e2e logs -f hello > "$LK_DIR/follow.out" || true
[[ $(grep -c tick "$LK_DIR/follow.out") -ge 3 ]] || fail "logs -f did not stream: $(cat "$LK_DIR/follow.out")"
k get pods -A | has -E "e2e +hello +1/1 +Running" || fail "get pods -A: $(k get pods -A)"
PID=$(k -n e2e get pod hello -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's|localkube://||')
kill -0 "$PID" 2>/dev/null || fail "pod process $PID not running"
k -n e2e delete pod hello --wait --timeout=20s >/dev/null || fail "delete pod"
for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$PID" 2>/dev/null && fail "pod process $PID survived deletion"

step "kubectl create generators (protobuf bodies)"
# kubectl's typed generators write protobuf, not JSON; each object keeps what kubectl set.
expect() {  # OBJECT JSONPATH WANT
  local got
  got=$(k -n e2e get "$1" -o jsonpath="$2") || fail "get $1"
  [[ $got == "$3" ]] || fail "$1 $2: got '$got', want '$3'"
}
k -n e2e create serviceaccount gen-sa >/dev/null || fail "create serviceaccount"
k -n e2e create role gen-r --verb=get,list --resource=pods,deployments.apps >/dev/null ||
  fail "create role"
expect role/gen-r '{.rules[0].verbs}' '["get","list"]'
expect role/gen-r '{.rules[0].apiGroups}{.rules[0].resources}' '[""]["pods"]'
expect role/gen-r '{.rules[1].apiGroups}{.rules[1].resources}' '["apps"]["deployments"]'
k -n e2e create rolebinding gen-rb --role=gen-r --user=u --serviceaccount=e2e:gen-sa >/dev/null ||
  fail "create rolebinding"
expect rolebinding/gen-rb '{.roleRef.kind}/{.roleRef.name}' Role/gen-r
expect rolebinding/gen-rb '{.subjects[0].kind}/{.subjects[0].name}' User/u
expect rolebinding/gen-rb '{.subjects[1].kind}/{.subjects[1].namespace}/{.subjects[1].name}' \
  ServiceAccount/e2e/gen-sa
k create clusterrole gen-cr --verb=get --non-resource-url=/logs >/dev/null || fail "create clusterrole"
expect clusterrole/gen-cr '{.rules[0].verbs}{.rules[0].nonResourceURLs}' '["get"]["/logs"]'
k create clusterrolebinding gen-crb --clusterrole=gen-cr --group=g >/dev/null ||
  fail "create clusterrolebinding"
expect clusterrolebinding/gen-crb '{.roleRef.kind}/{.roleRef.name} {.subjects[0].kind}/{.subjects[0].name}' \
  "ClusterRole/gen-cr Group/g"
# replicas 0 is sent (a pointer field) and kept.
k -n e2e create deployment gen-d --image=busybox:1.36 --replicas=0 --port=8080 -- sleep 30 >/dev/null ||
  fail "create deployment"
expect deployment/gen-d '{.spec.replicas} {.spec.selector.matchLabels.app}' "0 gen-d"
expect deployment/gen-d '{.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].command}' \
  'busybox:1.36 ["sleep","30"]'
expect deployment/gen-d '{.spec.template.spec.containers[0].ports[0].containerPort}' 8080
k -n e2e create job gen-j --image=busybox:1.36 -- true >/dev/null || fail "create job"
expect job/gen-j '{.spec.template.spec.restartPolicy} {.spec.template.spec.containers[0].command}' \
  'Never ["true"]'
k -n e2e create service clusterip gen-svc --tcp=80:8080 >/dev/null || fail "create service clusterip"
expect service/gen-svc '{.spec.ports[0].port}:{.spec.ports[0].targetPort} {.spec.selector.app}' \
  "80:8080 gen-svc"
k -n e2e create service nodeport gen-np --tcp=81:http --node-port=30081 >/dev/null ||
  fail "create service nodeport"
expect service/gen-np '{.spec.type} {.spec.ports[0].targetPort} {.spec.ports[0].nodePort}' \
  "NodePort http 30081"
k -n e2e create service externalname gen-en --external-name=db.example.com >/dev/null ||
  fail "create service externalname"
expect service/gen-en '{.spec.type} {.spec.externalName}' "ExternalName db.example.com"
k -n e2e create poddisruptionbudget gen-pdb --selector=app=gen-d --min-available=1 >/dev/null ||
  fail "create poddisruptionbudget"
expect pdb/gen-pdb '{.spec.minAvailable} {.spec.selector.matchLabels.app}' "1 gen-d"
k -n e2e create poddisruptionbudget gen-pdb2 --selector=app=gen-d --max-unavailable=50% >/dev/null ||
  fail "create poddisruptionbudget --max-unavailable"
expect pdb/gen-pdb2 '{.spec.maxUnavailable}' "50%"
k -n e2e expose deployment gen-d --port=80 --target-port=8080 --name=gen-exp >/dev/null ||
  fail "expose deployment"
expect service/gen-exp '{.spec.ports[0].targetPort} {.spec.selector.app}' "8080 gen-d"
k -n e2e create token gen-sa --duration=20m | has -E '^[^.]+\.[^.]+\.[^.]+$' || fail "create token"
k delete clusterrolebinding gen-crb >/dev/null && k delete clusterrole gen-cr >/dev/null ||
  fail "delete the cluster-scoped generator objects"

step "namespace deletion"
k delete namespace e2e --wait --timeout=30s >/dev/null || fail "delete namespace"
kerr get ns e2e | has NotFound || fail "namespace still there"

echo "PASS: kubectl e2e"
