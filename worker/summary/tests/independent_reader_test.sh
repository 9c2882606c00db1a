#!/usr/bin/env bash
# An event file from EventFileWriter, read by readers kubetrain did not write
# (node/read_event_file.js: @roboflow/tfrecords checks both CRCs of every record,
# google-protobuf decodes the Events): the version record, then each step's tags and values. A
# copy with one data byte flipped, and one with a length byte flipped, must be refused, so the
# CRC checks are known to run. Exits 77 (skipped) when node or the packages are missing.
#
#   independent_reader_test.sh SAMPLE_WRITER MODULES_PREFIX   (MODULES_PREFIX: .tools/tfrecords)
set -euo pipefail

writer=$1
modules=$2/node_modules
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! command -v node >/dev/null; then
  echo "SKIP: node is not installed (scripts/install-deps installs it)"
  exit 77
fi
if [ ! -f "$modules/@roboflow/tfrecords/package.json" ]; then
  echo "SKIP: $modules/@roboflow/tfrecords is missing; run worker/summary/tests/node/install"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

file=$("$writer" "$work/summaries")
[[ $(basename "$file") =~ ^events\.out\.tfevents\.[0-9]{10}\.[^/]+$ ]] ||
  { echo "FAIL: file name $file is not TensorFlow's"; exit 1; }

node "$here/node/read_event_file.js" "$modules" "$file" >"$work/events.jsonl"
python3 - "$work/events.jsonl" <<'PY'
import json, math, sys
events = [json.loads(line) for line in open(sys.argv[1])]
assert events[0]["file_version"] == "brain.Event:2", events[0]
assert events[0]["wall_time"] > 1e9, events[0]
steps = events[1:]
assert [e["step"] for e in steps] == list(range(0, 100, 10)), [e["step"] for e in steps]
for e in steps:
    s = e["step"]
    assert e["wall_time"] == 1.7e9 + s, e
    tags = [t for t, _ in e["values"]]
    assert tags == ["loss", "accuracy", "examples_per_second"], e
    v = dict(e["values"])
    assert math.isclose(v["loss"], 1 / (1 + s), rel_tol=1e-6), e
    assert math.isclose(v["accuracy"], s / 100, rel_tol=1e-6, abs_tol=1e-7), e
    assert v["examples_per_second"] == 1000 + s, e
print(f"read {len(events)} records: file version, then steps 0..90 with their values")
PY

# Damage: record 1 starts after the version record; flip a byte of its data, then of its length.
first_len=$(od -An -tu8 -N8 "$file" | tr -d ' ')
second=$((16 + first_len))
flip() {  # FILE OFFSET
  local byte
  byte=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
cp "$file" "$work/bad-data"
flip "$work/bad-data" $((second + 14))
if node "$here/node/read_event_file.js" "$modules" "$work/bad-data" 2>"$work/err"; then
  echo "FAIL: a flipped data byte was not noticed"; exit 1
fi
grep -q "Wrong Data CRC" "$work/err" || { cat "$work/err"; exit 1; }
cp "$file" "$work/bad-length"
flip "$work/bad-length" "$second"
if node "$here/node/read_event_file.js" "$modules" "$work/bad-length" 2>"$work/err"; then
  echo "FAIL: a flipped length byte was not noticed"; exit 1
fi
grep -q "Wrong Length CRC" "$work/err" || { cat "$work/err"; exit 1; }
echo "PASS: damaged copies refused (data CRC, length CRC)"
