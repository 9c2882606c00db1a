#!/usr/bin/env bash
# Drives real helm v4 against a fresh localkube with default flags (server-side apply, OpenAPI
# validation): install, list, status, upgrade with a changed value, uninstall.
# Usage: helm_e2e.sh LOCALKUBE KUBECTL HELM
set -euo pipefail
LOCALKUBE=$1
KUBECTL_BIN=$2
HELM_BIN=$3
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

start_localkube
k() { timeout 60 "$KUBECTL_BIN" --cache-dir "$LK_DIR/cache" "$@"; }
private_helm_home
h() { timeout 90 "$HELM_BIN" "$@"; }
CHART="$HERE/testdata/charts/lktest"

step "install"
k create namespace apps >/dev/null
h install demo "$CHART" -n apps > "$LK_DIR/install.out" 2>&1 || fail "helm install: $(cat "$LK_DIR/install.out")"
grep -q "STATUS: deployed" "$LK_DIR/install.out" || fail "install output: $(cat "$LK_DIR/install.out")"
for obj in serviceaccount/demo-sa configmap/demo-config role.rbac.authorization.k8s.io/demo-role \
  service/demo-svc deployment.apps/demo-app; do
  k -n apps get "$obj" -o name >/dev/null || fail "$obj was not created"
done
[[ $(k -n apps get configmap demo-config -o jsonpath='{.data.greeting}') == hello ]] || fail "greeting"
[[ $(k -n apps get configmap demo-config -o jsonpath='{.metadata.labels.app\.kubernetes\.io/managed-by}') == Helm ]] ||
  fail "managed-by label missing"

step "list and status"
h list -n apps | has -E "^demo\s+apps\s+1\s+.*deployed" || fail "helm list: $(h list -n apps)"
h list -A | has "^demo" || fail "helm list -A"
h status demo -n apps | has "STATUS: deployed" || fail "helm status"

step "upgrade with a changed value"
h upgrade demo "$CHART" -n apps --set greeting=bonjour --set replicas=2 > "$LK_DIR/upgrade.out" 2>&1 ||
  fail "helm upgrade: $(cat "$LK_DIR/upgrade.out")"
[[ $(k -n apps get configmap demo-config -o jsonpath='{.data.greeting}') == bonjour ]] ||
  fail "upgrade did not change the ConfigMap"
[[ $(k -n apps get deployment demo-app -o jsonpath='{.spec.replicas}') == 2 ]] ||
  fail "upgrade did not change replicas"
h list -n apps | has -E "^demo\s+apps\s+2\s+" || fail "revision not 2: $(h list -n apps)"
h history demo -n apps | has superseded || fail "history lacks the superseded revision"

step "uninstall"
h uninstall demo -n apps --wait --timeout 60s > "$LK_DIR/uninstall.out" 2>&1 ||
  fail "helm uninstall: $(cat "$LK_DIR/uninstall.out")"
for obj in serviceaccount/demo-sa configmap/demo-config role.rbac.authorization.k8s.io/demo-role \
  service/demo-svc deployment.apps/demo-app; do
  if k -n apps get "$obj" -o name >/dev/null 2>&1; then fail "$obj survived uninstall"; fi
done
[[ -z $(h list -n apps -q) ]] || fail "release still listed"
[[ -z $(k -n apps get secrets -l owner=helm -o name) ]] || fail "release secrets left behind"

echo "PASS: helm e2e"
