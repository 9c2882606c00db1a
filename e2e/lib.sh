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

step() { echo "=== $*"; }

# `grep -q` for pipelines: reads all its input, so the writer never dies of SIGPIPE (which
# pipefail would report as a failure).
has() { grep "$@" >/dev/null; }

start_localkube() {
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

# curl against localkube with the bearer token; extra args follow.
lk_curl() {
  curl -sS --cacert <(sed -n 's/.*certificate-authority-data: //p' "$KUBECONFIG" | base64 -d) \
    -H "Authorization: Bearer $LK_TOKEN" "$@"
}
