#!/usr/bin/env bash
# Kueue's part played with kubectl, for a TFJob and a TrainingJob, on localkube with the operator:
# created suspended (Kueue's webhook sets runPolicy.suspend) → no pods; admission merge-patches
# the pod templates (nodeSelector, tolerations) and unsuspends → pods from the patched templates;
# eviction suspends again → pods deleted, status active above 0 until they are gone, then 0 (when
# Kueue frees the quota), templates restored; re-admission with other node labels → pods with
# the new nodeSelector. The checks read what Kueue's controller reads: IsActive (any
# replicaStatuses[*].active > 0), IsSuspended (runPolicy.suspend), PodSets (the templates).
# Usage: kueue_e2e.sh LOCALKUBE KUBECTL BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_args "$@"

# Kueue's ResourceFlavors name node labels: node-1 is pool-a, node-2 and node-3 pool-b, so an
# admission's nodeSelector decides where the pods can be scheduled.
start_localkube_for_operator "$BIN" --node-labels node-1:pool=pool-a \
  --node-labels node-2:pool=pool-b --node-labels node-3:pool=pool-b
k() { "$KUBECTL" "$@"; }

# A container that ends 2 s after SIGTERM, as a training process saving a checkpoint does: its
# pod terminates for a while after the delete.
CMD='["sh","-c","trap \"sleep 2; exit 0\" TERM; while true; do sleep 0.2; done"]'

# Replica-spec key and job resource of each kind.
declare -A SPECS=([tfjob]=tfReplicaSpecs [tj]=replicaSpecs)
declare -A CONTAINER=([tfjob]=tensorflow [tj]=kubetrain)

manifest() {  # KIND NAME
  local kind=$1 name=$2 api kindname
  if [[ $kind == tfjob ]]; then api=kubeflow.org/v1 kindname=TFJob; else api=kubetrain.dev/v1 kindname=TrainingJob; fi
  cat <<YAML
apiVersion: $api
kind: $kindname
metadata:
  name: $name
  labels:
    kueue.x-k8s.io/queue-name: user-queue
spec:
  runPolicy:
    suspend: true
    cleanPodPolicy: Running
  ${SPECS[$kind]}:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          terminationGracePeriodSeconds: 15
          containers:
          - name: ${CONTAINER[$kind]}
            image: busybox:1.36
            command: $CMD
YAML
}

# Kueue's IsActive: any replicaStatuses[*].active > 0.
is_active() {  # KIND NAME
  k get "$1" "$2" -o json | python3 -c '
import json, sys
st = json.load(sys.stdin).get("status", {})
sys.exit(0 if any(r.get("active", 0) > 0 for r in st.get("replicaStatuses", {}).values()) else 1)'
}
inactive() { ! is_active "$@"; }
pods_of() { k get pods -o name 2>/dev/null | grep "/$1-worker-" || true; }
wait_for() {  # SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || { k get pods -o wide || true; tail -30 "$LK_DIR/operator.log"; fail "timed out: $what"; }
    sleep 0.2
  done
}
all_running() {  # NAME
  local n
  n=$(k get pods -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}' |
    grep -c "^$1-worker-[01] Running$" || true)
  [[ $n == 2 ]]
}
no_pods() { [[ -z $(pods_of "$1") ]]; }
# Each pod's nodeSelector pool label and toleration key.
pod_placement() {  # NAME
  local p
  for p in $(pods_of "$1"); do
    k get "$p" -o jsonpath='{.spec.nodeSelector.pool}/{.spec.tolerations[?(@.key=="kueue-test")].key}{"\n"}'
  done | sort -u
}
admit() {  # KIND NAME POOL: Kueue's admission patch, then unsuspend
  local patch
  patch=$(printf '{"spec":{"%s":{"Worker":{"template":{"spec":{"nodeSelector":{"pool":"%s"},"tolerations":[{"key":"kueue-test","operator":"Exists","effect":"NoSchedule"}]}}}}}}' "${SPECS[$1]}" "$3")
  k patch "$1" "$2" --type merge -p "$patch" >/dev/null
  k patch "$1" "$2" --type merge -p '{"spec":{"runPolicy":{"suspend":false}}}' >/dev/null
}
evict() {  # KIND NAME: suspend, then restore the templates
  k patch "$1" "$2" --type merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null
}
restore() {  # KIND NAME
  k patch "$1" "$2" --type merge \
    -p "{\"spec\":{\"${SPECS[$1]}\":{\"Worker\":{\"template\":{\"spec\":{\"nodeSelector\":null,\"tolerations\":null}}}}}}" >/dev/null
}

step "CRDs, RBAC and the operator with --tfjob"
deploy_operator "$BIN" --tfjob

for kind in tfjob tj; do
  name=kq-$kind
  step "$kind: created suspended → no pods, not active"
  manifest "$kind" "$name" | k apply -f - >/dev/null
  wait_for 20 "$name Suspended" sh -c "$KUBECTL get $kind $name -o jsonpath='{.status.conditions[?(@.type==\"Suspended\")].status}' | grep -qx True"
  no_pods "$name" || fail "$name: pods created while suspended"
  ! is_active "$kind" "$name" || fail "$name: active while suspended"

  step "$kind: admitted on pool-a → pods with the patched template"
  admit "$kind" "$name" pool-a
  wait_for 30 "$name running" all_running "$name"
  [[ $(pod_placement "$name") == "pool-a/kueue-test" ]] || fail "$name: pods not placed by the admission: $(pod_placement "$name")"
  is_active "$kind" "$name" || wait_for 10 "$name active" is_active "$kind" "$name"

  step "$kind: evicted → active until the pods are gone, then 0"
  evict "$kind" "$name"
  wait_for 10 "$name pods deleting" sh -c "$KUBECTL get pods -o jsonpath='{.items[*].metadata.deletionTimestamp}' | grep -q ."
  # The pods end 2 s after SIGTERM: while any is still there, Kueue must see the job active.
  if [[ -n $(pods_of "$name") ]]; then
    is_active "$kind" "$name" || fail "$name: active 0 while its pods terminate"
  fi
  wait_for 30 "$name pods gone" no_pods "$name"
  wait_for 10 "$name active 0 once its pods are gone" inactive "$kind" "$name"
  restore "$kind" "$name"

  step "$kind: re-admitted on pool-b → pods with the new nodeSelector"
  admit "$kind" "$name" pool-b
  wait_for 30 "$name running again" all_running "$name"
  [[ $(pod_placement "$name") == "pool-b/kueue-test" ]] || fail "$name: re-admitted pods: $(pod_placement "$name")"
  k delete "$kind" "$name" --wait=false >/dev/null
done
step "PASS"
