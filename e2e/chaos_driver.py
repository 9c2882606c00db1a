#!/usr/bin/env python3
"""Chaos driver for e2e/chaos_e2e.sh.

Runs six small jobs (ps-sync, ps-async and all-reduce, two of each) twice: once clean with
`kubetrain run`, then on a localkube that fails requests, cuts watches and compacts its history,
while this driver SIGKILLs one training process of every job and the operator itself. Asserts:
every job Succeeded; no two live processes ever claimed the same pod (the auditor); each job's
restarts in status equal the kills it took (a ps-async worker's may be left undone when the chief
ends the run first); each final accuracy is within 0.5 points of the same
job's clean run (1 point of the range of two clean runs for ps-async, which is not reproducible
run to run: ACCURACY_SLACK); the chief's final checkpoint is on disk; nothing is left after
deletion.

With FULL_DISK_DIR set (a small file system of its own, which chaos_e2e.sh mounts), a ps-sync
job checkpoints onto it while this driver fills it mid-run and frees it again: the chief warns
once, leaves no partial checkpoint file, writes checkpoints again and finishes.

Usage: chaos_driver.py KUBECTL BIN_DIR WORK_DIR KUBECONFIG
"""

import errno

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import yaml

KUBECTL, BIN, WORK, KUBECONFIG = sys.argv[1:5]
SEED = int(os.environ.get("CHAOS_SEED", str(int(time.time()))))
EPOCHS = 2
# How far a chaos run's accuracy may fall outside its clean runs'. ps-sync and all-reduce are
# reproducible to the bit, so a restart that loses nothing ends on the clean run's value. ps-async
# is not: the order of pushes decides, and a restart reorders the rest of the run. Two epochs of
# these jobs on 2 cores ended at 0.8683-0.8759 in 24 clean runs and at 0.8668-0.8756 in 9 runs
# with the ps killed (mean 0.8719 both, standard deviation 0.20 and 0.27 points): two clean runs
# show only part of that spread.
ACCURACY_SLACK = {"ps-sync": 0.005, "ps-async": 0.010, "allreduce": 0.005}
DEADLINE_S = 480  # the whole chaos phase; every wait below is bounded by it
MANAGED = "app.kubernetes.io/managed-by=kubetrain-operator"
rng = random.Random(SEED)
failures = []


def log(msg):
    print(f"chaos | {time.strftime('%H:%M:%S')} {msg}", flush=True)


def fail(msg):
    failures.append(msg)
    log("FAIL: " + msg)


# ---------------------------------------------------------------- the jobs
# Where a job with spec.checkpoint keeps its checkpoints inside the chief's pod (the default
# spec.checkpoint.mountPath, operator/api/checkpoint_storage.h).
CHECKPOINT_MOUNT = "/var/lib/kubetrain/checkpoints"


def manifest(name, example, mode, ckpt_dir, epochs=EPOCHS):
    """The job; its checkpoints in ckpt_dir, or with ckpt_dir None on a claim of its own
    (spec.checkpoint), as on a cluster where a pod's own files go with it."""
    with open(example) as f:
        job = yaml.safe_load(f)
    job["metadata"]["name"] = name
    if ckpt_dir is None:
        job["spec"].setdefault("checkpoint", {
            "volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "1Gi"}}}}})
    else:
        # --checkpoint-dir and spec.checkpoint both set the directory: the job is refused.
        job["spec"].pop("checkpoint", None)
    for spec in job["spec"]["replicaSpecs"].values():
        c = spec["template"]["spec"]["containers"][0]
        if c["command"] != ["kubetrain-worker"]:
            continue
        args = [a for a in c["args"] if not a.startswith(("--epochs=", "--mode="))]
        args += [f"--mode={mode}", f"--epochs={epochs}", "--checkpoint-every=1s",
                 "--log-every=2s"]
        if ckpt_dir is not None:
            args.append(f"--checkpoint-dir={ckpt_dir}")
        c["args"] = args
    job["spec"]["runPolicy"]["backoffLimit"] = 5
    return job


JOBS = [  # name, example, mode
    ("chaos-sync-a", "deploy/examples/fashion-mnist.yaml", "ps-sync"),
    ("chaos-sync-b", "deploy/examples/fashion-mnist.yaml", "ps-sync"),
    ("chaos-async-a", "deploy/examples/fashion-mnist.yaml", "ps-async"),
    ("chaos-async-b", "deploy/examples/fashion-mnist.yaml", "ps-async"),
    ("chaos-ar-a", "deploy/examples/fashion-mnist-allreduce.yaml", "allreduce"),
    ("chaos-ar-b", "deploy/examples/fashion-mnist-allreduce.yaml", "allreduce"),
]


def write_manifest(name, example, mode, phase, claim=False):
    path = os.path.join(WORK, f"{phase}-{name}.yaml")
    ckpt_dir = None if claim else os.path.join(WORK, f"ckpt-{phase}-{name}")
    with open(path, "w") as f:
        yaml.safe_dump(manifest(name, example, mode, ckpt_dir), f)
    return path


def host_path(name, pod_path):
    """Where a path in job `name`'s checkpoint claim, as its chief saw it, is on this machine:
    in the directory of the PersistentVolume bound to the claim (localkube's local-path)."""
    if not pod_path.startswith(CHECKPOINT_MOUNT + "/"):
        return pod_path
    claim = json.loads(kubectl("get", "pvc", f"{name}-checkpoint", "-o", "json"))
    pv = json.loads(kubectl("get", "pv", claim["spec"]["volumeName"], "-o", "json"))
    return os.path.join(pv["spec"]["hostPath"]["path"], pod_path[len(CHECKPOINT_MOUNT) + 1:])


# ---------------------------------------------------------------- kubectl with retries
def kubectl(*args, attempts=20, check=True):
    """kubectl against a server that fails a share of requests: retried, bounded."""
    last = None
    for i in range(attempts):
        p = subprocess.run([KUBECTL, "--kubeconfig", KUBECONFIG, *args], capture_output=True,
                           text=True, timeout=60)
        if p.returncode == 0:
            return p.stdout
        last = p.stderr.strip()
        time.sleep(min(0.2 * (i + 1), 2))
    if check:
        raise RuntimeError(f"kubectl {' '.join(args)}: {last}")
    return None


def jobs_status():
    out = kubectl("get", "tj", "-o", "json")
    return {j["metadata"]["name"]: j.get("status", {}) for j in json.loads(out)["items"]}


def condition(status, kind):
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in status.get("conditions", []))


# ---------------------------------------------------------------- processes of pods
def training_processes():
    """{(job, type, index): [pid, ...]} for every live kubetrain-ps/-worker process."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # exited, not yet reaped
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
            if os.path.basename(argv0) not in ("kubetrain-ps", "kubetrain-worker"):
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except (OSError, IndexError):
            continue
        job = env.get(b"KUBETRAIN_JOB_NAME", b"").decode()
        if not job.startswith("chaos-"):
            continue
        key = (job, env.get(b"KUBETRAIN_REPLICA_TYPE", b"").decode(),
               env.get(b"KUBETRAIN_REPLICA_INDEX", b"").decode())
        found.setdefault(key, []).append(int(entry))
    return found


class Auditor(threading.Thread):
    """Never two live processes for one pod: a restarted pod's new process must not start while
    its predecessor still runs (two chiefs, two ps with one name)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.scans = 0
        self.duplicates = []

    def run(self):
        while not self.stop.wait(0.1):
            for key, pids in training_processes().items():
                if len(pids) > 1:
                    self.duplicates.append((key, pids))
            self.scans += 1


# ---------------------------------------------------------------- phases
def summary_of(text):
    """The chief's training_complete JSON line (possibly behind a `kubetrain run` prefix)."""
    for line in text.splitlines():
        if '"event":"training_complete"' in line and "{" in line:
            try:
                return json.loads(line[line.index("{"):])
            except ValueError:
                continue
    return None


def clean_runs():
    """Each job with `kubetrain run`, two at a time; returns {name: [test_accuracy, ...]}.

    ps-sync and all-reduce runs are reproducible to the bit, so one clean run is the reference.
    ps-async runs are not (the order of pushes decides): two clean runs show the spread that the
    chaos run is measured against."""
    accuracy = {}
    pending = [(*job, run) for job in JOBS for run in range(2 if job[2] == "ps-async" else 1)]
    while pending:
        batch, pending = pending[:2], pending[2:]
        procs = []
        for name, example, mode, run in batch:
            path = write_manifest(name, example, mode, f"clean{run}")  # a folder per run
            procs.append((name, subprocess.Popen([os.path.join(BIN, "kubetrain"), "run", path],
                                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                 text=True)))
        for name, p in procs:
            out, _ = p.communicate(timeout=300)
            s = summary_of(out)
            if p.returncode != 0 or s is None:
                print(out[-3000:])
                raise RuntimeError(f"clean run of {name} failed (exit {p.returncode})")
            accuracy.setdefault(name, []).append(s["test_accuracy"])
            log(f"clean {name}: accuracy {s['test_accuracy']:.4f} in {s.get('steps')} steps")
    return accuracy


class Operator:
    def __init__(self):
        self.proc = None
        self.kills = 0
        self.logf = open(os.path.join(WORK, "operator.log"), "a")

    def start(self):
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "kubetrain-operator"), "--kubeconfig", KUBECONFIG,
             "--metrics-address", "127.0.0.1:0", "--health-address", "127.0.0.1:0",
             "--progress-interval", "1s", "--progress-write-interval", "2s"],
            stdout=self.logf, stderr=subprocess.STDOUT)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.kills += 1
        log(f"killed the operator (kill {self.kills})")
        time.sleep(rng.uniform(0.5, 2.0))
        self.start()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                fail("the operator did not stop within 5 s of SIGTERM")
                self.proc.kill()


def chaos(clean_accuracy):
    op = Operator()
    op.start()
    auditor = Auditor()
    auditor.start()
    for name, example, mode in JOBS:
        kubectl("apply", "-f", write_manifest(name, example, mode, "chaos", claim=True))
    total_steps = 60000 // 128 * EPOCHS  # global batch 2 x 64
    # One kill per job, at a random step of its first 60%, of a random process of the job.
    kill_at = {name: rng.randint(total_steps // 8, total_steps * 6 // 10) for name, _, _ in JOBS}
    operator_kills_at = sorted(rng.uniform(2, 14) for _ in range(2))
    kills = {name: [] for name in kill_at}
    started = time.time()
    done = set()
    while time.time() - started < DEADLINE_S:
        if operator_kills_at and time.time() - started >= operator_kills_at[0]:
            operator_kills_at.pop(0)
            op.kill()
        try:
            statuses = jobs_status()
        except RuntimeError as e:
            log(f"status not read: {e}")
            continue
        for name, st in statuses.items():
            if condition(st, "Failed"):
                fail(f"{name} Failed: {st.get('conditions')}")
                done.add(name)
            elif condition(st, "Succeeded"):
                done.add(name)
        if failures or len(done) == len(JOBS):
            break
        procs = training_processes()
        for name, at in kill_at.items():
            step = (statuses.get(name, {}).get("progress") or {}).get("step", 0)
            if kills[name] or name in done or step < at:
                continue
            victims = [(k, pids[0]) for k, pids in procs.items() if k[0] == name]
            if not victims:
                continue
            (job, rtype, index), pid = rng.choice(victims)
            os.kill(pid, signal.SIGKILL)
            kills[name].append(f"{rtype.lower()}-{index}")
            log(f"killed {job} {rtype.lower()}-{index} (pid {pid}) at step {step}")
        time.sleep(0.3)
    else:
        fail(f"jobs not finished within {DEADLINE_S} s: {sorted(set(kill_at) - done)}")

    auditor.stop.set()
    auditor.join()
    elapsed = time.time() - started
    statuses = jobs_status()
    log(f"auditor: {auditor.scans} scans of the training processes")
    for key, pids in auditor.duplicates[:10]:
        fail(f"two live processes for pod {key}: pids {pids}")

    rows = []
    for name, _, mode in JOBS:
        st = statuses.get(name, {})
        restarts = sum(r.get("restarts", 0) for r in st.get("replicaStatuses", {}).values())
        # A ps-async chief trains on alone when another worker dies, and may end the run (the job
        # succeeds with the chief) before the operator, itself killed meanwhile, restarts that
        # worker: a restart that was no longer due is not missing.
        unrestarted = [k for k in kills[name] if mode == "ps-async" and k != "worker-0"]
        if not len(kills[name]) - len(unrestarted) <= restarts <= len(kills[name]):
            fail(f"{name}: {restarts} restarts in status for {len(kills[name])} kills {kills[name]}")
        elif restarts < len(kills[name]):
            log(f"{name}: the chief ended the run before {kills[name]} was restarted")
        logs = kubectl("logs", f"{name}-worker-0", check=False) or ""
        s = summary_of(logs)
        if s is None:
            fail(f"{name}: no training_complete summary in the chief's log")
            continue
        low, high = min(clean_accuracy[name]), max(clean_accuracy[name])
        slack = ACCURACY_SLACK[mode]
        if not low - slack <= s["test_accuracy"] <= high + slack:
            fail(f"{name}: accuracy {s['test_accuracy']:.4f} is more than {slack * 100:g} points "
                 f"from the clean runs' {low:.4f}..{high:.4f}")
        # No checkpoint lost: the final one the chief reported is on disk.
        final = s.get("checkpoint", "")
        if not final or not os.path.isfile(host_path(name, final)):
            fail(f"{name}: the chief's final checkpoint {final!r} is not on disk")
        clean = "..".join(f"{a:.4f}" for a in sorted(set(clean_accuracy[name])))
        rows.append((name, mode, kills[name], restarts, clean, s["test_accuracy"]))

    log(f"chaos phase: {elapsed:.0f} s, {sum(len(k) for k in kills.values())} pod kills, "
        f"{op.kills} operator kills")
    print(f"{'job':15} {'mode':10} {'killed':12} {'restarts':8} {'clean':15} {'chaos':7}")
    for name, mode, k, r, a, b in rows:
        print(f"{name:15} {mode:10} {','.join(k) or '-':12} {r:<8} {a:15} {b:.4f}")

    kubectl("delete", "tj", "--all", "--wait=false")
    for _ in range(300):
        left = kubectl("get", "pods,services,secrets", "-l", MANAGED, "-o", "name", check=False)
        if left is not None and not left.strip():
            break
        time.sleep(0.2)
    else:
        fail(f"objects left 60 s after deleting the jobs: {left}")
    op.stop()


# ---------------------------------------------------------------- a full checkpoint disk
FULL_DISK_DEADLINE_S = 240
FULL_DISK_EPOCHS = 10
FAILING = ("Checkpoint failed; training goes on", "Checkpoint writes are failing again")


def fill(path):
    """Writes `path` until its file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)


def full_disk(mount):
    ckpt = os.path.join(mount, "checkpoints")
    path = os.path.join(WORK, "disk-chaos-disk.yaml")
    with open(path, "w") as f:
        # Long enough (about 25 s on 2 cores) that the disk is freed again well before the end:
        # a final checkpoint that cannot be written fails the run.
        yaml.safe_dump(manifest("chaos-disk", "deploy/examples/fashion-mnist.yaml", "ps-sync", ckpt,
                                epochs=FULL_DISK_EPOCHS), f)
    lines = []
    proc = subprocess.Popen([os.path.join(BIN, "kubetrain"), "run", path], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    started = time.time()

    def count(*texts):
        return sum(1 for line in list(lines) if any(t in line for t in texts))

    def wait_for(what, *texts, at_least=1):
        while count(*texts) < at_least:
            if proc.poll() is not None or time.time() - started > FULL_DISK_DEADLINE_S:
                raise RuntimeError(f"no {what} (exit {proc.poll()})")
            time.sleep(0.1)

    filler = os.path.join(mount, "filler")
    try:
        # Step 0's checkpoint and a periodic one, then the disk fills.
        wait_for("periodic checkpoint", 'msg="Saved checkpoint"', at_least=2)
        fill(filler)
        log(f"full disk: filled {mount} at {time.time() - started:.0f} s")
        wait_for("warning", *FAILING)
        time.sleep(2)  # a retry's worth or two: they back off from 1 s
        partial = [n for n in os.listdir(ckpt) if n.endswith(".tmp")]
        if len(partial) > 1:
            fail(f"full disk: {len(partial)} partial files while the disk is full: {partial}")
        os.remove(filler)
        log(f"full disk: freed {mount} at {time.time() - started:.0f} s")
        wait_for("'Checkpoints written again'", "Checkpoints written again")
        proc.wait(timeout=max(1, FULL_DISK_DEADLINE_S - (time.time() - started)))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        fail(f"full disk: {e}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if os.path.exists(filler):
            os.remove(filler)
        reader.join(timeout=10)
    if failures:
        print("".join(lines[-60:]))
        return
    s = summary_of("".join(lines))
    if proc.returncode != 0 or s is None:
        fail(f"full disk: the job ended with exit {proc.returncode}, summary {s}")
    elif not os.path.isfile(s.get("checkpoint", "")):
        fail(f"full disk: the final checkpoint {s.get('checkpoint')!r} is not on disk")
    if count(*FAILING) != 1:
        fail(f"full disk: {count(*FAILING)} warnings of failing checkpoints, not one")
    partial = [n for n in os.listdir(ckpt) if n.endswith(".tmp")]
    if partial:
        fail(f"full disk: partial files left: {partial}")
    log(f"full disk: one warning, written again, finished in {time.time() - started:.0f} s")


def main():
    log(f"seed {SEED} (CHAOS_SEED={SEED} repeats this run's choices)")
    clean = clean_runs()
    chaos(clean)
    if os.environ.get("FULL_DISK_DIR"):
        full_disk(os.environ["FULL_DISK_DIR"])
    if failures:
        print(f"chaos: {len(failures)} failures", file=sys.stderr)
        sys.exit(1)
    log("PASS")


if __name__ == "__main__":
    main()
