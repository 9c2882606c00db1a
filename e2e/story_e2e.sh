#!/usr/bin/env bash
# The user's whole path, on localkube with real pods, with the real tools:
#   helm install the chart → kubectl apply the example → kubectl get tj shows progress →
#   kubectl wait Succeeded → the chief's log shows accuracy ≥ 0.88 → a real Prometheus has
#   scraped the training and operator metrics → kubectl describe shows the events →
#   kubectl delete collects everything → helm uninstall.
# The operator runs as a local process with the arguments the chart's Deployment carries (read
# back from the installed Deployment), so its log and metrics are at hand: the Deployment itself
# is installed with no replica. e2e_incluster (incluster_e2e.sh, from the operator image) and
# e2e_cluster_demo (scripts/cluster-demo) run the Deployment's pod.
# Usage: story_e2e.sh LOCALKUBE KUBECTL HELM BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_helm_args "$@"

start_localkube --run-pods \
  --image-map "kubetrain/=$BIN"
k() { "$KUBECTL" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

OP_PID=""
PROM_PID=""
SD_PID=""
cleanup() {
  local rc=$?
  for p in "$SD_PID" "$OP_PID" "$PROM_PID"; do
    [[ -n "$p" ]] || continue
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  (exit $rc)
  stop_localkube
}
trap cleanup EXIT

step "helm install"
private_helm_home
timeout 90 "$HELM" install kubetrain charts/kubetrain --namespace kubetrain-system \
  --create-namespace --set replicaCount=0 >/dev/null || fail "helm install failed"
k wait --for condition=established --timeout=20s crd/trainingjobs.kubetrain.dev >/dev/null
args=$(k -n kubetrain-system get deploy kubetrain-operator -o jsonpath='{range .spec.template.spec.containers[0].args[*]}{@}{"\n"}{end}')
[[ -n "$args" ]] || fail "the chart's Deployment has no args"
echo "operator args from the chart: $(echo $args)"

step "operator (the chart's args, plus a kubeconfig and loopback ports)"
OP_METRICS=$(free_port)
mapfile -t op_args < <(echo "$args" | grep -v -e '^--metrics-address' -e '^--health-address')
"$BIN/kubetrain-operator" "${op_args[@]}" --kubeconfig "$KUBECONFIG" \
  --leader-election-namespace kubetrain-system \
  --metrics-address "127.0.0.1:$OP_METRICS" --health-address 127.0.0.1:0 \
  >"$LK_DIR/operator.log" 2>&1 &
OP_PID=$!
timeout 60 bash -c "until grep -q 'Caches synced' '$LK_DIR/operator.log'; do sleep 0.2; done" \
  || { tail -20 "$LK_DIR/operator.log"; fail "operator did not become ready"; }

step "Prometheus scraping the pods (file service discovery from the pod list) and the operator"
PROM_PORT=$(free_port)
mkdir -p "$LK_DIR/prom"
echo '[]' >"$LK_DIR/prom/pods.json"
cat >"$LK_DIR/prom/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: pods
    file_sd_configs: [{files: ["$LK_DIR/prom/pods.json"], refresh_interval: 1s}]
  - job_name: operator
    static_configs: [{targets: ["127.0.0.1:$OP_METRICS"]}]
YML
prometheus --config.file="$LK_DIR/prom/prometheus.yml" --storage.tsdb.path="$LK_DIR/prom/data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$LK_DIR/prom/log" 2>&1 &
PROM_PID=$!
# Service discovery: every pod that asks to be scraped, at podIP:prometheus.io/port.
( while true; do
    k get pods -A -o json 2>/dev/null | python3 -c '
import json, sys
targets = []
for p in json.load(sys.stdin)["items"]:
    a = p["metadata"].get("annotations", {})
    ip = p.get("status", {}).get("podIP")
    if a.get("prometheus.io/scrape") == "true" and ip and p["status"].get("phase") == "Running":
        targets.append({"targets": [ip + ":" + a.get("prometheus.io/port", "8080")],
                        "labels": {"pod": p["metadata"]["name"]}})
print(json.dumps(targets))' >"$LK_DIR/prom/pods.json.tmp" && mv "$LK_DIR/prom/pods.json.tmp" "$LK_DIR/prom/pods.json"
    sleep 1
  done ) &
SD_PID=$!
promql() {  # prints the largest value of an instant query, or nothing
  curl -sfG "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(max(float(x["value"][1]) for x in r) if r else "")'
}
timeout 30 bash -c "until curl -sf http://127.0.0.1:$PROM_PORT/-/ready >/dev/null; do sleep 0.3; done" \
  || fail "Prometheus did not start: $(tail -5 "$LK_DIR/prom/log")"

step "kubectl apply the example; kubectl get tj shows progress"
k apply -f deploy/examples/fashion-mnist.yaml >/dev/null
seen_rate=""
for _ in $(seq 900); do
  state=$(k get tj fashion-mnist -o jsonpath='{.status.conditions[-1:].type}')
  [[ "$state" == "Succeeded" || "$state" == "Failed" ]] && break
  if [[ -z "$seen_rate" ]]; then
    r=$(promql 'rate(kubetrain_worker_examples_total[5s])' || true)
    if [[ -n "$r" ]] && python3 -c "import sys; sys.exit(0 if float('$r') > 0 else 1)"; then
      seen_rate=$r
      echo "Prometheus: rate(kubetrain_worker_examples_total[5s]) = $r examples/s during training"
      k get tj fashion-mnist
    fi
  fi
  sleep 0.2
done
k wait --for=condition=Succeeded --timeout=300s tj/fashion-mnist >/dev/null \
  || { k describe tj fashion-mnist; fail "the job did not succeed"; }
k get tj fashion-mnist
[[ -n "$seen_rate" ]] || fail "Prometheus never saw training throughput"
step_col=$(k get tj fashion-mnist -o jsonpath='{.status.progress.step}')
[[ -n "$step_col" && "$step_col" -gt 0 ]] || fail "no STEP in the job's status"

step "the chief's log shows the final accuracy"
summary=$(k logs fashion-mnist-worker-0 | grep '"event":"training_complete"') || fail "no summary line"
echo "$summary"
python3 -c "import json,sys; s=json.loads(sys.argv[1]); sys.exit(0 if s['test_accuracy'] >= 0.88 else 1)" \
  "$summary" || fail "test accuracy below 0.88"

step "Prometheus has the operator's job counters"
timeout 20 bash -c "until [[ -n \"\$(curl -sfG http://127.0.0.1:$PROM_PORT/api/v1/query --data-urlencode 'query=kubetrain_operator_jobs_succeeded_total > 0' | grep -o '\"value\"')\" ]]; do sleep 0.5; done" \
  || fail "kubetrain_operator_jobs_succeeded_total never reached Prometheus"
echo "Prometheus: kubetrain_operator_jobs_succeeded_total = $(promql 'kubetrain_operator_jobs_succeeded_total')"

step "every query of the chart's Grafana dashboard returns data"
source e2e/dashboard_queries.sh
dashboard_queries_check "http://127.0.0.1:$PROM_PORT" 900 || fail "a dashboard query returned no data"

step "kubectl describe shows what was created and the outcome's event"
k describe tj fashion-mnist | tee "$LK_DIR/describe.txt" | tail -8
has -E "is created: .*pods=fashion-mnist-ps-0" <"$LK_DIR/describe.txt" ||
  fail "no Created condition naming the pods"
has "TrainingJob succeeded" <"$LK_DIR/describe.txt" || fail "no JobSucceeded event"

step "kubectl delete collects the pods and the Service; helm uninstall"
k delete tj fashion-mnist --wait --timeout=60s >/dev/null
timeout 30 bash -c "until [[ -z \"\$('$KUBECTL' get pods,svc -l kubetrain.dev/job-name=fashion-mnist -o name)\" ]]; do sleep 0.2; done" \
  || fail "pods or Service left after deletion"
timeout 90 "$HELM" uninstall kubetrain --namespace kubetrain-system >/dev/null \
  || fail "helm uninstall failed"
[[ -z "$(k -n kubetrain-system get deploy -o name)" ]] || fail "the Deployment is left"
echo "PASS user story e2e"
