# Sourced by an e2e script that runs a real Prometheus: dashboard_queries_check checks that every
# query of the chart's Grafana dashboard (charts/kubetrain/dashboards/kubetrain.json) returned
# data at some point of the last WINDOW seconds (a range query, so a job that has finished and
# whose pods are gone still counts). Grafana's $__rate_interval becomes RATE_INTERVAL (default
# 10s, for a 1 s scrape interval).
#
#   dashboard_queries_check PROMETHEUS_URL WINDOW_SECONDS
# Prints each query with its number of series; returns 1 naming the queries without data.
dashboard_queries_check() {
  local url=$1 window=$2
  python3 - "$url" "$window" "${RATE_INTERVAL:-10s}" \
    "$(dirname "${BASH_SOURCE[0]}")/../charts/kubetrain/dashboards/kubetrain.json" <<'PY'
import json, sys, time, urllib.parse, urllib.request
url, window, rate_interval, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
dash = json.load(open(path))
end = time.time()
empty = []
for p in dash["panels"]:
    for t in p.get("targets", []):
        expr = t["expr"].replace("$__rate_interval", rate_interval)
        q = urllib.parse.urlencode({"query": expr, "start": end - window, "end": end, "step": "2s"})
        with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}", timeout=10) as r:
            body = json.load(r)
        series = body["data"]["result"] if body.get("status") == "success" else []
        points = sum(len(s["values"]) for s in series)
        print(f"dashboard query: {len(series)} series, {points} points: {p['title']}: {expr}")
        if not series:
            empty.append(f"{p['title']}: {expr}")
for e in empty:
    print(f"FAIL: no data for the dashboard query {e}")
sys.exit(1 if empty else 0)
PY
}
