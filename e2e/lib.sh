# Shared helpers for the e2e scripts: start a fresh localkube on port 0 with its own kubeconfig
# and kubectl cache in a temp dir, and kill it (and its pods) on exit.
# Usage: source lib.sh; start_localkube [extra localkube flags...]

fail() {
  echo "FAIL: $*" >&2
  if [[ -n "${LK_DIR:-}" && -f "$LK_DIR/localkube.err" ]]; then
    echo "--- localkube log (last 30 lines) ---" >&2
    tail -n 30 "$LK_DIR/localkube.err" >&2
  fi
  exit 1
}

step() { echo "=== $(date +%T) $*"; }

# The arguments of the scripts that drive the operator: LOCALKUBE KUBECTL BIN_DIR (BIN: absolute);
# then on from the repository root.
e2e_args() {
  [[ $# -ge 3 ]] || fail "usage: $(basename "$0") LOCALKUBE KUBECTL BIN_DIR"
  LOCALKUBE=$1
  KUBECTL=$2
  BIN=$(cd "$3" && pwd)
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
}

# The arguments of the scripts that also drive helm: LOCALKUBE KUBECTL HELM BIN_DIR; the rest as
# e2e_args.
e2e_helm_args() {
  [[ $# -ge 4 ]] || fail "usage: $(basename "$0") LOCALKUBE KUBECTL HELM BIN_DIR"
  HELM=$3
  e2e_args "$1" "$2" "$4"
}

# `grep -q` for pipelines: reads all its input, so the writer never dies of SIGPIPE (which
# pipefail would report as a failure).
has() { grep "$@" >/dev/null; }

# With --run-pods, a cluster of $LK_NODES nodes (3 unless the script asks otherwise): pods are
# scheduled over them and, as root, each runs in its own sandbox on its node (localkube/README.md
# "Pod sandboxes").
LK_NODES=${LK_NODES:-3}
start_localkube() {
  if [[ " $* " == *" --run-pods "* && " $* " != *" --nodes "* ]]; then
    set -- --nodes "$LK_NODES" "$@"
  fi
  LK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/localkube-e2e.XXXXXX")
  LK_TOKEN="e2e-$RANDOM$RANDOM"
  export KUBECONFIG="$LK_DIR/kubeconfig"
  "$LOCALKUBE" --port 0 --token "$LK_TOKEN" --kubeconfig-out "$KUBECONFIG" \
    --address-file "$LK_DIR/address" "$@" >"$LK_DIR/localkube.out" 2>"$LK_DIR/localkube.err" &
  LK_PID=$!
  trap stop_localkube EXIT
  for _ in $(seq 100); do
    [[ -s "$LK_DIR/address" ]] && break
    kill -0 "$LK_PID" 2>/dev/null || fail "localkube exited during start-up"
    sleep 0.1
  done
  [[ -s "$LK_DIR/address" ]] || fail "localkube did not write its address within 10s"
  LK_URL=$(cat "$LK_DIR/address")
  echo "localkube at $LK_URL (dir $LK_DIR)"
}

# require_sandboxes FOR: skips the script (exit 77) unless pod sandboxes can work here (root,
# and network, mount, IPC and UTS namespaces), saying what needs them.
require_sandboxes() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP: pod sandboxes, which need root, for $1"
    exit 77
  fi
  if ! unshare --net --mount --ipc --uts true 2>/dev/null; then
    echo "SKIP: no network, mount, IPC and UTS namespaces here for the pod sandboxes of $1"
    exit 77
  fi
}

# Pods' "name node podIP" lines: kubectl get pods ... -o jsonpath="$PLACEMENT".
PLACEMENT='{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP}{"\n"}{end}'
# expect_sandboxed PLACED: each pod of PLACED (PLACEMENT's lines) has an IP of the sandbox
# network (198.18.0.0/15) and they ran on at least two nodes.
expect_sandboxed() {
  echo "$1"
  [[ $(awk '$3 !~ /^198\.1[89]\./' <<<"$1" | wc -l) -eq 0 ]] ||
    fail "pods outside the sandbox network (198.18.0.0/15): $1"
  [[ $(awk '{print $2}' <<<"$1" | sort -u | wc -l) -ge 2 ]] || fail "the pods share one node: $1"
}

stop_localkube() {
  local rc=$?
  if [[ -n "${LK_PID:-}" ]] && kill -0 "$LK_PID" 2>/dev/null; then
    kill "$LK_PID"
    timeout 15 tail --pid="$LK_PID" -f /dev/null || kill -9 "$LK_PID"
  fi
  if [[ $rc -eq 0 && -n "${LK_DIR:-}" ]]; then rm -rf "$LK_DIR"; fi
  if [[ -n "${LK_CLEANUP[*]:-}" ]]; then rm -rf "${LK_CLEANUP[@]}"; fi
  exit $rc
}

# localkube running pods from BIN's programs (processes), RBAC on, and $OP_KUBECONFIG: the same
# server with the token of the operator's service account (kubetrain-system/kubetrain-operator),
# so that the operator has only what deploy/rbac grants. Stops both on exit (stop_all).
OP_PID=""
start_localkube_for_operator() {  # BIN [extra localkube flags...]
  local bin=$1 token="operator-$RANDOM$RANDOM"
  shift
  start_localkube --run-pods \
    --image-map "kubetrain/=$bin" --rbac \
    --user-token "$token=system:serviceaccount:kubetrain-system:kubetrain-operator" "$@"
  OP_KUBECONFIG="$LK_DIR/operator.kubeconfig"
  sed "s/token: $LK_TOKEN/token: $token/" "$KUBECONFIG" >"$OP_KUBECONFIG"
  has "token: $token" "$OP_KUBECONFIG" || fail "no operator token in $OP_KUBECONFIG"
  trap stop_all EXIT
}

# BIN's kubetrain-operator with $OP_KUBECONFIG, logging to $LK_DIR/operator.log, until its caches
# have synced; extra operator flags follow.
start_operator() {  # BIN [extra operator flags...]
  local bin=$1
  shift
  "$bin/kubetrain-operator" --kubeconfig "$OP_KUBECONFIG" --metrics-address 127.0.0.1:0 \
    --health-address 127.0.0.1:0 --progress-interval 1s "$@" >>"$LK_DIR/operator.log" 2>&1 &
  OP_PID=$!
  for _ in $(seq 100); do
    grep -q "Caches synced" "$LK_DIR/operator.log" 2>/dev/null && return 0
    kill -0 "$OP_PID" 2>/dev/null || { cat "$LK_DIR/operator.log"; fail "operator exited"; }
    sleep 0.1
  done
  fail "operator caches did not sync"
}

# What the operator needs from deploy/, applied with the script's k, then start_operator: the
# TrainingJob CRD (with --tfjob the TFJob CRD too) until established, and deploy/rbac's
# ClusterRole and its binding to the operator's service account (the grants it runs with under
# start_localkube_for_operator).
deploy_operator() {  # BIN [extra operator flags...]
  local files=(-f deploy/crd/kubetrain.dev_trainingjobs.yaml) crds=(crd/trainingjobs.kubetrain.dev)
  if [[ " $* " == *" --tfjob "* ]]; then
    files+=(-f deploy/crd/kubeflow.org_tfjobs.yaml)
    crds+=(crd/tfjobs.kubeflow.org)
  fi
  k apply "${files[@]}" >/dev/null || fail "kubectl apply of the CRDs"
  k wait --for condition=established --timeout=20s "${crds[@]}" >/dev/null ||
    fail "the CRDs are not established: ${crds[*]}"
  k apply -f deploy/rbac/cluster-role.yaml >/dev/null ||
    fail "kubectl apply of deploy/rbac/cluster-role.yaml"
  start_operator "$@"
}

stop_all() {
  local rc=$?
  set +e  # under errexit the `(exit "$rc")` below would end a failed script before the cleanup
  [[ -n "$OP_PID" ]] && kill "$OP_PID" 2>/dev/null && wait "$OP_PID" 2>/dev/null || true
  (exit "$rc")  # stop_localkube exits with $?: the script's status, not the kill's
  stop_localkube
}

# diagnose_job KIND JOB (KIND tfjob or tj): what a user would look at when JOB did not end as it
# should: its description, the pods, the last log lines of each of JOB's pods and of the
# operator ($LK_DIR/operator.log). Runs kubectl as the script's k.
diagnose_job() {
  local label=kubetrain.dev/job-name
  [[ $1 == tfjob ]] && label=training.kubeflow.org/job-name
  k describe "$1" "$2" || true
  k get pods -o wide || true
  for p in $(k get pods -l "$label=$2" -o name 2>/dev/null); do
    echo "--- $p"; k logs "$p" --tail=20 2>&1 || true
  done
  tail -40 "$LK_DIR/operator.log"
}

# Helm's cache, config and data in this run's folder rather than the user's.
private_helm_home() {
  export HELM_CACHE_HOME="$LK_DIR/helm/cache" HELM_CONFIG_HOME="$LK_DIR/helm/config" \
    HELM_DATA_HOME="$LK_DIR/helm/data"
}

# diagnose_deployment KUBECTL NAMESPACE DEPLOYMENT LINES: every pod and the deployment's last
# LINES of log, on stderr; KUBECTL is the script's kubectl function.
diagnose_deployment() {
  echo "--- pods ---" >&2
  "$1" get pods -A -o wide >&2 || true
  echo "--- operator log (last $4 lines) ---" >&2
  "$1" -n "$2" logs "deploy/$3" --tail "$4" >&2 || true
}

# curl against localkube with the bearer token; extra args follow.
lk_curl() {
  curl -sS --cacert <(sed -n 's/.*certificate-authority-data: //p' "$KUBECONFIG" | base64 -d) \
    -H "Authorization: Bearer $LK_TOKEN" "$@"
}
