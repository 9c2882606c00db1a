#!/usr/bin/env bash
# `kubetrain run` of the all-reduce example on this machine: two kubetrain-worker processes, no
# parameter servers, Gloo over loopback; the job succeeds, the chief reports its accuracy, and
# every rank ends with the same parameters (the workers check a checksum at the end and fail
# otherwise).
# Usage: run_e2e.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source e2e/lib.sh

dir=$(mktemp -d "${TMPDIR:-/tmp}/run-e2e.XXXXXX")
trap 'rm -rf "$dir"' EXIT
sed -e "s/--epochs=20/--epochs=2/" deploy/examples/fashion-mnist-allreduce.yaml >"$dir/job.yaml"

step "kubetrain run of the all-reduce example (2 epochs)"
TMPDIR="$dir" "$BIN/kubetrain" run --bin-dir "$BIN" "$dir/job.yaml" >"$dir/out.log" 2>&1 ||
  { tail -40 "$dir/out.log"; fail "kubetrain run exited $?"; }
tail -4 "$dir/out.log"
has "Succeeded" <"$dir/out.log" || fail "the job did not succeed"
has "Gloo communicator connected.*rank=1" <"$dir/out.log" || fail "worker 1 never joined the all-reduce"
has "All-reduce training.*communicator=gloo" <"$dir/out.log" || fail "no all-reduce start line"
summary=$(grep -o '{"event":"training_complete".*}' "$dir/out.log" | sed -n 1p)
[[ -n "$summary" ]] || fail "no summary from the chief"
python3 - "$summary" <<'PY' || fail "accuracy too low"
import json, sys
s = json.loads(sys.argv[1])
print("test_accuracy", s["test_accuracy"], "steps", s["steps"])
assert s["steps"] == 936, s
assert s["test_accuracy"] >= 0.84, s
PY
echo "PASS run e2e"
