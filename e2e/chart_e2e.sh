#!/usr/bin/env bash
# The kubetrain Helm chart against localkube with helm's default flags: install (CRD established;
# Deployment, RBAC, ServiceAccount, metrics Service created), the operator run with the arguments
# the chart rendered into its Deployment (as a local process, plus --kubeconfig and loopback
# metrics/health addresses; incluster_e2e.sh runs the Deployment's pod) takes the leader Lease,
# becomes ready and reconciles a TrainingJob; upgrade with workers=2 changes the Deployment's
# args; uninstall removes every templated object (the CRD, from crds/, stays: helm's rule). A
# TFJob CRD another installation made stops a default install with a message naming
# tfjob.installCRD=false, and that install then runs the operator with --tfjob beside it.
# Last, the plain manifests of deploy/ (namespace, RBAC both variants, Deployment, Service) apply.
# Usage: chart_e2e.sh LOCALKUBE KUBECTL HELM BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_helm_args "$@"

NS=kubetrain-system
REL=kubetrain
OP=kubetrain-operator  # the chart's operator name for release "kubetrain"

start_localkube
k() { timeout 30 "$KUBECTL" --cache-dir "$LK_DIR/cache" "$@"; }
private_helm_home
h() { timeout 90 "$HELM" "$@"; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

OP_PID=""
stop_operator() {
  if [[ -n "$OP_PID" ]] && kill -0 "$OP_PID" 2>/dev/null; then
    kill "$OP_PID"
    timeout 15 tail --pid="$OP_PID" -f /dev/null || kill -9 "$OP_PID"
  fi
  OP_PID=""
}
cleanup() {
  local rc=$?
  stop_operator
  if [[ $rc -ne 0 && -f "$LK_DIR/operator.log" ]]; then
    echo "--- operator log (last 30 lines) ---" >&2
    tail -n 30 "$LK_DIR/operator.log" >&2
  fi
  (exit $rc)
  stop_localkube
}
trap cleanup EXIT

# dep_json JSONPATH: a field of the installed operator Deployment.
dep_json() { k -n "$NS" get deployment "$OP" -o jsonpath="$1"; }
# The installed Deployment's container args, one per line.
deployment_args() {
  k -n "$NS" get deployment "$OP" -o jsonpath='{.spec.template.spec.containers[0].args}' |
    python3 -c 'import json, sys; print("\n".join(json.load(sys.stdin)))'
}

# start_operator: run build/bin/kubetrain-operator with the Deployment's args; the addresses go to
# loopback ports, --kubeconfig points at localkube, POD_NAMESPACE is what the Deployment's
# fieldRef would give (its own namespace). Waits for /readyz and the leader Lease.
start_operator() {
  local args=() a metrics_port health_port
  metrics_port=$(free_port)
  health_port=$(free_port)
  while IFS= read -r a; do
    case "$a" in
      --metrics-address=*) args+=("--metrics-address=127.0.0.1:$metrics_port") ;;
      --health-address=*) args+=("--health-address=127.0.0.1:$health_port") ;;
      *) args+=("$a") ;;
    esac
  done < <(deployment_args)
  [[ ${#args[@]} -gt 0 ]] || fail "the Deployment has no args"
  local pod_ns_from
  pod_ns_from=$(dep_json \
    '{.spec.template.spec.containers[0].env[?(@.name=="POD_NAMESPACE")].valueFrom.fieldRef.fieldPath}')
  [[ $pod_ns_from == metadata.namespace ]] ||
    fail "the Deployment does not set POD_NAMESPACE from metadata.namespace"
  echo "operator args: ${args[*]}"
  POD_NAMESPACE=$NS "$BIN/kubetrain-operator" --kubeconfig "$KUBECONFIG" "${args[@]}" \
    >>"$LK_DIR/operator.log" 2>&1 &
  OP_PID=$!
  local ready=""
  for _ in $(seq 150); do
    kill -0 "$OP_PID" 2>/dev/null || fail "the operator exited: $(tail -5 "$LK_DIR/operator.log")"
    if curl -sf -m 2 "http://127.0.0.1:$health_port/readyz" >/dev/null 2>&1; then ready=1; break; fi
    sleep 0.1
  done
  [[ -n "$ready" ]] || fail "the operator's /readyz did not answer 200 within 15s"
  curl -sf -m 2 "http://127.0.0.1:$health_port/healthz" >/dev/null || fail "/healthz"
  curl -sf -m 2 "http://127.0.0.1:$metrics_port/metrics" | has '^kubetrain_' ||
    fail "the operator's /metrics has no kubetrain_ series"
  local holder=""
  for _ in $(seq 100); do
    holder=$(k -n "$NS" get lease "$OP" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
    [[ -n "$holder" ]] && break
    sleep 0.1
  done
  [[ -n "$holder" ]] || fail "no leader Lease $NS/$OP within 10s (--leader-elect from the chart)"
  echo "operator ready; Lease $NS/$OP held by $holder"
}

step "helm install (default flags)"
h install "$REL" charts/kubetrain --namespace "$NS" --create-namespace \
  >"$LK_DIR/install.out" 2>&1 ||
  fail "helm install: $(cat "$LK_DIR/install.out")"
has "STATUS: deployed" <"$LK_DIR/install.out" || fail "install output: $(cat "$LK_DIR/install.out")"
has "kubectl get tj" <"$LK_DIR/install.out" || fail "NOTES.txt does not tell the next command"
k wait --for condition=established --timeout=20s crd/trainingjobs.kubetrain.dev >/dev/null ||
  fail "the TrainingJob CRD is not established"
[[ $(k get crd trainingjobs.kubetrain.dev -o jsonpath='{.spec.names.shortNames[0]}') == tj ]] ||
  fail "the CRD's short name is not tj"

OBJECTS=(
  "-n $NS deployment.apps/$OP"
  "-n $NS serviceaccount/$OP"
  "-n $NS service/$OP-metrics"
  "-n $NS role.rbac.authorization.k8s.io/$OP-leader-election"
  "-n $NS rolebinding.rbac.authorization.k8s.io/$OP-leader-election"
  "clusterrole.rbac.authorization.k8s.io/$OP"
  "clusterrolebinding.rbac.authorization.k8s.io/$OP"
)
for obj in "${OBJECTS[@]}"; do
  read -r -a o <<<"$obj"
  k get "${o[@]}" -o name >/dev/null 2>&1 || fail "$obj was not created"
done
[[ $(dep_json '{.metadata.labels.app\.kubernetes\.io/managed-by}') == Helm ]] ||
  fail "the Deployment lacks app.kubernetes.io/managed-by=Helm"
[[ $(dep_json '{.spec.template.spec.serviceAccountName}') == "$OP" ]] ||
  fail "the Deployment does not run as ServiceAccount $OP"
crb_subject=$(k get clusterrolebinding "$OP" -o jsonpath='{.subjects[0].namespace}/{.subjects[0].name}')
[[ $crb_subject == "$NS/$OP" ]] ||
  fail "the ClusterRoleBinding does not bind $NS/$OP"
[[ $(dep_json '{.spec.template.spec.containers[0].image}') == kubetrain/operator:0.1.0 ]] ||
  fail "image is not kubetrain/operator:0.1.0"
rendered=$(deployment_args)
for want in --leader-elect --workers=4 --qps=50 --burst=100; do
  grep -qx -- "$want" <<<"$rendered" || fail "rendered args lack $want: $rendered"
done
h list -n "$NS" | has -E "^$REL\s+$NS\s+1\s+.*deployed" || fail "helm list: $(h list -n "$NS")"

step "operator as a local process with the chart's args"
start_operator
k create namespace ml >/dev/null
sed 's/name: fashion-mnist/name: chart-e2e/' deploy/examples/fashion-mnist.yaml |
  k -n ml apply -f - >/dev/null
for _ in $(seq 100); do
  n=$(k -n ml get pods -l kubetrain.dev/job-name=chart-e2e -o name 2>/dev/null | wc -l)
  [[ "$n" -eq 3 ]] && break
  sleep 0.1
done
[[ $(k -n ml get pods -l kubetrain.dev/job-name=chart-e2e -o name | wc -l) -eq 3 ]] ||
  fail "the operator did not create the job's 3 pods: $(k -n ml get pods 2>&1)"
k -n ml get service chart-e2e -o name >/dev/null || fail "the operator did not create the job's Service"
k -n ml delete tj chart-e2e --wait=false >/dev/null

step "helm upgrade --set workers=2"
h upgrade "$REL" charts/kubetrain --namespace "$NS" --set workers=2 >"$LK_DIR/upgrade.out" 2>&1 ||
  fail "helm upgrade: $(cat "$LK_DIR/upgrade.out")"
rendered=$(deployment_args)
grep -qx -- --workers=2 <<<"$rendered" || fail "upgrade did not set --workers=2: $rendered"
if grep -qx -- --workers=4 <<<"$rendered"; then fail "--workers=4 survived the upgrade"; fi
h list -n "$NS" | has -E "^$REL\s+$NS\s+2\s+" || fail "revision is not 2: $(h list -n "$NS")"
stop_operator
start_operator  # the upgraded args, the same Lease taken over
stop_operator

step "helm uninstall"
h uninstall "$REL" --namespace "$NS" --wait --timeout 60s >"$LK_DIR/uninstall.out" 2>&1 ||
  fail "helm uninstall: $(cat "$LK_DIR/uninstall.out")"
for obj in "${OBJECTS[@]}"; do
  read -r -a o <<<"$obj"
  if k get "${o[@]}" -o name >/dev/null 2>&1; then fail "$obj survived helm uninstall"; fi
done
[[ -z $(h list -n "$NS" -q) ]] || fail "the release is still listed"
k get crd trainingjobs.kubetrain.dev -o name >/dev/null ||
  fail "the CRD was deleted (helm keeps crds/ on uninstall; user data would be lost)"

step "a TFJob CRD another installation made: refused clearly, then used with tfjob.installCRD=false"
# As Kubeflow leaves it: the TFJob CRD without Helm's ownership of this release.
k delete crd tfjobs.kubeflow.org --wait=true >/dev/null 2>&1 || true
k apply -f deploy/crd/kubeflow.org_tfjobs.yaml >/dev/null
k wait --for condition=established --timeout=20s crd/tfjobs.kubeflow.org >/dev/null
if h install "$REL" charts/kubetrain --namespace "$NS" >"$LK_DIR/crd-clash.out" 2>&1; then
  fail "helm install took over a TFJob CRD it did not make: $(cat "$LK_DIR/crd-clash.out")"
fi
has "tfjob.installCRD=false" <"$LK_DIR/crd-clash.out" ||
  fail "the refusal does not say what to do: $(cat "$LK_DIR/crd-clash.out")"
h install "$REL" charts/kubetrain --namespace "$NS" --set tfjob.installCRD=false \
  >"$LK_DIR/no-crd.out" 2>&1 || fail "helm install --set tfjob.installCRD=false: $(cat "$LK_DIR/no-crd.out")"
grep -qx -- --tfjob <<<"$(deployment_args)" || fail "tfjob.installCRD=false dropped --tfjob"
[[ -z $(k get crd tfjobs.kubeflow.org -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}') ]] ||
  fail "the release took the existing TFJob CRD over"
h uninstall "$REL" --namespace "$NS" --wait --timeout 60s >/dev/null || fail "helm uninstall"
k get crd tfjobs.kubeflow.org -o name >/dev/null || fail "uninstall deleted the TFJob CRD it did not make"

step "the plain manifests in deploy/ apply and delete cleanly too"
# (the namespace exists from --create-namespace: kubectl warns that it lacks last-applied)
k apply -f deploy/operator/namespace.yaml >/dev/null 2>"$LK_DIR/ns.err" ||
  fail "kubectl apply deploy/operator/namespace.yaml: $(cat "$LK_DIR/ns.err")"
k apply -R -f deploy/rbac -f deploy/operator >"$LK_DIR/plain.out" 2>&1 ||
  fail "kubectl apply deploy/rbac deploy/operator: $(cat "$LK_DIR/plain.out")"
for obj in "${OBJECTS[@]}"; do
  read -r -a o <<<"$obj"
  k get "${o[@]}" -o name >/dev/null 2>&1 || fail "deploy/ did not create $obj"
done
k -n default get role.rbac.authorization.k8s.io/"$OP" -o name >/dev/null ||
  fail "deploy/rbac/namespaced did not create its Role"
k delete -R -f deploy/rbac -f deploy/operator/deployment.yaml -f deploy/operator/service.yaml \
  --wait=false >/dev/null || fail "kubectl delete of deploy/ manifests"

echo "PASS: chart e2e"
