# One rank of network_bench's torch-gloo case (peers.cc starts it inside the rank's sandbox; not
# meant to be run by hand): torch.distributed's gloo all-reduce, timed as the ring ranks time
# GlooCommunicator (bench/allreduce/timed_allreduce.cc):
#
#   python3 torch_rank.py --rank R --world N --master IP:PORT --sizes BYTES,... \
#       [--iters 5] [--warmup 1] [--deadline SECONDS]
#
# Per size: warmup + iters in-place float32 SUM all-reduces, each of FillPattern's values
# (bench/allreduce/pattern.h: rank + 1 + (i + iteration) % 13) after a barrier, every result
# checked; then rank 0 prints one "result <bytes> <wrong> <seconds>..." line with the slowest
# rank's time of each timed iteration. Rank 0 holds the rendezvous store on --master; gloo talks
# over the interface GLOO_SOCKET_IFNAME names (the driver sets eth0, the sandbox's uplink).
import argparse
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

PERIOD = 13  # pattern.h's kPatternPeriod


def pattern(count, iteration):
    return torch.remainder(torch.arange(count, dtype=torch.int32) + iteration % PERIOD,
                           PERIOD).to(torch.float32)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--sizes", required=True)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--deadline", type=float, default=300)
    a = p.parse_args()
    # A peer that hangs must not keep this process alive past the driver's deadline.
    timer = threading.Timer(a.deadline, lambda: os._exit(124))
    timer.daemon = True
    timer.start()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    torch.set_num_threads(1)
    host, port = a.master.rsplit(":", 1)
    dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}", rank=a.rank,
                            world_size=a.world)
    for nbytes in (int(s) for s in a.sizes.split(",")):
        count = nbytes // 4
        t = torch.empty(count, dtype=torch.float32)
        times, wrong = [], 0
        for it in range(a.warmup + a.iters):
            phase = pattern(count, it)
            torch.add(phase, float(a.rank + 1), out=t)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            dt = time.perf_counter() - t0
            expected = phase * a.world + a.world * (a.world + 1) / 2
            wrong += int((t != expected).sum())
            if it >= a.warmup:
                times.append(dt)
        slowest = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        total = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        if a.rank == 0:
            print(f"result {nbytes} {int(total)} " + " ".join(f"{s:.9g}" for s in slowest.tolist()),
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
