#!/usr/bin/env bash
# The README's "Cluster quickstart" on a cluster that behaves like a real one: localkube started
# with the flags of the README's localkube line (3 nodes, pods in sandboxes of their own: own
# network namespace, mounts and environment, so nothing of localkube's and no kubeconfig; RBAC
# enforced), the images mapped to this build's programs; then the README's commands, read from
# README.md and run as written. `helm install` of the chart starts the operator as the chart's
# Deployment pod; it runs as the chart's ServiceAccount with the in-cluster configuration (the
# mounted token, KUBERNETES_SERVICE_HOST/PORT) and the example, shortened to one epoch, reaches
# Succeeded. Checked besides what the commands print: the operator pod is Running and Ready as
# ServiceAccount kubetrain-operator, its process has no KUBECONFIG, its requests were its
# ServiceAccount's and none was refused, and that ServiceAccount's token is refused what the
# chart's ClusterRole does not grant (listing Secrets, reading Nodes, deleting Deployments).
# Skips (77) without root: only sandboxes mount the ServiceAccount token where in-cluster
# clients read it.
# Usage: quickstart_e2e.sh LOCALKUBE KUBECTL HELM BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_helm_args "$@"

require_sandboxes "the in-cluster configuration (the mounted token)"

NS=kubetrain-system
OP=kubetrain-operator  # the chart's operator (and ServiceAccount) name for release "kubetrain"
SA_USER=system:serviceaccount:$NS:$OP
JOB=fashion-mnist

# readme_quickstart commands|localkube: from the sh blocks under README.md's "## Cluster
# quickstart", the first block's commands (comments dropped), one a line; or the flags of the
# block that starts localkube, one a line, less those start_localkube sets (--port, --token,
# --kubeconfig-out) and the trailing `&`.
readme_quickstart() {
  python3 - README.md "$1" <<'PY'
import re, shlex, sys
text = open(sys.argv[1]).read()
section = text.split("\n## Cluster quickstart\n", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
if sys.argv[2] == "commands":
    for line in blocks[0].splitlines() if blocks else []:
        line = line.split(" #", 1)[0].strip()
        if line:
            print(line)
    sys.exit()
for block in blocks:
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "build/bin/localkube":
            words = words[1:-1] if words[-1] == "&" else words[1:]
            i = 0
            while i < len(words):
                if words[i] in ("--port", "--token", "--kubeconfig-out"):
                    i += 2
                    continue
                print(words[i])
                i += 1
            sys.exit()
sys.exit("README.md: no build/bin/localkube line under '## Cluster quickstart'")
PY
}
mapfile -t QUICKSTART < <(readme_quickstart commands)
mapfile -t LOCALKUBE_FLAGS < <(readme_quickstart localkube)
[[ ${#LOCALKUBE_FLAGS[@]} -gt 0 ]] || fail "README.md's quickstart starts localkube with no flags"
[[ ${#QUICKSTART[@]} -gt 0 ]] || fail "README.md has no sh block under '## Cluster quickstart'"

AUTHZ_LOG=$(mktemp "${TMPDIR:-/tmp}/quickstart-authz.XXXXXX")
LK_CLEANUP=("$AUTHZ_LOG")
started=$SECONDS
echo "localkube flags from README.md: ${LOCALKUBE_FLAGS[*]}"
start_localkube "${LOCALKUBE_FLAGS[@]}" --authz-log "$AUTHZ_LOG" --image-map "kubetrain/=$BIN"
private_helm_home
# The README's `kubectl` and `helm`: the tools given, with this cluster's cache and time limits.
kubectl() { timeout 60 "$KUBECTL" --cache-dir "$LK_DIR/cache" "$@"; }
helm() { timeout 120 "$HELM" "$@"; }
on_exit() {
  local rc=$?
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    diagnose_deployment kubectl "$NS" "$OP" 30
    echo "--- denials ---" >&2
    grep '"forbid"' "$AUTHZ_LOG" | head -5 >&2 || true
  fi
  [[ -n "${WATCH_PID:-}" ]] && kill "$WATCH_PID" 2>/dev/null
  (exit $rc)
  stop_localkube
}
trap on_exit EXIT

# The example as the README applies it, one epoch instead of twenty.
SHORT_EXAMPLE=$LK_DIR/fashion-mnist.yaml
sed 's/--epochs=20$/--epochs=1/' deploy/examples/fashion-mnist.yaml >"$SHORT_EXAMPLE"
has -- '--epochs=1$' "$SHORT_EXAMPLE" || fail "deploy/examples/fashion-mnist.yaml has no --epochs=20"

# Each command as written; its output goes to $LK_DIR/out.<n> and, for the checks below, OUT[the
# command] names that file. `kubectl get ... -w` runs until the job has finished, as a user
# watches it.
declare -A OUT
n=0
for line in "${QUICKSTART[@]}"; do
  n=$((n + 1))
  read -r -a words <<<"$line"
  [[ ${words[0]} == kubectl || ${words[0]} == helm ]] ||
    fail "README quickstart line '$line': this test runs only kubectl and helm commands"
  run_words=("${words[@]/#deploy\/examples\/fashion-mnist.yaml/$SHORT_EXAMPLE}")
  OUT[$line]=$LK_DIR/out.$n
  step "\$ $line"
  if [[ " $line " == *" -w "* ]]; then
    "${run_words[@]}" >"${OUT[$line]}" 2>&1 &
    WATCH_PID=$!
    kubectl wait --for=condition=Succeeded --timeout=300s "tj/$JOB" >/dev/null ||
      fail "tj/$JOB did not succeed: $(kubectl describe tj "$JOB" | tail -15)"
    for _ in $(seq 100); do  # the watch prints the finished job's row
      has -E "^$JOB +Succeeded" "${OUT[$line]}" && break
      sleep 0.1
    done
    kill "$WATCH_PID" 2>/dev/null || true
    wait "$WATCH_PID" 2>/dev/null || true
    WATCH_PID=""
  else
    "${run_words[@]}" >"${OUT[$line]}" 2>&1 || fail "'$line' failed: $(cat "${OUT[$line]}")"
  fi
  cat "${OUT[$line]}"
done
echo "quickstart ran in $((SECONDS - started)) s (localkube start included)"

# out_of COMMAND: the output of that README command, or a failure saying the README changed.
out_of() {
  [[ -n "${OUT[$1]:-}" ]] || fail "the README's cluster quickstart no longer runs '$1': update this test"
  cat "${OUT[$1]}"
}
step "what the README says each command shows"
out_of "helm install kubetrain charts/kubetrain --namespace $NS --create-namespace" |
  has "STATUS: deployed" || fail "helm install did not deploy"
watch_out=$(out_of "kubectl get tj -w")
has -E "^NAME +STATE +STEP +ACCURACY" <<<"$watch_out" || fail "kubectl get tj -w columns: $watch_out"
has -E "^$JOB +Succeeded +[1-9][0-9]* +0\.[0-9]+" <<<"$watch_out" ||
  fail "kubectl get tj -w never showed $JOB Succeeded with a step and an accuracy: $watch_out"
chief_log=$(out_of "kubectl logs $JOB-worker-0")
has -E '(^| )step=[0-9]+' <<<"$chief_log" || fail "the chief's log has no logfmt progress"
has '"event":"training_complete"' <<<"$chief_log" || fail "the chief's log has no JSON summary"
described=$(out_of "kubectl describe tj $JOB")
for want in Created Running Succeeded JobSucceeded; do
  has -w "$want" <<<"$described" || fail "kubectl describe tj $JOB does not show $want"
done

step "the job's pods ran in sandboxes on different nodes"
expect_sandboxed "$(kubectl get pods -l "kubetrain.dev/job-name=$JOB" -o jsonpath="$PLACEMENT")"

step "the operator ran as the chart's Deployment pod, as ServiceAccount $OP, in-cluster"
pod=$(kubectl -n "$NS" get pods -l app.kubernetes.io/name=kubetrain -o jsonpath='{.items[0].metadata.name}')
[[ -n "$pod" ]] || fail "no operator pod in $NS"
pod_json=$(kubectl -n "$NS" get pod "$pod" -o json)
POD_JSON=$pod_json python3 - "$OP" <<'PY' || fail "the operator pod: see above"
import json, os, sys
pod, sa = json.loads(os.environ["POD_JSON"]), sys.argv[1]
owner = pod["metadata"]["ownerReferences"][0]
ready = [c["status"] for c in pod["status"].get("conditions", []) if c["type"] == "Ready"]
env = [e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])]
errors = []
if owner["kind"] != "ReplicaSet" or not owner["name"].startswith(sa + "-"):
    errors.append("not made by the chart's Deployment: owner %s/%s" % (owner["kind"], owner["name"]))
if pod["spec"].get("serviceAccountName") != sa:
    errors.append("serviceAccountName %r, not %r" % (pod["spec"].get("serviceAccountName"), sa))
if pod["status"].get("phase") != "Running" or ready != ["True"]:
    errors.append("phase %s, Ready %s" % (pod["status"].get("phase"), ready))
if "KUBECONFIG" in env:
    errors.append("its spec sets KUBECONFIG")
for e in errors:
    print("operator pod:", e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
# The operator's process: no KUBECONFIG in its environment, the pod's name as its hostname.
op_env=$(python3 - "$pod" <<'PY'
import os, sys
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv0 = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        continue
    if os.path.basename(argv0) == b"kubetrain-operator" and f"HOSTNAME={sys.argv[1]}".encode() in env:
        print("\n".join(e.decode(errors="replace") for e in env if e))
        break
PY
)
[[ -n "$op_env" ]] || fail "no kubetrain-operator process of pod $pod"
if has '^KUBECONFIG=' <<<"$op_env"; then fail "the operator process has KUBECONFIG: it inherited one"; fi
has '^KUBERNETES_SERVICE_HOST=198\.18\.' <<<"$op_env" ||
  fail "the operator was not pointed at its node's address: $(grep KUBERNETES_SERVICE_HOST <<<"$op_env")"
kubectl -n "$NS" logs "$pod" | has 'cluster="in-cluster service account"' ||
  fail "the operator did not load the in-cluster configuration"

step "its requests were its ServiceAccount's, and none was refused"
python3 - "$AUTHZ_LOG" "$SA_USER" <<'PY' || fail "the operator's requests: see above"
import collections, json, sys
mine = [e for e in map(json.loads, open(sys.argv[1])) if e["user"] == sys.argv[2]]
counts = collections.Counter((e["verb"], e.get("resource", e.get("path", "?")) +
                              ("/" + e["subresource"] if "subresource" in e else ""), e["decision"])
                             for e in mine)
for (verb, what, decision), n in sorted(counts.items()):
    print("  %-6s %-7s %-22s %d" % (decision, verb, what, n))
did = {(verb, what) for verb, what, _ in counts}
missing = {("create", "pods"), ("update", "trainingjobs/status"), ("update", "leases")} - did
if missing:
    sys.exit("the ServiceAccount never did %s: the operator used other credentials" % sorted(missing))
refused = sum(n for (_, _, d), n in counts.items() if d != "allow")
if refused:
    sys.exit("%d of its requests were refused" % refused)
PY

step "RBAC is enforced: the ServiceAccount's token gets only what the chart's ClusterRole grants"
token=$(kubectl -n "$NS" create token "$OP" --duration 10m) || fail "kubectl create token $OP"
as_sa() { kubectl --token "$token" "$@"; }
as_sa get tj -A >/dev/null 2>"$LK_DIR/sa.err" || fail "the operator may not list TrainingJobs: $(cat "$LK_DIR/sa.err")"
for denied in "-n $NS get secrets" "get nodes" "-n $NS delete deployment $OP"; do
  read -r -a args <<<"$denied"
  if as_sa "${args[@]}" >"$LK_DIR/sa.out" 2>&1; then
    fail "kubectl $denied as $SA_USER was allowed: $(cat "$LK_DIR/sa.out")"
  fi
  has "is forbidden: User \"$SA_USER\" cannot" "$LK_DIR/sa.out" ||
    fail "kubectl $denied as $SA_USER: not RBAC's 403: $(cat "$LK_DIR/sa.out")"
  echo "kubectl $denied: $(cat "$LK_DIR/sa.out")"
done
kubectl -n "$NS" get deployment "$OP" -o name >/dev/null || fail "the Deployment is gone"

echo "PASS: the README's cluster quickstart, operator in-cluster as $SA_USER ($((SECONDS - started)) s)"
