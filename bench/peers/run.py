#!/usr/bin/env python3
# Over 500 lines: one driver whose cases, rounds and report share one config and result set.
# bench/peers: kubetrain against PyTorch (torch.distributed, CPU) and OpenMPI on the same work, on
# this machine over 127.0.0.1, interleaved (each round runs every case once, and odd rounds run
# them in the reverse order: A B, B A, ...), printing each figure as min/median/max over the
# rounds and the median ratio against its goal, MET or MISSED.
#
#   scripts/install-deps --peers               # python3-torch (PyTorch 1.13, Debian's CPU build)
#   bench/peers/run.py [--bin build/bin] [--rounds 3] [--epochs 20] [--cnn-examples 0]
#       [--parts roofline,mlp,cnn,allreduce,ps] [--modes ps-sync,ps-async,allreduce,allreduce-gloo]
#   bench/peers/run.py --smoke                   # tiny sizes, one round (the CTest test)
#
# Cases (kubetrain's binaries from --bin; PyTorch in --python, /usr/bin/python3 by default):
#   mlp        Fashion-MNIST MLP 784-256-128-10, 2 workers x batch 64, momentum 0.9, lr 0.04 for
#              the global batch of 128 with cosine decay to 5% over the run, --epochs epochs:
#              `kubetrain run` of a TrainingJob (1 ps for the ps modes) per --modes entry vs
#              PyTorch DDP (gloo, 2 processes x 1 thread). allreduce is what `kubetrain run`
#              picks on one machine (its shared-memory communicator); allreduce-gloo the same
#              over Gloo on loopback TCP, the path between nodes. examples/s, time to the first
#              per-epoch test accuracy >= --target-accuracy, final test accuracy.
#   cnn        conv5x5x32-pool-conv5x5x64-pool-dense128-10, one epoch (or --cnn-examples
#              training examples), kubetrain --cnn-mode (all-reduce by default, as DDP) vs DDP:
#              examples/s.
#   roofline   train_step (kubetrain's forward+backward, one BLAS thread) examples/s x
#              min(cores, workers): each training figure is reported as a fraction of it.
#   allreduce  busbw of an in-place float-sum all-reduce, 2 ranks, --sizes, median of --iters
#              timed iterations: allreduce_bench (kubetrain's GlooCommunicator, and OpenMPI's
#              MPI_Allreduce under mpirun over TCP on lo; then kubetrain's shared-memory
#              communicator, and OpenMPI over its shared-memory BTL) vs torch.distributed gloo.
#   ps         push+pull of a --ps-mb MiB model to one server process: ps_throughput (kubetrain-ps,
#              async: each push applies an SGD step; through shared memory, then over gRPC/TCP)
#              vs torch.distributed.rpc (TensorPipe with its default transports, then the uv TCP
#              transport only) pushing to and pulling from a server process that applies the
#              same step.
#
# Both sides of the training cases start timing after their data is loaded and end after the
# final evaluation and checkpoint, evaluate the 10k test set after every epoch on the chief (rank
# 0; kubetrain's all-reduce ranks share each one) inside the timed run, and checkpoint every
# 30 s and at the end. Differences that remain are
# printed with the results. Every child runs in its own session and is killed, with all of its
# descendants, on exit, on a case's timeout, and on SIGINT/SIGTERM (the driver then exits within
# 2 s). Exit status: 0 when every case ran (goals MISSED included), 1 when a case failed, 2 on a
# usage error or missing dependency; with --smoke, 77 when python3-torch is not installed.
import argparse
import datetime
import gzip
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TORCH_PEER = os.path.join(HERE, "torch_peer.py")
INSTALL_HINT = "install it with `scripts/install-deps --peers` (Debian's python3-torch)"
SKIP_CODE = 77


class Stopped(Exception):
    pass


class CaseFailed(Exception):
    pass


# ---- child processes -------------------------------------------------------------------------

_children = []  # Popen objects still to be reaped
_children_lock = threading.Lock()
_stopping = False


def _tree(pid):
    """pid and every descendant of it (from /proc), children before their parents' death."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo and len(out) < 10000:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def _signal_all(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except OSError:
            pass


def kill_tree(proc, grace=0.8):
    """SIGTERM proc's session and every descendant, then SIGKILL whatever is left after grace."""
    if proc.poll() is not None:
        pids = [p for p in _tree(proc.pid) if p != proc.pid]
        if not pids:
            return
    else:
        pids = _tree(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except OSError:
        pass
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        alive = [p for p in pids if os.path.exists(f"/proc/{p}") and not _zombie(p)]
        if not alive:
            break
        time.sleep(0.05)
    pids = sorted(set(pids) | set(_tree(proc.pid) if proc.poll() is None else []))
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    _signal_all(pids, signal.SIGKILL)
    try:
        proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        pass


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return stat[stat.rindex(")") + 2] == "Z"
    except (OSError, ValueError, IndexError):
        return False


def kill_all():
    with _children_lock:
        procs = list(_children)
    for p in procs:
        kill_tree(p, grace=0.6)


def _on_signal(signum, _frame):
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise Stopped(signal.Signals(signum).name)


class Job:
    """A child process (own session) whose merged stdout+stderr is collected by a thread."""

    def __init__(self, argv, env=None, cwd=None, echo=None):
        self.argv = argv
        self.lines = []
        self.echo = echo
        full_env = dict(os.environ)
        full_env.update(env or {})
        with _children_lock:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=full_env, cwd=cwd,
                                         start_new_session=True)
            _children.append(self.proc)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            if self.echo and self.echo(line):
                print("      " + line, flush=True)

    def wait(self, deadline):
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                kill_tree(self.proc)
                self._forget()
                raise CaseFailed(f"timed out: {' '.join(self.argv[:3])} ...")
            time.sleep(0.05)
        self.reader.join(timeout=2)
        kill_tree(self.proc)  # descendants it left behind, if any
        self._forget()
        return self.proc.returncode

    def _forget(self):
        with _children_lock:
            if self.proc in _children:
                _children.remove(self.proc)

    def tail(self, n=15):
        return "\n".join("      | " + line for line in self.lines[-n:])


def run_jobs(jobs, timeout, what):
    deadline = time.monotonic() + timeout
    codes = []
    try:
        for j in jobs:
            codes.append(j.wait(deadline))
    except CaseFailed as e:
        for j in jobs:
            kill_tree(j.proc)
            j._forget()
        raise CaseFailed(f"{what}: {e}\n" + "\n".join(j.tail() for j in jobs))
    if any(c != 0 for c in codes):
        raise CaseFailed(f"{what}: exit status {codes}\n" + "\n".join(j.tail() for j in jobs))
    return jobs


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def result_of(job):
    for line in reversed(job.lines):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise CaseFailed("no RESULT line:\n" + job.tail())


# ---- data ------------------------------------------------------------------------------------

FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "t10k": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def subset_idx(src, dst, count):
    with gzip.open(src, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    count = min(count, dims[0])
    per = 1
    for d in dims[1:]:
        per *= d
    header = raw[:4] + count.to_bytes(4, "big") + raw[8 : 4 + 4 * ndim]
    with gzip.open(dst, "wb", compresslevel=1) as f:
        f.write(header + raw[4 + 4 * ndim : 4 + 4 * ndim + count * per])
    return count


def make_subset(data_dir, out_dir, train_count, test_count):
    """The first train_count / test_count examples of each split, for both sides to read."""
    os.makedirs(out_dir, exist_ok=True)
    for split, count in (("train", train_count), ("t10k", test_count)):
        for name in FILES[split]:
            subset_idx(os.path.join(data_dir, name), os.path.join(out_dir, name), count)
    return out_dir


# ---- kubetrain cases -------------------------------------------------------------------------

LOG_TIME = re.compile(r"time=(\S+)")
EVAL = re.compile(r"^worker-0\s*\|.*msg=evaluation .*epoch=(\d+) .*accuracy=([0-9.]+)")


def log_time(line):
    m = LOG_TIME.search(line)
    if not m:
        return None
    return datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()


def kubetrain_job(cfg, tmp, mode, model, epochs, data_dir):
    """A TrainingJob (JSON, which is YAML) for `kubetrain run`."""
    def container(binary, args):
        return {"template": {"spec": {"containers": [{
            "name": "kubetrain", "image": "kubetrain/worker:0.1.0",
            "command": [os.path.join(cfg.bin, binary)], "args": args}]}}}

    global_batch = cfg.batch_size * 2
    worker_args = [f"--mode={mode.split('-gloo')[0]}", f"--model={model}", f"--epochs={epochs}",
                   f"--batch-size={cfg.batch_size}", "--optimizer=momentum",
                   f"--momentum={cfg.momentum}",
                   # --lr is the rate of the global batch: sync modes use it as is; ps-async
                   # scales it linearly to one worker's batch (kubetrain's rule).
                   f"--lr={cfg.lr}", f"--lr-reference-batch={global_batch}", "--lr-decay",
                   f"--lr-floor={cfg.lr_floor}", f"--seed={cfg.seed}", f"--data-dir={data_dir}",
                   "--threads=1"]
    if mode == "allreduce-gloo":
        worker_args.append("--communicator=gloo")
    replicas = {"Worker": dict(container("kubetrain-worker", worker_args), replicas=2,
                               restartPolicy="Never")}
    if not mode.startswith("allreduce"):
        replicas["PS"] = dict(container("kubetrain-ps", []), replicas=1, restartPolicy="Never")
    job = {"apiVersion": "kubetrain.dev/v1", "kind": "TrainingJob",
           "metadata": {"name": f"peers-{model}-{mode}"},
           "spec": {"replicaSpecs": replicas, "successPolicy": "ChiefOnly",
                    "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "All"}}}
    path = os.path.join(tmp, f"job-{model}-{mode}.json")
    with open(path, "w") as f:
        json.dump(job, f)
    return path


def run_kubetrain(cfg, tmp, mode, model, epochs, data_dir, timeout):
    path = kubetrain_job(cfg, tmp, mode, model, epochs, data_dir)
    ckpt = os.path.join(tmp, "kubetrain-tmp")
    shutil.rmtree(ckpt, ignore_errors=True)
    os.makedirs(ckpt)
    env = {"TMPDIR": ckpt, "PATH": cfg.bin + os.pathsep + os.environ.get("PATH", "")}
    job = Job([os.path.join(cfg.bin, "kubetrain"), "run", path], env=env, cwd=tmp,
              echo=(lambda l: "kubetrain | progress" in l) if cfg.verbose else None)
    run_jobs([job], timeout, f"kubetrain {model} {mode}")
    summary, complete_at, evals = None, None, []
    for line in job.lines:
        if "chief summary:" in line:
            summary = json.loads(line.split("chief summary:", 1)[1])
        elif line.startswith("worker-0") and 'msg="Training complete"' in line:
            complete_at = log_time(line)
        m = EVAL.search(line)
        if m:
            evals.append((log_time(line), int(m.group(1)), float(m.group(2))))
    if summary is None or complete_at is None:
        raise CaseFailed(f"kubetrain {model} {mode}: no summary\n" + job.tail())
    # The chief's wall_seconds runs from its trainer's start to its summary, just before the
    # "Training complete" line: the evaluations are placed on that clock.
    start = complete_at - summary["wall_seconds"]
    return {"examples_per_sec": summary["examples_per_sec"],
            "test_accuracy": summary["test_accuracy"], "wall_seconds": summary["wall_seconds"],
            "evals": [{"epoch": e, "seconds": t - start, "accuracy": a} for t, e, a in evals]}


def run_ddp(cfg, tmp, model, epochs, data_dir, timeout):
    port = free_port()
    ckpt = os.path.join(tmp, "torch-ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    os.makedirs(ckpt)
    jobs = []
    for rank in (0, 1):
        argv = [cfg.python, TORCH_PEER, "train", f"--rank={rank}", "--world=2", f"--port={port}",
                f"--model={model}", f"--epochs={epochs}", f"--batch-size={cfg.batch_size}",
                f"--lr={cfg.lr}", f"--momentum={cfg.momentum}", f"--lr-floor={cfg.lr_floor}",
                f"--seed={cfg.seed}", f"--data-dir={data_dir}", f"--deadline={timeout}",
                f"--checkpoint-dir={ckpt if rank == 0 else ''}"]
        jobs.append(Job(argv, env=torch_env(), cwd=tmp))
    run_jobs(jobs, timeout + 5, f"torch DDP {model}")
    return result_of(jobs[0])


def torch_env():
    return {"GLOO_SOCKET_IFNAME": "lo", "TP_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def first_reaching(evals, target):
    for e in evals:
        if e["accuracy"] >= target:
            return e["seconds"]
    return None


# ---- roofline, all-reduce, ps ----------------------------------------------------------------


def run_train_step(cfg, tmp, model):
    steps = {"mlp": 400, "cnn": 20}[model] if not cfg.smoke else 5
    job = Job([os.path.join(cfg.bin, "train_step"), f"--model={model}", "--threads=1",
               f"--batch-size={cfg.batch_size}", f"--steps={steps}", "--json"], cwd=tmp)
    run_jobs([job], 300, f"train_step {model}")
    for line in reversed(job.lines):
        if line.startswith("{"):
            return json.loads(line)["examples_per_sec"]
    raise CaseFailed("train_step printed no JSON\n" + job.tail())


ROW = re.compile(r"^\s*(\d+(?:\.\d+)?) (KiB|MiB|GiB)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+|-)")
UNIT = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def busbw(nbytes, seconds, ranks=2):
    return nbytes / seconds * 2 * (ranks - 1) / ranks / 1e9


def run_allreduce_bench(cfg, tmp, sizes, communicator="gloo"):
    """{bytes: (kubetrain busbw, mpi busbw or None)} from one round of allreduce_bench."""
    mpi = os.path.join(cfg.bin, "mpi_allreduce")
    argv = [os.path.join(cfg.bin, "allreduce_bench"), "--sizes=" + ",".join(map(str, sizes)),
            f"--iters={cfg.iters}", f"--warmup={cfg.warmup}", "--ranks=2", "--rounds=1",
            "--timeout=120s", f"--communicator={communicator}"]
    if os.access(mpi, os.X_OK) and shutil.which(cfg.mpirun):
        argv += [f"--mpirun={shutil.which(cfg.mpirun)}", f"--mpi-bench={mpi}"]
    else:
        argv += ["--mpirun="]
    job = Job(argv, cwd=tmp)
    run_jobs([job], 300, "allreduce_bench")
    out = {}
    for line in job.lines:
        m = ROW.match(line)
        if m:
            nbytes = int(float(m.group(1)) * UNIT[m.group(2)])
            gloo = busbw(nbytes, float(m.group(3)) / 1e3)
            mpi_bw = busbw(nbytes, float(m.group(5)) / 1e3) if m.group(5) != "-" else None
            out[nbytes] = (gloo, mpi_bw)
    if set(out) != set(sizes):
        raise CaseFailed("allreduce_bench: table rows missing\n" + job.tail())
    return out


def run_torch_allreduce(cfg, tmp, sizes):
    port = free_port()
    jobs = [Job([cfg.python, TORCH_PEER, "allreduce", f"--rank={r}", "--world=2",
                 f"--port={port}", "--sizes=" + ",".join(map(str, sizes)),
                 f"--iters={cfg.iters}", f"--warmup={cfg.warmup}", "--deadline=280"],
                env=torch_env(), cwd=tmp) for r in (0, 1)]
    run_jobs(jobs, 300, "torch gloo all-reduce")
    rows = result_of(jobs[0])["rows"]
    return {r["bytes"]: busbw(r["bytes"], statistics.median(r["seconds"])) for r in rows}


def run_ps_throughput(cfg, tmp):
    """kubetrain's push+pull, the ps in its own process: (shared memory, gRPC over TCP, raw TCP)."""
    job = Job([os.path.join(cfg.bin, "ps_throughput"), f"--model-mb={cfg.ps_mb}",
               f"--rounds={cfg.ps_rounds}", "--max-ps=1", "--tcp-reps=3", "--json",
               "--ps-binary=" + os.path.join(cfg.bin, "kubetrain-ps")], cwd=tmp)
    run_jobs([job], 300, "ps_throughput")
    for line in reversed(job.lines):
        if line.startswith("{"):
            r = json.loads(line)
            rate = {x["transport"]: x["push_pull_mbps"] / 1e3 for x in r["rows"]
                    if x["ps"] == 1 and x["mode"] == "async"}
            return rate["shm"], rate["grpc"], r["tcp_best_mbps"] / 1e3
    raise CaseFailed("ps_throughput printed no JSON\n" + job.tail())


def run_torch_rpc(cfg, tmp, transport):
    port = free_port()
    jobs = [Job([cfg.python, TORCH_PEER, "rpc", f"--rank={r}", f"--port={port}",
                 f"--mb={cfg.ps_mb}", f"--rounds={cfg.ps_rounds}", f"--transport={transport}",
                 "--deadline=280"],
                env=torch_env(), cwd=tmp) for r in (0, 1)]
    run_jobs(jobs, 300, "torch RPC push+pull")
    return result_of(jobs[1])["push_pull_mbps"] / 1e3


# ---- report ----------------------------------------------------------------------------------


def mmm(values, fmt):
    v = [x for x in values if x is not None]
    if not v:
        return "-"
    return "/".join(fmt(x) for x in (min(v), statistics.median(v), max(v)))


def med(values):
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def kfmt(x):
    return f"{x / 1e3:.1f}k" if x >= 1e4 else f"{x:.0f}"


def verdict(value, goal):
    if value is None:
        return "MISSED (not measured)"
    return "MET" if value >= goal else "MISSED"


class Report:
    def __init__(self, cfg):
        self.cfg = cfg
        self.lines = []

    def p(self, line=""):
        self.lines.append(line)

    def goal_row(self, name, a_vals, b_vals, goal, fmt, extra=""):
        a, b = med(a_vals), med(b_vals)
        ratio = a / b if a and b else None
        rtxt = f"{ratio:.2f}x" if ratio else "-"
        g = f"goal >= {goal:.2f}x {verdict(ratio, goal)}" if goal else "(no goal)"
        self.p(f"  {name:<34} {mmm(a_vals, fmt):>22} {mmm(b_vals, fmt):>22}  {rtxt:>6}  {g}{extra}")
        return ratio


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"),
                    help="folder of kubetrain's binaries (default: build/bin)")
    ap.add_argument("--python", default="/usr/bin/python3", help="Python with torch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", default="roofline,mlp,cnn,allreduce,ps")
    ap.add_argument("--modes", default="ps-sync,ps-async,allreduce,allreduce-gloo",
                    help="kubetrain MLP modes")
    ap.add_argument("--epochs", type=int, default=20, help="MLP epochs")
    ap.add_argument("--target-accuracy", type=float, default=0.885)
    ap.add_argument("--cnn-mode", default="allreduce")
    ap.add_argument("--cnn-examples", type=int, default=0,
                    help="CNN training examples (the first N of the training set); 0: all 60000")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.04, help="learning rate of the global batch")
    ap.add_argument("--lr-floor", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--sizes", default="1M,4M,16M,64M")
    ap.add_argument("--iters", type=int, default=20, help="timed all-reduce iterations per size")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--mpirun", default="mpiexec")
    ap.add_argument("--ps-mb", type=int, default=64)
    ap.add_argument("--ps-rounds", type=int, default=5, help="push+pull rounds (best is kept)")
    ap.add_argument("--case-timeout", type=float, default=0,
                    help="seconds for one training case (0: from the work's size)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one round: checks it works")
    ap.add_argument("--verbose", action="store_true", help="echo kubetrain's progress lines")
    cfg = ap.parse_args()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        return bench(cfg)
    except Stopped as e:
        print(f"\npeers: stopped by {e}; killing children", file=sys.stderr, flush=True)
        kill_all()
        return 130 if str(e) == "SIGINT" else 143
    finally:
        kill_all()


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if not m:
        raise SystemExit(f"bad size {text!r}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def bench(cfg):
    if cfg.smoke:
        cfg.rounds, cfg.epochs, cfg.cnn_examples = 1, 1, 512
        cfg.sizes, cfg.iters, cfg.warmup, cfg.ps_mb, cfg.ps_rounds = "1M", 3, 1, 4, 2
    cfg.bin = os.path.abspath(cfg.bin)
    sizes = [parse_size(s) for s in cfg.sizes.split(",")]
    parts = set(cfg.parts.split(","))
    modes = [m for m in cfg.modes.split(",") if m]
    unknown = parts - {"roofline", "mlp", "cnn", "allreduce", "ps"}
    if unknown or not 1 <= cfg.rounds <= 50 or not 1 <= cfg.epochs <= 200:
        print(f"peers: bad --parts {sorted(unknown)}, --rounds or --epochs", file=sys.stderr)
        return 2

    # PyTorch first: without it nothing here can be compared.
    try:
        probe = subprocess.run([cfg.python, "-c", "import torch; print(torch.__version__)"],
                               capture_output=True, text=True, timeout=60)
        torch_version = probe.stdout.strip() if probe.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        torch_version = None
    if torch_version is None:
        if cfg.smoke:
            print(f"skipped: python3-torch not installed in {cfg.python}; {INSTALL_HINT}")
            return SKIP_CODE
        print(f"peers: PyTorch is not importable by {cfg.python}; {INSTALL_HINT}", file=sys.stderr)
        return 2
    needed = ["kubetrain", "kubetrain-ps", "kubetrain-worker", "train_step", "allreduce_bench",
              "ps_throughput"]
    missing = [b for b in needed if not os.access(os.path.join(cfg.bin, b), os.X_OK)]
    if missing:
        print(f"peers: {', '.join(missing)} not found in {cfg.bin} (build the project or pass "
              "--bin)", file=sys.stderr)
        return 2

    tmp = tempfile.mkdtemp(prefix="kubetrain-peers-")
    try:
        return measure(cfg, tmp, sizes, parts, modes, torch_version)
    finally:
        kill_all()
        shutil.rmtree(tmp, ignore_errors=True)


def measure(cfg, tmp, sizes, parts, modes, torch_version):
    cores = os.cpu_count() or 1
    workers = 2
    mlp_data = cfg.data_dir
    cnn_data = cfg.data_dir
    if cfg.smoke:
        mlp_data = make_subset(cfg.data_dir, os.path.join(tmp, "mlp-data"), 4096, 1000)
    if cfg.cnn_examples > 0:
        cnn_data = make_subset(cfg.data_dir, os.path.join(tmp, "cnn-data"), cfg.cnn_examples,
                               1000 if cfg.smoke else 10000)
    cnn_train = cfg.cnn_examples or 60000
    mlp_train = 4096 if cfg.smoke else 60000
    mlp_timeout = cfg.case_timeout or 60 + cfg.epochs * mlp_train / 2000
    cnn_timeout = cfg.case_timeout or 90 + cnn_train / 200

    t_start = time.monotonic()
    load0 = os.getloadavg()
    print(f"peers: {cfg.rounds} round(s); torch {torch_version} ({cfg.python}); kubetrain from "
          f"{cfg.bin}; {cores} cores; load average {load0[0]:.2f}", flush=True)
    R = {}  # case -> list of per-round results

    def record(key, fn, label):
        t0 = time.monotonic()
        print(f"  [round {rnd + 1}/{cfg.rounds}] {label} ...", end="", flush=True)
        try:
            value = fn()
        except CaseFailed as e:
            print(f" FAILED\n{e}", flush=True)
            R.setdefault(key, []).append(None)
            failures.append(f"round {rnd + 1} {label}: {str(e).splitlines()[0]}")
            return
        R.setdefault(key, []).append(value)
        print(f" {describe(value)} ({time.monotonic() - t0:.1f}s)", flush=True)

    failures = []
    for rnd in range(cfg.rounds):
        forward = rnd % 2 == 0
        order = (lambda xs: xs) if forward else (lambda xs: list(reversed(xs)))
        if "roofline" in parts:
            for model in order(["mlp", "cnn"]):
                record(f"roof-{model}", lambda m=model: run_train_step(cfg, tmp, m),
                       f"train_step {model} (1 thread)")
        if "mlp" in parts:
            cases = [(f"mlp-{m}", lambda m=m: run_kubetrain(cfg, tmp, m, "mlp", cfg.epochs,
                                                             mlp_data, mlp_timeout),
                      f"MLP kubetrain {m}") for m in modes]
            cases.append(("mlp-ddp", lambda: run_ddp(cfg, tmp, "mlp", cfg.epochs, mlp_data,
                                                     mlp_timeout), "MLP torch DDP"))
            for key, fn, label in order(cases):
                record(key, fn, label + f" ({cfg.epochs} epoch(s))")
        if "cnn" in parts:
            cases = [("cnn-kt", lambda: run_kubetrain(cfg, tmp, cfg.cnn_mode, "cnn", 1, cnn_data,
                                                      cnn_timeout),
                      f"CNN kubetrain {cfg.cnn_mode}"),
                     ("cnn-ddp", lambda: run_ddp(cfg, tmp, "cnn", 1, cnn_data, cnn_timeout),
                      "CNN torch DDP")]
            for key, fn, label in order(cases):
                record(key, fn, label + f" (1 epoch of {cnn_train})")
        if "allreduce" in parts:
            cases = [("ar-kt", lambda: run_allreduce_bench(cfg, tmp, sizes),
                      "all-reduce kubetrain gloo + OpenMPI tcp (allreduce_bench)"),
                     ("ar-shm", lambda: run_allreduce_bench(cfg, tmp, sizes, "shm"),
                      "all-reduce kubetrain shm + OpenMPI shared memory (allreduce_bench)"),
                     ("ar-torch", lambda: run_torch_allreduce(cfg, tmp, sizes),
                      "all-reduce torch gloo")]
            for key, fn, label in order(cases):
                record(key, fn, label)
        if "ps" in parts:
            cases = [("ps-kt", lambda: run_ps_throughput(cfg, tmp),
                      "push+pull kubetrain 1 ps (shared memory, then gRPC/TCP)"),
                     ("ps-torch", lambda: run_torch_rpc(cfg, tmp, "auto"),
                      "push+pull torch RPC (TensorPipe's own choice)"),
                     ("ps-torch-tcp", lambda: run_torch_rpc(cfg, tmp, "tcp"),
                      "push+pull torch RPC (uv TCP)")]
            for key, fn, label in order(cases):
                record(key, fn, label)

    load1 = os.getloadavg()
    report = build_report(cfg, R, sizes, modes, cores, workers, cnn_train, torch_version,
                          time.monotonic() - t_start, (load0[0], load1[0]), failures)
    print("\n".join(report), flush=True)
    return 1 if failures else 0


def describe(v):
    if isinstance(v, dict) and "examples_per_sec" in v:
        return f"{kfmt(v['examples_per_sec'])} ex/s, test accuracy {v['test_accuracy']:.4f}"
    if isinstance(v, dict):
        return ", ".join(
            f"{k >> 20} MiB {g[0]:.2f}" + (f"/{g[1]:.2f}" if g[1] else "") if isinstance(g, tuple)
            else f"{k >> 20} MiB {g:.2f}" for k, g in sorted(v.items())) + " GB/s busbw"
    if isinstance(v, tuple):
        return f"{v[0]:.2f} GB/s, over gRPC/TCP {v[1]:.2f} (raw TCP {v[2]:.2f})"
    if isinstance(v, float) and v < 100:
        return f"{v:.2f} GB/s"
    return f"{kfmt(v)} ex/s"


def build_report(cfg, R, sizes, modes, cores, workers, cnn_train, torch_version, seconds, load,
                 failures):
    rep = Report(cfg)
    p = rep.p
    used = min(cores, workers)
    p("")
    p(f"bench/peers: kubetrain vs PyTorch {torch_version} (CPU, torch.distributed gloo/RPC) and "
      f"OpenMPI, 127.0.0.1, {cfg.rounds} interleaved round(s), {seconds / 60:.1f} min; "
      f"load average {load[0]:.2f} -> {load[1]:.2f}" + (" [SMOKE: tiny sizes]" if cfg.smoke else ""))
    p("each figure: min/median/max over the rounds; ratio = kubetrain median / reference median")
    hdr = f"  {'':<34} {'kubetrain':>22} {'reference':>22}  {'ratio':>6}"

    roof = {m: med(R.get(f"roof-{m}", [])) for m in ("mlp", "cnn")}

    def frac(value, model):  # one decimal: a share just under a goal must not print as it
        r = roof[model]
        return f"{value / (r * used):.1%}" if value and r else "-"

    if "mlp-ddp" in R:
        ddp = R["mlp-ddp"]
        ddp_eps = [x and x["examples_per_sec"] for x in ddp]
        ddp_acc = [x and x["test_accuracy"] for x in ddp]
        ddp_tta = [x and first_reaching(x["evals"], cfg.target_accuracy) for x in ddp]
        p("")
        p(f"1. MLP 784-256-128-10, Fashion-MNIST, 2 workers x batch {cfg.batch_size}, momentum "
          f"{cfg.momentum}, lr {cfg.lr} (global batch {2 * cfg.batch_size}) cosine decay to "
          f"{cfg.lr_floor:g}x, {cfg.epochs} epoch(s); reference: torch DDP gloo, 2 processes x 1 "
          "thread")
        p(hdr)
        p(f"  {'DDP examples/s':<34} {'':>22} {mmm(ddp_eps, kfmt):>22}")
        p(f"  {'DDP final test accuracy':<34} {'':>22} {mmm(ddp_acc, lambda x: f'{x:.4f}'):>22}")
        p(f"  {'DDP time to accuracy (s)':<34} {'':>22} "
          f"{mmm(ddp_tta, lambda x: f'{x:.1f}'):>22}")
        for m in modes:
            runs = R.get(f"mlp-{m}", [])
            eps = [x and x["examples_per_sec"] for x in runs]
            acc = [x and x["test_accuracy"] for x in runs]
            tta = [x and first_reaching(x["evals"], cfg.target_accuracy) for x in runs]
            a, b = med(acc), med(ddp_acc)
            equal = a is not None and b is not None and abs(a - b) <= 0.005
            acc_note = (f"; accuracy {a:.4f} vs {b:.4f}: " +
                        ("equal (within 0.5 points)" if equal else "NOT equal (> 0.5 points)")
                        if a is not None and b is not None else "")
            ratio = rep.goal_row(f"{m} examples/s", eps, ddp_eps, 0,
                                 kfmt)
            # The goal needs the speed and equal accuracy together.
            rep.lines[-1] = rep.lines[-1].replace(
                "(no goal)", "goal >= 1.50x at equal accuracy " +
                ("MET" if ratio and ratio >= 1.5 and equal else "MISSED"))
            rep.lines[-1] += acc_note
            if roof["mlp"] and med(ddp_eps):
                limit = roof["mlp"] * used / med(ddp_eps)
                p(f"  {m + ' share of the roofline':<34} {frac(med(eps), 'mlp'):>22} "
                  f"{frac(med(ddp_eps), 'mlp'):>22}  {'':>6}  goal >= 40% "
                  f"{verdict(med(eps) and med(eps) / (roof['mlp'] * used), 0.40)} (the roofline "
                  f"is {limit:.2f}x DDP: the most any mode could reach)")
            p(f"  {m + ' final test accuracy':<34} {mmm(acc, lambda x: f'{x:.4f}'):>22} "
              f"{mmm(ddp_acc, lambda x: f'{x:.4f}'):>22}")
            ta, tb = med(tta), med(ddp_tta)
            trat = f"{tb / ta:.2f}x" if ta and tb else "-"
            p(f"  {m + ' time to ' + str(cfg.target_accuracy) + ' (s)':<34} "
              f"{mmm(tta, lambda x: f'{x:.1f}'):>22} {mmm(ddp_tta, lambda x: f'{x:.1f}'):>22}  "
              f"{trat:>6}  (DDP time / kubetrain time; no goal" +
              ("; not reached in some runs" if None in tta + ddp_tta else "") + ")")
        p("  time to accuracy: seconds from the run's start to the end of the first per-epoch "
          "test evaluation (chief/rank 0) at or above the target; kubetrain's from the chief's "
          "log timestamps")

    if "cnn-ddp" in R:
        kt = [x and x["examples_per_sec"] for x in R.get("cnn-kt", [])]
        dd = [x and x["examples_per_sec"] for x in R["cnn-ddp"]]
        p("")
        p(f"2. CNN conv5x5x32-pool-conv5x5x64-pool-dense128-10, 1 epoch of {cnn_train} examples, "
          f"same optimizer and schedule; kubetrain {cfg.cnn_mode} vs torch DDP")
        p(hdr)
        ratio = rep.goal_row("examples/s", kt, dd, 1.2, kfmt)
        if roof["cnn"] and med(dd):
            p(f"  {'share of the roofline':<34} {frac(med(kt), 'cnn'):>22} "
              f"{frac(med(dd), 'cnn'):>22}  {'':>6}  goal >= 40% "
              f"{verdict(med(kt) and med(kt) / (roof['cnn'] * used), 0.40)} (the roofline is "
              f"{roof['cnn'] * used / med(dd):.2f}x DDP: the most kubetrain could reach)")
        acc_k = [x and x["test_accuracy"] for x in R.get("cnn-kt", [])]
        acc_d = [x and x["test_accuracy"] for x in R["cnn-ddp"]]
        p(f"  {'final test accuracy (no goal)':<34} {mmm(acc_k, lambda x: f'{x:.4f}'):>22} "
          f"{mmm(acc_d, lambda x: f'{x:.4f}'):>22}")

    if roof["mlp"] or roof["cnn"]:
        p("")
        p(f"3. compute roofline: train_step examples/s on one core (1 BLAS thread, batch "
          f"{cfg.batch_size}) x {used} (min(cores, workers)); each training figure above is "
          "given as a share of it")
    for m in ("mlp", "cnn"):
        if roof[m]:
            p(f"  {m}: {mmm(R[f'roof-{m}'], kfmt)} ex/s x {used} = {kfmt(roof[m] * used)} ex/s")
    def above_roofline(key):
        rate = med([x and x["examples_per_sec"] for x in R.get(key, [])])
        bound = roof["cnn" if key.startswith("cnn") else "mlp"]
        return rate is not None and bound is not None and rate > bound * used

    if any(above_roofline(k) for k in ["mlp-" + m for m in modes] + ["mlp-ddp", "cnn-kt",
                                                                       "cnn-ddp"]):
        p("  a share above 100% means the training processes ran the step faster per core than "
          "train_step did (it times each kernel through a profiling wrapper, alone on one core): "
          "this roofline is then no bound")
    if "ar-kt" in R or "ar-shm" in R or "ar-torch" in R:
        p("")
        p(f"4. all-reduce busbw GB/s, 2 ranks, in-place float sum, median of {cfg.iters} timed "
          f"iterations (after {cfg.warmup} warm-up) per round; busbw = bytes/time x 2(n-1)/n")
        f2 = lambda x: f"{x:.2f}"
        for key, what, mpi_what in (
                ("ar-kt", "gloo", "OpenMPI tcp"),
                ("ar-shm", "shm", "OpenMPI shm")):
            if key not in R:
                continue
            p(f"  kubetrain {what}: " + (
                "GlooCommunicator over loopback TCP (the path between nodes); OpenMPI: ob1 PML, "
                "tcp+self BTLs on lo" if what == "gloo" else
                "ShmCommunicator, one shared-memory segment (what `kubetrain run` and ranks of "
                "one pod use); OpenMPI: ob1 PML, vader (shared memory)+self BTLs"))
            p(hdr)
            for s in sizes:
                name = f"{what} {s >> 20} MiB" if s >= 1 << 20 else f"{what} {s >> 10} KiB"
                kt = [x and x[s][0] for x in R.get(key, [])]
                mpi = [x and x[s][1] for x in R.get(key, [])]
                tg = [x and x[s] for x in R.get("ar-torch", [])]
                rep.goal_row(f"{name} vs torch gloo", kt, tg, 1.0, f2)
                rep.goal_row(f"{name} vs {mpi_what}", kt, mpi, 1.0, f2)
                if s == 64 << 20:
                    rep.goal_row(f"{name} vs {mpi_what} (x1.2 goal)", kt, mpi, 1.2, f2)
        p("  OpenMPI: mpi_allreduce under mpirun --oversubscribe with its default binding "
          "(allreduce_bench's launch; kubetrain's ranks keep to CPUs of their own alike); "
          "torch gloo: TCP on 127.0.0.1 (it has no shared-memory transport), unbound")

    if "ps-kt" in R or "ps-torch" in R:
        kt = [x and x[0] for x in R.get("ps-kt", [])]
        kt_tcp = [x and x[1] for x in R.get("ps-kt", [])]
        tcp = [x and x[2] for x in R.get("ps-kt", [])]
        tr, tr_tcp = R.get("ps-torch", []), R.get("ps-torch-tcp", [])
        p("")
        p(f"5. push+pull of a {cfg.ps_mb} MiB float model to one server in another process, GB/s = "
          f"2 x model bytes / (push + pull time), best of {cfg.ps_rounds} per round")
        p(hdr)
        g = lambda x: f"{x:.2f}"
        rep.goal_row("kubetrain 1 ps vs torch RPC", kt, tr, 1.5, g,
                     "  (each side's default on one host)")
        rep.goal_row("  over TCP: gRPC vs TensorPipe uv", kt_tcp, tr_tcp, None, g,
                     "  (what pods on two nodes get)")
        if med(tcp) and med(tr_tcp):
            p(f"  {'limit over TCP: raw loopback':<34} {mmm(tcp, g):>22} "
              f"{'':>22}  {med(tcp) / med(tr_tcp):.2f}x torch RPC uv: the most a TCP ps could reach")

    p("")
    p("Differences between the sides that remain:")
    for d in differences(cfg):
        p("  - " + d)
    if failures:
        p("")
        p("FAILED cases:")
        for f in failures:
            p("  - " + f)
    return rep.lines


def differences(cfg):
    return [
        "initial weights and data order: the same schemes (He normal hidden/conv kernels, Glorot "
        "uniform logits, zero biases; a shared per-epoch permutation cut into strided shards, "
        "drop-last) but different random generators, so different draws",
        "timing start: kubetrain's clock starts at the trainer's start (connecting to the ps or "
        "the Gloo rendezvous included); torch's after init_process_group and a barrier (its "
        "rendezvous excluded: in the reference's favour)",
        "ps-async has no torch counterpart: it is compared with DDP (synchronous); its rate per "
        f"update is scaled to one worker's batch (lr {cfg.lr / 2:g} per 64 examples), "
        "kubetrain's linear scaling rule",
        "evaluations: kubetrain's all-reduce ranks evaluate each epoch's end together, each on "
        "its half of the test set (what every fixed-size all-reduce job does; the ps modes' chief "
        "evaluates alone, in the background but for the final one); torch's rank 0 evaluates the "
        "whole set while the other rank waits (a DDP script could split it with an all_reduce of "
        "its own)",
        "DDP overlaps the all-reduce with backward in buckets; kubetrain exchanges after the "
        "whole backward (one fused buffer for all-reduce, one push+pull for the ps modes)",
        "roofline: kubetrain's own kernels (train_step: forward+backward, no update, no data "
        "gather), not PyTorch's",
        "ps push+pull: ps_throughput starts kubetrain-ps as its own process (the model in 16 "
        "equal variables); by default the worker offers it a shared-memory buffer, which a ps on "
        "the same host maps (the 'kubetrain' column), and the TCP row turns that off. torch RPC "
        "runs a separate server process and moves one tensor, with TensorPipe's default "
        "transports and channels (it picks shared memory and cross-memory attach for local "
        "processes) or restricted to the uv TCP transport and the basic channel",
        "all-reduce on one machine: kubetrain's allreduce mode and shm rows reduce through shared "
        "memory (what `kubetrain run` picks when its workers share a host; pods on different "
        "nodes use Gloo over TCP: the allreduce-gloo and gloo rows); torch's gloo backend has no "
        "shared-memory transport and runs over TCP on 127.0.0.1",
        "all-reduce: allreduce_bench checks every element of a pattern; the torch side checks "
        "that every element equals the sum of rank+1",
    ]


if __name__ == "__main__":
    sys.exit(main())
