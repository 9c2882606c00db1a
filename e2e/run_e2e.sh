#!/usr/bin/env bash
# `kubetrain run` of the all-reduce example on this machine: two kubetrain-worker processes, no
# parameter servers, reducing through shared memory (the processes share this host's), then the
# same over Gloo on loopback (--communicator=gloo, the path of pods on different nodes); each job
# succeeds, the chief reports its accuracy, and every rank ends with the same parameters (the
# workers check a checksum at the end and fail otherwise). Then the worker's refusals of
# all-reduce set-ups that cannot work.
# Usage: run_e2e.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source e2e/lib.sh

dir=$(mktemp -d "${TMPDIR:-/tmp}/run-e2e.XXXXXX")
trap 'rm -rf "$dir"' EXIT
sed -e "s/--epochs=20/--epochs=2/" deploy/examples/fashion-mnist-allreduce.yaml >"$dir/job.yaml"
sed -e "s/--epochs=20/--epochs=2/" -e "s/- --mode=allreduce/- --mode=allreduce\n                - --communicator=gloo/" \
  deploy/examples/fashion-mnist-allreduce.yaml >"$dir/job-gloo.yaml"

run_job() {  # run_job JOB_YAML COMMUNICATOR CONNECTED_LINE
  local job=$1 communicator=$2 connected=$3
  step "kubetrain run of the all-reduce example (2 epochs, $communicator)"
  TMPDIR="$dir" "$BIN/kubetrain" run --bin-dir "$BIN" "$job" >"$dir/out.log" 2>&1 ||
    { tail -40 "$dir/out.log"; fail "kubetrain run exited $?"; }
  tail -4 "$dir/out.log"
  has "Succeeded" <"$dir/out.log" || fail "the job did not succeed"
  has "$connected.*rank=1" <"$dir/out.log" || fail "worker 1 never joined the all-reduce"
  has "All-reduce training.*communicator=$communicator" <"$dir/out.log" ||
    fail "no all-reduce start line with communicator=$communicator"
  summary=$(grep -o '{"event":"training_complete".*}' "$dir/out.log" | sed -n 1p)
  [[ -n "$summary" ]] || fail "no summary from the chief"
  python3 - "$summary" <<'PY' || fail "accuracy too low"
import json, sys
s = json.loads(sys.argv[1])
print("test_accuracy", s["test_accuracy"], "steps", s["steps"])
assert s["steps"] == 936, s
assert s["test_accuracy"] >= 0.84, s
PY
}
run_job "$dir/job.yaml" shm "Shared-memory communicator connected"
run_job "$dir/job-gloo.yaml" gloo "Gloo communicator connected"
step "kubetrain-worker refuses all-reduce set-ups that cannot work, naming the fix"
expect_error() {  # expect_error TEXT ARGS...: the worker exits 1 and says TEXT
  local text=$1; shift
  local out rc=0
  out=$("$BIN/kubetrain-worker" --metrics-port=0 --bind-address=127.0.0.1 "$@" 2>&1) || rc=$?
  [[ $rc -eq 1 ]] || fail "kubetrain-worker $* exited $rc, want 1: $out"
  has -F "$text" <<<"$out" || fail "kubetrain-worker $*: no \"$text\" in: $out"
  echo "refused: $text"
}
ps_cluster='{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]},"task":{"type":"worker","index":0}}'
expect_error "remove the PS replica spec" --mode=allreduce --tf-config="$ps_cluster"
expect_error "needs --device cuda" --mode=allreduce --communicator=nccl --device=cpu \
  --tf-config='{"cluster":{"worker":["127.0.0.1:2"]},"task":{"type":"worker","index":0}}'
expect_error "remove the Evaluator replica" --mode=allreduce \
  --tf-config='{"cluster":{"worker":["127.0.0.1:2"]},"task":{"type":"evaluator","index":0}}'
expect_error "allowed: auto, gloo, shm, nccl" --mode=allreduce --communicator=mpi
step "a worker waiting for a chief that never comes stops on SIGTERM (exit 143)"
"$BIN/kubetrain-worker" --metrics-port=0 --bind-address=127.0.0.1 --mode=allreduce \
  --tf-config='{"cluster":{"worker":["127.0.0.1:9","127.0.0.1:10"]},"task":{"type":"worker","index":1}}' \
  >"$dir/waiting.log" 2>&1 &
pid=$!
for _ in $(seq 100); do has "Waiting for the chief" <"$dir/waiting.log" && break; sleep 0.1; done
has "Waiting for the chief" <"$dir/waiting.log" || { cat "$dir/waiting.log"; fail "worker did not wait for the chief"; }
kill -TERM "$pid"
rc=0
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; fail "worker still waiting 5s after SIGTERM"; }
wait "$pid" || rc=$?
[[ $rc -eq 143 ]] || { cat "$dir/waiting.log"; fail "worker exited $rc after SIGTERM, want 143"; }
echo "stopped: exit $rc"

step "ranks waiting in the rendezvous for a peer that never comes stop on SIGTERM (exit 143)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cluster="{\"cluster\":{\"worker\":[\"127.0.0.1:$port\",\"127.0.0.1:9\",\"127.0.0.1:10\"]},\"task\":{\"type\":\"worker\",\"index\":INDEX}}"
pids=()
for i in 0 1; do
  "$BIN/kubetrain-worker" --metrics-port=0 --bind-address=127.0.0.1 --mode=allreduce \
    --tf-config="${cluster/INDEX/$i}" >"$dir/rank$i.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 100); do
  has "Coordinator listening" <"$dir/rank0.log" && sleep 1 && break; sleep 0.1
done
has "Coordinator listening" <"$dir/rank0.log" || { cat "$dir/rank0.log"; fail "the chief did not listen"; }
kill -TERM "${pids[@]}"
for i in 0 1; do
  for _ in $(seq 50); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.1; done
  kill -0 "${pids[$i]}" 2>/dev/null && { kill -9 "${pids[$i]}"; fail "rank $i still waiting 5s after SIGTERM"; }
  rc=0; wait "${pids[$i]}" || rc=$?
  [[ $rc -eq 143 ]] || { cat "$dir/rank$i.log"; fail "rank $i exited $rc after SIGTERM, want 143"; }
done
echo "stopped: both ranks exit 143"
echo "PASS run e2e"
