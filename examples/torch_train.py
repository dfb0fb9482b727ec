"""Fashion-MNIST CNN under injected imbalance: DDP over Gloo, DDP over the eagercomm backend and
eagercomm.torch.EagerSGD in any of its modes, one after the other in one job, side by side.

    PYTHONPATH=build/default/python eagercomm-run -n 4 -- /usr/bin/python3 \\
        examples/torch_train.py --train-samples 60000 --epochs 2 --batch 64 --lr 0.05 \\
        --weight-decay 1e-4 -k 1 --delay-ms 100

(PYTHONPATH must reach the built package: <build>/python.) Imbalance as in the eager-SGD paper:
at every step, K ranks drawn by a PRNG every rank shares sleep D ms before their update.

Configurations (--configs): ddp-gloo, ddp-eagercomm, and eager-MODE for every EagerSGD mode
(eager-solo, eager-majority, eager-sync, eager-adaptive, eager-quorum:3). EagerSGD gets the same
lr, momentum and weight decay as torch.optim.SGD: its staleness rule (--staleness momentum,
the default) lowers the momentum of stale rounds, so no separate momentum is needed.

Time to accuracy: every configuration is evaluated at time 0 and --evals-per-epoch times per
epoch at equally spaced steps (eager configurations call finish() first, so the replicas are
identical; the finish counts as training time, the evaluation does not). The reference accuracy
is the final accuracy of the first DDP configuration (or of --target-config), which trains first.
An eager configuration may train longer to reach it (--eager-epochs; with --stop-at-target it
stops at the first evaluation past --epochs that reaches it), as eagercomm-train does. Per
configuration rank 0 prints the training time, throughput (training samples of all ranks per
second), final test accuracy, accuracy after --epochs (equal epochs), time to reach the reference
accuracy (linear interpolation between evaluations), the speedup in that time over the
reference, and the accuracy at equal wall time (every curve read at the shortest training time
of all configurations).

Every configuration runs once per seed (--seeds 1,2,3): the seed sets the initial model, the
data order and the imbalance draws, identical for every configuration of that seed. After the
per-seed tables rank 0 prints, per configuration, the mean and [min, max] over the seeds;
--json FILE writes everything, curves included.
"""

import argparse
import datetime
import gzip
import json
import os
import random
import re
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import eagercomm.torch as et

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
EAGER_MODE = re.compile(r"^(solo|majority|sync|adaptive|quorum:[0-9]+)$")


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


def accuracy(model, test, total):
    """Test accuracy of the (identical on every rank) model: each rank scores its shard."""
    x, y = test
    model.eval()
    with torch.no_grad():
        correct = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
                      for i in range(0, len(x), 1000))
    model.train()
    count = torch.tensor([float(correct)])
    dist.all_reduce(count)  # float32 counts are exact up to 2^24
    return count.item() / total


def parse_configs(text):
    configs = [c.strip() for c in text.split(",") if c.strip()]
    if not configs:
        raise SystemExit("--configs: no configuration given")
    for c in configs:
        if c in ("ddp-gloo", "ddp-eagercomm"):
            continue
        if c.startswith("eager-") and EAGER_MODE.match(c[len("eager-"):]):
            continue
        raise SystemExit(f"--configs: unknown configuration {c!r} (accepted: ddp-gloo, "
                         f"ddp-eagercomm, eager-solo, eager-majority, eager-sync, eager-adaptive, "
                         f"eager-quorum:K)")
    if len(set(configs)) != len(configs):
        raise SystemExit(f"--configs: a configuration is listed twice: {text}")
    return configs


def parse_seeds(text):
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--seeds: expected a comma-separated list of integers, got {text!r}")
    if not seeds or any(s < 0 for s in seeds):
        raise SystemExit(f"--seeds: expected non-negative integers, got {text!r}")
    return seeds


def train(config, seed, args, shard, test, gloo, target=None):
    """Trains one configuration; returns its row: times, curve [(seconds, accuracy)], stats.
    An eager configuration trains --eager-epochs and, with --stop-at-target, stops at the first
    evaluation past --epochs that reaches `target` (every rank sees the same accuracy)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)  # same initial model in every configuration of this seed
    model = Cnn()
    eager = config.startswith("eager-")
    if config == "ddp-gloo":
        net = DDP(model, process_group=gloo)
    elif config == "ddp-eagercomm":
        net = DDP(model)  # the default group: init_process_group("eagercomm")
    if eager:
        net = model
        opt = et.EagerSGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay, mode=config[len("eager-"):],
                          staleness=args.staleness, solo_speedup=args.solo_speedup)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum,
                              weight_decay=args.weight_decay)
    x, y = shard
    steps = len(x) // args.batch
    # Evaluate after these steps of every epoch (1-based; the last is the end of the epoch).
    evals = sorted({round((j + 1) * steps / args.evals_per_epoch)
                    for j in range(args.evals_per_epoch)} - {0})
    curve = [(0.0, accuracy(model, test, args.test_total))]
    curve_epochs = [0.0]
    trained = 0.0  # training seconds so far, evaluations excluded
    epochs = args.eager_epochs if eager and args.eager_epochs else args.epochs
    done_steps = 0
    reached = False
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(epochs):
        if reached:
            break
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(
            (seed << 32) + (epoch << 16) + rank))
        shared = random.Random((seed << 32) + epoch)  # identical draws on every rank
        for step in range(steps):
            idx = order[step * args.batch:(step + 1) * args.batch]
            loss = F.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            if rank in shared.sample(range(size), args.k):
                time.sleep(args.delay_ms / 1000.0)
            opt.step()
            done_steps += 1
            if step + 1 in evals:
                if eager:
                    opt.finish()  # flush what is carried: replicas identical again
                dist.barrier()
                trained += time.perf_counter() - start
                curve.append((trained, accuracy(model, test, args.test_total)))
                curve_epochs.append(epoch + (step + 1) / steps)
                if (eager and args.stop_at_target and target is not None and
                        curve_epochs[-1] >= args.epochs and curve[-1][1] >= target):
                    reached = True
                    break
                dist.barrier()
                start = time.perf_counter()
    # After --epochs: the evaluation at the end of that epoch (every configuration has one).
    equal_epochs = next(a for e, a in zip(curve_epochs, [a for _, a in curve]) if e >= args.epochs)
    row = dict(config=config, seed=seed, time_s=trained,
               samples_per_s=done_steps * args.batch * size / trained,
               epochs_trained=curve_epochs[-1], final_accuracy=curve[-1][1],
               accuracy_at_equal_epochs=equal_epochs, curve=curve, curve_epochs=curve_epochs)
    if eager:
        s = opt.stats()
        row["stats"] = dict(s, rounds=opt.version)
        row["extra"] = (f"rounds {opt.version}, fresh {s['fresh_fraction']:.2f}, staleness mean "
                        f"{s['mean_staleness']:.2f} max {s['max_staleness']}, momentum mean "
                        f"{s['mean_momentum']:.3f}, lr mean {s['mean_lr']:.4f}")
    else:
        row["extra"] = ""
    return row


def time_to(curve, target):
    """First time the curve reaches target, linearly interpolated; None when it never does."""
    for i, (t, a) in enumerate(curve):
        if a >= target:
            if i == 0:
                return t
            t0, a0 = curve[i - 1]
            return t0 + (target - a0) / (a - a0) * (t - t0)
    return None


def accuracy_at(curve, when):
    """The curve's accuracy at time `when`, linearly interpolated (held after its end)."""
    for (t0, a0), (t1, a1) in zip(curve, curve[1:]):
        if when <= t1:
            return a0 if t1 == t0 else a0 + (when - t0) / (t1 - t0) * (a1 - a0)
    return curve[-1][1]


def score(rows, target_config):
    """Adds time to the reference accuracy, speedup and accuracy at equal time to one seed's rows;
    returns the reference accuracy and the equal time."""
    ref = next(r for r in rows if r["config"] == target_config)
    target = ref["final_accuracy"]
    ref_tta = time_to(ref["curve"], target)
    equal = min(r["time_s"] for r in rows)
    for r in rows:
        tta = time_to(r["curve"], target)
        r["target_accuracy"] = target
        r["time_to_accuracy_s"] = tta
        if tta is None:
            r["speedup"] = None
        elif tta > 0:
            r["speedup"] = ref_tta / tta
        else:  # accurate enough before training: as fast as the reference, or infinitely faster
            r["speedup"] = 1.0 if ref_tta == 0 else float("inf")
        r["equal_time_s"] = equal
        r["accuracy_at_equal_time"] = accuracy_at(r["curve"], equal)
    return target, equal


def print_seed(seed, rows, target, equal, target_config):
    print(f"seed {seed}: reference accuracy {target:.4f} ({target_config} final), equal time "
          f"{equal:.2f} s")
    print(f"  {'configuration':<20} {'time s':>8} {'epochs':>6} {'samples/s':>10} {'final acc':>9} "
          f"{'acc@epochs':>10} {'tta s':>11} {'speedup':>8} {'acc@equal':>9}")
    for r in rows:
        tta = r["time_to_accuracy_s"]
        tta_s = "not reached" if tta is None else f"{tta:.2f}"
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        print(f"  {r['config']:<20} {r['time_s']:>8.2f} {r['epochs_trained']:>6.2f} "
              f"{r['samples_per_s']:>10.0f} {r['final_accuracy']:>9.4f} "
              f"{r['accuracy_at_equal_epochs']:>10.4f} {tta_s:>11} {sp:>8} "
              f"{r['accuracy_at_equal_time']:>9.4f}  {r['extra']}".rstrip(), flush=True)


def spread(values, fmt):
    if not values:
        return "-"
    return (f"{fmt.format(sum(values) / len(values))} "
            f"[{fmt.format(min(values))}, {fmt.format(max(values))}]")


def summarize(configs, all_rows):
    summary = []
    for c in configs:
        rows = [r for r in all_rows if r["config"] == c]
        speedups = [r["speedup"] for r in rows if r["speedup"] is not None]
        summary.append(dict(
            config=c, seeds=len(rows),
            time_s=[r["time_s"] for r in rows],
            final_accuracy=[r["final_accuracy"] for r in rows],
            accuracy_at_equal_epochs=[r["accuracy_at_equal_epochs"] for r in rows],
            speedup=speedups, not_reached=len(rows) - len(speedups),
            accuracy_at_equal_time=[r["accuracy_at_equal_time"] for r in rows]))
    return summary


def print_summary(summary):
    n = summary[0]["seeds"]
    print(f"over {n} seed(s): mean [min, max]")
    print(f"  {'configuration':<20} {'time s':>22} {'final acc':>25} {'acc@epochs':>25} "
          f"{'speedup':>22} {'acc@equal':>25}")
    for s in summary:
        sp = spread(s["speedup"], "{:.2f}")
        if s["not_reached"]:
            sp += f" ({s['not_reached']}/{s['seeds']} not reached)"
        print(f"  {s['config']:<20} {spread(s['time_s'], '{:.2f}'):>22} "
              f"{spread(s['final_accuracy'], '{:.4f}'):>25} "
              f"{spread(s['accuracy_at_equal_epochs'], '{:.4f}'):>25} {sp:>22} "
              f"{spread(s['accuracy_at_equal_time'], '{:.4f}'):>25}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--train-samples", type=int, default=24000, help="subset, all ranks together")
    p.add_argument("--test-samples", type=int, default=10000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--eager-epochs", type=int, default=0,
                   help="epochs of the eager configurations (0: --epochs), so that time to the "
                        "reference accuracy can be measured when they need more")
    p.add_argument("--stop-at-target", action="store_true",
                   help="eager configurations stop at the first evaluation past --epochs that "
                        "reaches the reference accuracy")
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9,
                   help="for every configuration (EagerSGD lowers it for stale rounds)")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--staleness", choices=("momentum", "step", "rate", "none"), default="momentum",
                   help="EagerSGD's staleness rule")
    p.add_argument("--solo-speedup", type=float, default=1.3,
                   help="EagerSGD adaptive: solo rounds when they promise this speedup per epoch")
    p.add_argument("-k", type=int, default=1, help="ranks delayed per step")
    p.add_argument("--delay-ms", type=float, default=30.0, help="delay of each of them")
    p.add_argument("--seeds", default="1", help="comma-separated; every config runs per seed")
    p.add_argument("--configs", default="ddp-gloo,ddp-eagercomm,eager-solo,eager-adaptive",
                   help="ddp-gloo, ddp-eagercomm, eager-MODE (solo, majority, sync, adaptive, "
                        "quorum:K)")
    p.add_argument("--evals-per-epoch", type=int, default=2,
                   help="test evaluations per epoch, equally spaced (plus one at time 0)")
    p.add_argument("--target-config", default=None,
                   help="whose final accuracy is the target (default: the first DDP config)")
    p.add_argument("--json", default=None, help="write all results to this file (rank 0)")
    args = p.parse_args()
    configs = parse_configs(args.configs)
    seeds = parse_seeds(args.seeds)
    if args.evals_per_epoch < 1:
        raise SystemExit("--evals-per-epoch must be at least 1")
    if args.epochs < 1:
        raise SystemExit("--epochs must be at least 1")
    if args.eager_epochs and args.eager_epochs < args.epochs:
        raise SystemExit(f"--eager-epochs {args.eager_epochs} is fewer than --epochs {args.epochs}")
    target_config = args.target_config
    if target_config is None:
        target_config = next((c for c in configs if c.startswith("ddp-")), configs[0])
    elif target_config not in configs:
        raise SystemExit(f"--target-config {target_config} is not in --configs {args.configs}")
    if (args.eager_epochs or args.stop_at_target) and target_config.startswith("eager-"):
        raise SystemExit(f"--eager-epochs and --stop-at-target need a DDP reference, not "
                         f"{target_config}")
    torch.set_num_threads(1)  # one core per rank: ranks are processes
    dist.init_process_group("eagercomm", timeout=datetime.timedelta(seconds=120))
    rank, size = dist.get_rank(), dist.get_world_size()
    if not 0 <= args.k <= size:
        raise SystemExit(f"-k {args.k} must be in [0, {size}]")
    for c in configs:
        if c.startswith("eager-quorum:") and not 1 <= int(c.split(":")[1]) <= size:
            raise SystemExit(f"--configs: {c}: the quorum must be in [1, {size}]")
    gloo = dist.new_group(backend="gloo") if "ddp-gloo" in configs else None
    x, y = load(args.data_dir, "train")
    x, y = x[:args.train_samples], y[:args.train_samples]
    shard = (x[rank::size].contiguous(), y[rank::size].contiguous())
    if len(shard[0]) < args.batch:
        raise SystemExit(f"{len(shard[0])} training samples per rank: fewer than --batch "
                         f"{args.batch}")
    tx, ty = load(args.data_dir, "test")
    tx, ty = tx[:args.test_samples], ty[:args.test_samples]
    args.test_total = len(tx)
    test = (tx[rank::size].contiguous(), ty[rank::size].contiguous())  # scored in parallel
    if rank == 0:
        print(f"{size} ranks, {args.train_samples} training samples ({len(shard[0])} per rank), "
              f"batch {args.batch} per rank, {args.epochs} epoch(s), lr {args.lr}, momentum "
              f"{args.momentum}, weight decay {args.weight_decay:g}; EagerSGD staleness "
              f"{args.staleness}, solo speedup {args.solo_speedup:g}; imbalance: {args.k} rank(s) sleep "
              f"{args.delay_ms:g} ms per step; {args.evals_per_epoch} evaluation(s) per epoch on "
              f"{args.test_total} test samples; seeds {','.join(map(str, seeds))}", flush=True)
    all_rows, per_seed = [], []
    for seed in seeds:
        # The reference first: the eager configurations may stop at its final accuracy.
        trained = {target_config: train(target_config, seed, args, shard, test, gloo)}
        target_accuracy = trained[target_config]["final_accuracy"]
        if rank == 0:
            print(f"  done: seed {seed} {target_config}", flush=True)
        for config in configs:
            if config in trained:
                continue
            trained[config] = train(config, seed, args, shard, test, gloo, target_accuracy)
            if rank == 0:
                print(f"  done: seed {seed} {config}", flush=True)
        rows = [trained[c] for c in configs]
        target, equal = score(rows, target_config)
        all_rows += rows
        per_seed.append(dict(seed=seed, target_accuracy=target, equal_time_s=equal))
        if rank == 0:
            print_seed(seed, rows, target, equal, target_config)
    summary = summarize(configs, all_rows)
    if rank == 0:
        print_summary(summary)
        if args.json:
            settings = {k: v for k, v in vars(args).items() if k != "json"}
            with open(args.json, "w") as f:
                json.dump(dict(settings=settings, ranks=size, target_config=target_config,
                               seeds=per_seed, runs=all_rows, summary=summary), f, indent=1)
            print(f"wrote {args.json}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
