# The PyTorch side of bench/peers (run.py starts it; not meant to be run by hand). One process of
# one of three jobs, each the counterpart of a kubetrain measurement:
#
#   torch_peer.py train     --rank R --world 2 --port P --model mlp|cnn ...   DDP training
#                           (--model mlp:W1,W2,... for kubetrain's MLP of those hidden widths;
#                           --comm-hook fp16 for DDP's fp16_compress_hook)
#   torch_peer.py allreduce --rank R --world 2 --port P --sizes ... --iters N  gloo all-reduce
#   torch_peer.py rpc       --rank R --port P --mb 64 --rounds N               RPC push+pull
#
# Every process uses one intra-op thread (torch.set_num_threads(1)) and talks over 127.0.0.1
# (or, started by bench/network in a sandbox of its own, over --master and the interface
# GLOO_SOCKET_IFNAME names). Rank 0 prints one line starting with "RESULT " and a JSON object;
# run.py reads it.
# Each process exits by itself after --deadline seconds at the latest.
import argparse
import gzip
import json
import math
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


def result(obj):
    print("RESULT " + json.dumps(obj), flush=True)


def arm_deadline(seconds):
    # A hung peer must not keep this process alive: exit hard once the deadline has passed.
    def expire():
        print(f"torch_peer: deadline of {seconds:.0f}s passed; exiting", file=sys.stderr, flush=True)
        os._exit(124)

    t = threading.Timer(seconds, expire)
    t.daemon = True
    t.start()


# ---- data: the IDX files kubetrain-worker reads, normalised the same way ----------------------


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    data = torch.frombuffer(bytearray(raw[4 + 4 * ndim :]), dtype=torch.uint8)
    return data.reshape(dims)


def load_split(data_dir, prefix):
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    return images, labels.long()


def load_fashion_mnist(data_dir):
    """(train_x, train_y, test_x, test_y): pixels as (v/255 - mean)/stddev with the training
    set's mean and population stddev, as worker/core/data/fashion_mnist.cc does."""
    train_raw, train_y = load_split(data_dir, "train")
    test_raw, test_y = load_split(data_dir, "t10k")
    hist = torch.bincount(train_raw.reshape(-1).long(), minlength=256).double()
    values = torch.arange(256, dtype=torch.float64) / 255.0
    n = max(1.0, float(hist.sum()))
    mean = float((hist * values).sum()) / n
    var = max(0.0, float((hist * values * values).sum()) / n - mean * mean)
    std = math.sqrt(var) if var > 0 else 1.0
    table = ((torch.arange(256, dtype=torch.float32) / 255.0) - mean) / std
    train_x = table[train_raw.long()]
    test_x = table[test_raw.long()]
    return train_x, train_y, test_x, test_y


# ---- models: worker/core/models.cc's shapes and initialisation ----------------------------------


def he_normal_(weight, fan_in):
    with torch.no_grad():
        weight.normal_(0.0, math.sqrt(2.0 / fan_in))


def glorot_uniform_(weight, fan_in, fan_out):
    with torch.no_grad():
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        weight.uniform_(-limit, limit)


def make_mlp(hidden=(256, 128)):
    layers, width = [], 784
    for h in hidden:
        lin = nn.Linear(width, h)
        he_normal_(lin.weight, width)
        nn.init.zeros_(lin.bias)
        layers += [lin, nn.ReLU()]
        width = h
    logits = nn.Linear(width, 10)
    glorot_uniform_(logits.weight, width, 10)
    nn.init.zeros_(logits.bias)
    return nn.Sequential(nn.Flatten(), *layers, logits)


def make_model(name):
    """worker/core/models.cc's --model values: mlp, cnn, mlp:W1,W2,..."""
    if name == "cnn":
        return make_cnn()
    if name == "mlp":
        return make_mlp()
    return make_mlp(tuple(int(w) for w in name.split(":", 1)[1].split(",")))


def make_cnn():
    conv1 = nn.Conv2d(1, 32, 5, padding=2)
    conv2 = nn.Conv2d(32, 64, 5, padding=2)
    dense1 = nn.Linear(7 * 7 * 64, 128)
    logits = nn.Linear(128, 10)
    he_normal_(conv1.weight, 5 * 5 * 1)
    he_normal_(conv2.weight, 5 * 5 * 32)
    he_normal_(dense1.weight, 7 * 7 * 64)
    glorot_uniform_(logits.weight, 128, 10)
    for m in (conv1, conv2, dense1, logits):
        nn.init.zeros_(m.bias)
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)), conv1, nn.ReLU(), nn.MaxPool2d(2), conv2, nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), dense1, nn.ReLU(), logits)


def evaluate(model, x, y, batch=500):
    # worker/runtime/trainer.h's eval_batch is 500 too.
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            out = model(x[i : i + batch])
            loss += float(F.cross_entropy(out, y[i : i + batch], reduction="sum"))
            correct += int((out.argmax(1) == y[i : i + batch]).sum())
    model.train()
    return correct / x.shape[0], loss / x.shape[0]


def train(a):
    torch.manual_seed(a.seed)
    train_x, train_y, test_x, test_y = load_fashion_mnist(a.data_dir)
    train_x = train_x.reshape(train_x.shape[0], -1)
    test_x = test_x.reshape(test_x.shape[0], -1)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}:{a.port}", rank=a.rank,
                            world_size=a.world)
    # The same initial model on every rank (DDP also broadcasts rank 0's at construction).
    model = make_model(a.model)
    ddp = nn.parallel.DistributedDataParallel(model)
    if a.comm_hook == "fp16":
        # DDP's own 16-bit wire, what a PyTorch user sets beside kubetrain's
        # --gradient-compression=fp16: each bucket cast to float16, summed, divided by the world
        # size and cast back. (Its bf16 hook needs a backend that sums bfloat16; gloo does not.)
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    n = train_x.shape[0]
    shard = n // a.world
    steps_per_epoch = shard // a.batch_size
    if steps_per_epoch < 1:
        raise SystemExit(f"--batch-size {a.batch_size} is larger than a shard of {shard}")
    total = steps_per_epoch * a.epochs
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum, dampening=0.0)

    # ps/optimizer.cc's schedule: cosine decay over every update down to lr_floor x the peak.
    def factor(step):
        if not a.lr_decay:
            return 1.0
        progress = min(max(step, 0), total) / total
        return a.lr_floor + (1.0 - a.lr_floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    gen = torch.Generator()
    evals = []
    ckpt = os.path.join(a.checkpoint_dir, "model.pt") if a.checkpoint_dir else ""
    dist.barrier()
    start = time.monotonic()
    last_ckpt = start
    loss = torch.zeros(())
    step_ends = []  # rank 0's clock after each step, for the steady-state step time
    for epoch in range(a.epochs):
        # One permutation per epoch shared by every rank; rank r takes the strided slice
        # perm[r], perm[r + world], ... of the first shard * world entries (worker/core/data/shard.h).
        gen.manual_seed(a.seed * 1000003 + epoch)
        perm = torch.randperm(n, generator=gen)[: shard * a.world][a.rank :: a.world]
        for s in range(steps_per_epoch):
            idx = perm[s * a.batch_size : (s + 1) * a.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step()
            sched.step()
            if a.rank == 0:
                step_ends.append(time.monotonic())
        if a.rank == 0:
            # Like kubetrain's chief: evaluate after each epoch, checkpoint every 30 s; the
            # other rank waits in the next step's all-reduce.
            acc, test_loss = evaluate(model, test_x, test_y)
            evals.append({"epoch": epoch + 1, "seconds": time.monotonic() - start,
                          "accuracy": acc, "loss": test_loss})
            print(f"epoch {epoch + 1} accuracy {acc:.4f} loss {test_loss:.4f}", flush=True)
            if ckpt and time.monotonic() - last_ckpt >= 30:
                torch.save(model.state_dict(), ckpt)
                last_ckpt = time.monotonic()
    if a.rank == 0 and ckpt:
        torch.save(model.state_dict(), ckpt)
    dist.barrier()
    wall = time.monotonic() - start
    if a.rank == 0:
        # The median step after the first two (warm-up): the few that span an evaluation move
        # it little.
        steps = sorted(b - e for e, b in zip(step_ends[2:], step_ends[3:]))
        result({"steps": total, "examples": total * a.batch_size * a.world, "wall_seconds": wall,
                "step_seconds": steps[len(steps) // 2] if steps else wall / max(1, total),
                "examples_per_sec": total * a.batch_size * a.world / wall,
                "test_accuracy": evals[-1]["accuracy"], "evals": evals,
                "last_loss": float(loss)})
    dist.destroy_process_group()


# ---- all-reduce: allreduce_bench's loop with torch.distributed's gloo backend -----------------


def allreduce(a):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank,
                            world_size=a.world)
    expected = a.world * (a.world + 1) / 2  # sum of rank + 1 over the ranks
    rows = []
    for nbytes in a.sizes:
        t = torch.empty(nbytes // 4, dtype=torch.float32)
        times = []
        for it in range(a.warmup + a.iters):
            t.fill_(float(a.rank + 1))
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            dt = time.perf_counter() - t0
            if not bool((t == expected).all()):
                raise SystemExit(f"all-reduce of {nbytes} bytes gave a wrong sum")
            if it >= a.warmup:
                times.append(dt)
        # The slowest rank's time of each iteration, as allreduce_bench reports.
        slowest = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        rows.append({"bytes": nbytes, "seconds": slowest.tolist()})
    if a.rank == 0:
        result({"rows": rows})
    dist.destroy_process_group()


# ---- ps push+pull: one server process holding a float tensor, over torch.distributed.rpc -------

_param = None


def _server_init(elements):
    global _param
    _param = torch.full((elements,), 0.5, dtype=torch.float32)
    return True


def _server_push(grad, lr):
    # What kubetrain's ps does on an async push: apply an SGD step to the variable.
    _param.add_(grad, alpha=-lr)
    return True


def _server_pull():
    return _param


def rpc_bench(a):
    from torch.distributed import rpc

    # "tcp": loopback TCP only (the uv transport and the basic channel). "auto": TensorPipe's
    # defaults, which pick shared memory and cross-memory attach for two processes on one machine.
    pinned = {"_transports": ["uv"], "_channels": ["basic"]} if a.transport == "tcp" else {}
    opts = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{a.port}", num_worker_threads=4, rpc_timeout=a.deadline,
        **pinned)
    name = "server" if a.rank == 0 else "client"
    rpc.init_rpc(name, rank=a.rank, world_size=2, rpc_backend_options=opts)
    if a.rank == 1:
        elements = a.mb * 1024 * 1024 // 4
        rpc.rpc_sync("server", _server_init, args=(elements,))
        grad = torch.full((elements,), 1e-3, dtype=torch.float32)
        best_push = best_pull = best_both = float("inf")
        for r in range(a.rounds + 1):  # round 0 warms up connections and pages
            t0 = time.perf_counter()
            rpc.rpc_sync("server", _server_push, args=(grad, 0.01))
            push = time.perf_counter() - t0
            t1 = time.perf_counter()
            value = rpc.rpc_sync("server", _server_pull)
            pull = time.perf_counter() - t1
            if value.numel() != elements:
                raise SystemExit("pull returned the wrong size")
            if r == 0:
                continue
            best_push, best_pull = min(best_push, push), min(best_pull, pull)
            best_both = min(best_both, push + pull)
        mb = elements * 4 / 1e6
        result({"model_bytes": elements * 4, "rounds": a.rounds, "push_mbps": mb / best_push,
                "pull_mbps": mb / best_pull, "push_pull_mbps": 2 * mb / best_both})
    rpc.shutdown()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("job", choices=["train", "allreduce", "rpc"])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--master", default="127.0.0.1", help="train: rank 0's address")
    p.add_argument("--deadline", type=float, default=600)
    p.add_argument("--threads", type=int, default=1)
    # train
    p.add_argument("--model", default="mlp",
                   type=lambda v: v if v in ("mlp", "cnn") or v.startswith("mlp:") else
                   p.error(f"--model: {v!r}; allowed: mlp, cnn, mlp:W1,W2,..."))
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.04)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--lr-decay", type=int, default=1)
    p.add_argument("--lr-floor", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--checkpoint-dir", default="")
    p.add_argument("--comm-hook", choices=["none", "fp16"], default="none")
    # allreduce
    p.add_argument("--sizes", default="1048576")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    # rpc
    p.add_argument("--mb", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--transport", choices=["tcp", "auto"], default="tcp")
    a = p.parse_args()
    a.sizes = [int(s) for s in a.sizes.split(",")]
    arm_deadline(a.deadline)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    torch.set_num_threads(a.threads)
    {"train": train, "allreduce": allreduce, "rpc": rpc_bench}[a.job](a)


if __name__ == "__main__":
    main()
