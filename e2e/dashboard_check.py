#!/usr/bin/env python3
"""Checks the Grafana dashboard of the chart (charts/kubetrain/dashboards/kubetrain.json).

  dashboard_check.py [HELM]

- valid JSON with a uid, a title and panels; panel ids unique;
- every panel but a row has a Prometheus datasource (the ${datasource} variable, which the
  templating defines) and targets, each with a refId unique in the panel and a PromQL expr;
- every metric a query names is one the code registers (the string literals that
  prometheus-cpp's builders get in common/, ps/, worker/ and operator/), histogram series by their
  family name;
- every expr parses as PromQL (promtool check rules), when promtool is installed;
- with HELM: the chart renders no dashboard by default, and with
  metrics.grafanaDashboard.enabled=true one ConfigMap labelled grafana_dashboard: "1" holding
  the file unchanged.
Prints what it checked; exits 1 naming each problem.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DASHBOARD = os.path.join(ROOT, "charts/kubetrain/dashboards/kubetrain.json")
CODE_DIRS = ["common", "ps", "worker", "operator"]
# Grafana's interval variables, as a Prometheus rule file must spell them.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}

problems = []


def problem(text):
    problems.append(text)


def code_metric_names():
    names = set()
    literal = re.compile(r'"(kubetrain_[a-z0-9_]+)"')
    for d in CODE_DIRS:
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, d)):
            dirnames[:] = [x for x in dirnames if x != "tests"]
            for f in files:
                if f.endswith(".cc"):
                    with open(os.path.join(dirpath, f), encoding="utf-8") as src:
                        names.update(literal.findall(src.read()))
    return names


def expand_alternation(pattern):
    """Names a simple regex like kubetrain_x_(a|b)_total matches (one group level)."""
    m = re.search(r"\(([^()]*)\)", pattern)
    if not m:
        return [pattern]
    out = []
    for alt in m.group(1).split("|"):
        out.extend(expand_alternation(pattern[: m.start()] + alt + pattern[m.end():]))
    return out


def query_metric_names(expr):
    names = set()
    for m in re.finditer(r'__name__\s*=~?\s*"([^"]+)"', expr):
        names.update(expand_alternation(m.group(1)))
    stripped = re.sub(r'"[^"]*"', '""', expr)
    names.update(re.findall(r"\bkubetrain_[a-z0-9_]+\b", stripped))
    return names


def family(name):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def check_panels(dash, known):
    exprs = []
    ids = [p.get("id") for p in dash["panels"]]
    for dup in sorted({i for i in ids if ids.count(i) > 1}, key=str):
        problem(f"panel id {dup} is used more than once")
    variables = {v.get("name") for v in dash.get("templating", {}).get("list", [])}
    for p in dash["panels"]:
        where = f'panel {p.get("id")} "{p.get("title")}"'
        if not p.get("title"):
            problem(f"{where}: no title")
        if "gridPos" not in p:
            problem(f"{where}: no gridPos")
        if p.get("type") == "row":
            continue
        ds = p.get("datasource") or {}
        if ds.get("type") != "prometheus" or ds.get("uid") != "${datasource}":
            problem(f'{where}: datasource is {ds}, not Prometheus through ${{datasource}}')
        if "datasource" not in variables:
            problem("the templating has no datasource variable")
        targets = p.get("targets") or []
        if not targets:
            problem(f"{where}: no targets")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            problem(f"{where}: refIds {refs} are missing or repeated")
        for t in targets:
            expr = (t.get("expr") or "").strip()
            if not expr:
                problem(f"{where} target {t.get('refId')}: no expr")
                continue
            exprs.append(expr)
            names = query_metric_names(expr)
            if not names:
                problem(f"{where}: {expr} names no kubetrain metric")
            for n in sorted(names):
                if family(n) not in known:
                    problem(f"{where}: {n} is not a metric the code registers")
    return exprs


def check_promql(exprs):
    promtool = shutil.which("promtool")
    if not promtool:
        print("dashboard: promtool not installed; PromQL syntax not checked")
        return
    rules = []
    for i, e in enumerate(exprs):
        for var, value in GRAFANA_VARS.items():
            e = e.replace(var, value)
        rules.append({"record": f"dashboard:query_{i}", "expr": e})
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    try:
        r = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        problem(f"promtool refused a query: {r.stdout}{r.stderr}")
    else:
        print(f"dashboard: promtool parsed all {len(exprs)} queries")


def check_chart(helm, raw):
    def render(*extra):
        r = subprocess.run([helm, "template", "kt", os.path.join(ROOT, "charts/kubetrain"),
                            "--namespace", "monitoring-test", *extra],
                           capture_output=True, text=True)
        if r.returncode != 0:
            problem(f"helm template {' '.join(extra)} failed: {r.stderr}")
            return []
        return [d for d in yaml.safe_load_all(r.stdout) if d]

    def dashboards(docs):
        return [d for d in docs if d.get("kind") == "ConfigMap"
                and "kubetrain.json" in (d.get("data") or {})]

    if dashboards(render()):
        problem("the chart renders the dashboard ConfigMap by default; it must be off")
    found = dashboards(render("--set", "metrics.grafanaDashboard.enabled=true"))
    if len(found) != 1:
        problem(f"metrics.grafanaDashboard.enabled=true renders {len(found)} dashboard ConfigMaps")
        return
    cm = found[0]
    if cm["metadata"].get("labels", {}).get("grafana_dashboard") != "1":
        problem(f'the dashboard ConfigMap lacks the label grafana_dashboard: "1": {cm["metadata"]}')
    if cm["data"]["kubetrain.json"].strip() != raw.strip():
        problem("the ConfigMap's kubetrain.json differs from charts/kubetrain/dashboards/kubetrain.json")
    print("dashboard: chart renders it only when enabled, labelled grafana_dashboard: \"1\"")


def main():
    with open(DASHBOARD, encoding="utf-8") as f:
        raw = f.read()
    try:
        dash = json.loads(raw)
    except json.JSONDecodeError as e:
        print(f"FAIL: {DASHBOARD} is not JSON: {e}")
        return 1
    for key in ("uid", "title", "panels"):
        if not dash.get(key):
            problem(f"the dashboard has no {key}")
    known = code_metric_names()
    exprs = check_panels(dash, known) if dash.get("panels") else []
    print(f"dashboard: {len(dash.get('panels', []))} panels, {len(exprs)} queries, "
          f"{len(known)} metric names in the code")
    if exprs:
        check_promql(exprs)
    if len(sys.argv) > 1:
        if os.access(sys.argv[1], os.X_OK):
            check_chart(sys.argv[1], raw)
        else:
            print(f"dashboard: no helm at {sys.argv[1]}; chart rendering not checked")
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        return 1
    print("PASS dashboard check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
