"""Fashion-MNIST CNN under injected imbalance: DDP over Gloo, DDP over the eagercomm backend and
eagercomm.torch.EagerSGD (solo), one after the other in one job, side by side.

    eagercomm-run -n 4 -- /usr/bin/python3 examples/torch_train.py [--train-samples 24000] ...

(PYTHONPATH must reach the built package: <build>/python.) Imbalance as in the eager-SGD paper:
at every step, K ranks drawn by a PRNG every rank shares sleep D ms before their update. Each
configuration starts from the same initial model and sees the same data; rank 0 prints wall
time, throughput (training samples of all ranks per second) and test accuracy.
"""

import argparse
import datetime
import gzip
import os
import random
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import eagercomm.torch as et

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = images.float().div_(255.0).sub_(0.2860).div_(0.3530).unsqueeze(1)  # the set's mean/std
    return x, labels.long()


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
                      for i in range(0, len(x), 1000))
    model.train()
    return correct / len(x)


def train(config, args, shard, test):
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # same initial model in every configuration
    model = Cnn()
    if config == "ddp-gloo":
        net = DDP(model, process_group=dist.new_group(backend="gloo"))
        opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    elif config == "ddp-eagercomm":
        net = DDP(model)  # the default group: init_process_group("eagercomm")
        opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    else:
        net = model
        # Staleness acts as extra momentum: eager modes use at most --eager-momentum, as
        # eagercomm-train does (sgd/EXPERIMENTS.md).
        opt = et.EagerSGD(model.parameters(), lr=args.lr,
                          momentum=min(args.momentum, args.eager_momentum), mode="solo")
    x, y = shard
    steps = len(x) // args.batch
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch * 1000 + rank))
        shared = random.Random(args.seed * 7919 + epoch)  # identical draws on every rank
        for step in range(steps):
            idx = order[step * args.batch:(step + 1) * args.batch]
            loss = F.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            if rank in shared.sample(range(size), args.k):
                time.sleep(args.delay_ms / 1000.0)
            opt.step()
        if config == "eager-solo":
            opt.finish()  # flush what is carried: replicas identical again
    dist.barrier()
    elapsed = time.perf_counter() - start
    acc = accuracy(model, *test)
    extra = ""
    if config == "eager-solo":
        s = opt.stats()
        extra = (f"rounds {opt.version}, fresh {s['fresh_fraction']:.2f}, "
                 f"staleness mean {s['mean_staleness']:.2f} max {s['max_staleness']}")
    return elapsed, steps * args.epochs * args.batch * size / elapsed, acc, extra


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--train-samples", type=int, default=24000, help="subset, all ranks together")
    p.add_argument("--test-samples", type=int, default=10000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--eager-momentum", type=float, default=0.7,
                   help="cap on EagerSGD's momentum (staleness adds its own)")
    p.add_argument("-k", type=int, default=1, help="ranks delayed per step")
    p.add_argument("--delay-ms", type=float, default=30.0, help="delay of each of them")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--configs", default="ddp-gloo,ddp-eagercomm,eager-solo")
    args = p.parse_args()
    torch.set_num_threads(1)  # one core per rank: ranks are processes
    dist.init_process_group("eagercomm", timeout=datetime.timedelta(seconds=120))
    rank, size = dist.get_rank(), dist.get_world_size()
    if not 0 <= args.k <= size:
        raise SystemExit(f"-k {args.k} must be in [0, {size}]")
    x, y = load(args.data_dir, "train")
    x, y = x[:args.train_samples], y[:args.train_samples]
    shard = (x[rank::size].contiguous(), y[rank::size].contiguous())
    tx, ty = load(args.data_dir, "test")
    test = (tx[:args.test_samples], ty[:args.test_samples])
    if rank == 0:
        print(f"{size} ranks, {args.train_samples} training samples ({len(shard[0])} per rank), "
              f"batch {args.batch} per rank, {args.epochs} epoch(s), lr {args.lr}, momentum "
              f"{args.momentum}; imbalance: {args.k} rank(s) sleep {args.delay_ms:g} ms per "
              f"step", flush=True)
    rows = []
    for config in args.configs.split(","):
        elapsed, throughput, acc, extra = train(config, args, shard, test)
        rows.append((config, elapsed, throughput, acc, extra))
        if rank == 0:
            print(f"  done: {config}", flush=True)
    if rank == 0:
        print(f"{'configuration':<15} {'time s':>8} {'samples/s':>10} {'test acc':>9}")
        for config, elapsed, throughput, acc, extra in rows:
            print(f"{config:<15} {elapsed:>8.2f} {throughput:>10.0f} {acc:>9.4f}  {extra}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
