"""Bad input gets clear Python exceptions naming what was wrong, and the group stays usable."""

import datetime
import time

import torch
import torch.distributed as dist

import eagercomm
import eagercomm.torch as et
from eagercomm import _torch
from _common import check, done, expect_raises, init

rank, size = init()
pg = dist.distributed_c10d._get_default_group()

# Wrong dtype: TypeError naming the dtype and the supported ones.
expect_raises(TypeError, "dtype Byte is not supported",
              lambda: dist.all_reduce(torch.ones(4, dtype=torch.uint8)))
expect_raises(TypeError, "dtype Bool is not supported",
              lambda: dist.broadcast(torch.ones(4, dtype=torch.bool), src=0))
expect_raises(TypeError, "dtype Char is not supported",
              lambda: dist.all_gather([torch.ones(2, dtype=torch.int8)] * size,
                                      torch.ones(2, dtype=torch.int8)))

# Wrong device. No GPU here: a meta tensor stands for "not CPU memory". torch's dispatcher may
# refuse it before the backend sees it; either way the error names the device.
expect_raises((ValueError, NotImplementedError, RuntimeError), "eta",
              lambda: dist.all_reduce(torch.ones(4, device="meta")))
# The backend's own device check, called directly (a meta tensor is no GPU tensor: it has no
# memory at all).
msg = expect_raises(ValueError, "allreduce: tensor is on meta (a meta tensor has no data",
                    lambda: _torch._check_tensor(torch.ones(4, device="meta"), "allreduce"))
check("GPU" not in msg, f"a meta tensor called a GPU tensor: {msg}")
check(_torch._check_tensor(torch.ones(4, dtype=torch.bfloat16), "x") == "bf16", "bf16 maps")

# Sparse tensors, several tensors per call, mismatched allgather outputs.
expect_raises(ValueError, "dense tensors only",
              lambda: dist.all_reduce(torch.eye(3).to_sparse()))
expect_raises(ValueError, "takes one tensor per process, got 2",
              lambda: pg.allreduce([torch.ones(2), torch.ones(2)]))
expect_raises(ValueError, "output list has",
              lambda: dist.all_gather([torch.ones(2)] * (size + 1), torch.ones(2)))
expect_raises(TypeError, "output 0 is",
              lambda: pg.allgather([[torch.ones(2, dtype=torch.float64)] * size], [torch.ones(2)]))

# Non-contiguous tensors are accepted: copied to contiguous memory and copied back.
t = (torch.arange(12.0).reshape(3, 4) * (rank + 1)).t()
dist.all_reduce(t)
check(torch.equal(t, torch.arange(12.0).reshape(3, 4).t() * (size * (size + 1) // 2)),
      "non-contiguous allreduce result")
outs = [torch.zeros(4, 3).t() for _ in range(size)]
dist.all_gather(outs, torch.full((3, 4), float(rank)))
for r in range(size):
    check(torch.equal(outs[r], torch.full((3, 4), float(r))), "non-contiguous allgather output")

# EagerSGD refuses what it cannot run, before any collective starts.
expect_raises(TypeError, "only float32 is supported",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2).double().parameters(), lr=0.1))
expect_raises(ValueError, "only CPU parameters",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2, device="meta").parameters(), lr=0.1))
expect_raises(ValueError, "one parameter group",
              lambda: et.EagerSGD([{"params": torch.nn.Linear(2, 2).parameters()},
                                   {"params": torch.nn.Linear(2, 2).parameters()}], lr=0.1))
expect_raises(ValueError, "mode 'sometimes'",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, mode="sometimes"))
expect_raises(ValueError, "staleness rule 'stale'",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, staleness="stale"))
expect_raises(ValueError, "solo_speedup 0.5",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, solo_speedup=0.5))
expect_raises(ValueError, "late='later'",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, late="later"))
gloo = dist.new_group(backend="gloo")
expect_raises(ValueError, "does not run the eagercomm backend",
              lambda: et.get_communicator(gloo))
# Integers the extension's C++ types cannot hold: eagercomm's InvalidArgumentError (a
# ValueError) naming the argument, not pybind11's TypeError listing the signature.
for kwargs, needle in (({"sync_every": -1}, "sync_every -1 is negative"),
                       ({"result_depth": -1}, "result_depth -1 is negative"),
                       ({"seed": 2**64}, "seed"), ({"milestones": [-3]}, "milestone -3")):
    expect_raises(eagercomm.InvalidArgumentError, needle,
                  lambda: et.EagerSGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, **kwargs))
expect_raises(eagercomm.InvalidArgumentError, "sync_every -1 is negative",
              lambda: et.PartialAllreduceState(sync_every=-1))
expect_raises(ValueError, "no trainable parameters",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2).requires_grad_(False).parameters(),
                                  lr=0.1))
# Collective refusals (every rank passes the same bad value): momentum out of range.
expect_raises(ValueError, "momentum",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, momentum=1.5))

# Frozen parameters (fine-tuning) take no part, as in torch.optim: the frozen layer keeps its
# values (and its device, dtype: not checked), the trainable one trains, identically everywhere.
torch.manual_seed(5 + rank)  # different initial models: rank 0's trainable part is broadcast
frozen = torch.nn.Linear(4, 4).double()  # a dtype EagerSGD could not train
frozen.requires_grad_(False)
head = torch.nn.Linear(4, 1)
frozen_before = frozen.weight.clone()
opt = et.EagerSGD(list(frozen.parameters()) + list(head.parameters()), lr=0.1, momentum=0.0,
                  mode="sync")
head_before = head.weight.detach().clone()
for _ in range(3):
    opt.zero_grad()
    head(frozen(torch.randn(8, 4, dtype=torch.float64)).float()).square().mean().backward()
    opt.step()
opt.finish()
check(torch.equal(frozen.weight, frozen_before), "EagerSGD changed a frozen parameter")
check(frozen.weight.grad is None, "EagerSGD gave a frozen parameter a gradient")
check(not torch.equal(head.weight.detach(), head_before), "EagerSGD did not train the head")
flat = [torch.empty_like(opt.flat_parameters) for _ in range(size)]
dist.all_gather(flat, opt.flat_parameters)
check(all(torch.equal(f, flat[0]) for f in flat), "replicas differ with frozen parameters")
# Two trainable tensors, each in a 16-float slot; the frozen ones would add two more.
check(opt.flat_parameters.numel() == 2 * 16, f"frozen parameters in the flat buffer: "
      f"{opt.flat_parameters.numel()} elements")

# The DDP hook's partial allreduce under late="drop": stats()["posts"] counts every post, the
# dropped ones too (rank 1 comes late each time: its posts miss their rounds and are dropped).
pa = _torch._PartialAllreduce(et.get_communicator(), 8, mode="solo", late="drop", sync_every=0,
                              seed=0, result_depth=4, timeout_s=60.0)
steps = 4
for _ in range(steps):
    if rank == 1:
        time.sleep(0.2)
    pa.exchange(torch.ones(8))
pa.flush_into(torch.zeros(8))
st = pa.stats()
check(st["posts"] == steps, f"late=drop: posts {st['posts']}, expected {steps} ({st})")
check(st["late_posts"] >= st["dropped_posts"], f"dropped posts are late ones: {st}")
dropped = torch.tensor([st["dropped_posts"]])
dist.all_reduce(dropped)
check(dropped.item() >= 1, "late=drop: no post was dropped on any rank (the check tests nothing)")

# The group's timeout follows the one rule: 0 is EAGERCOMM_TIMEOUT, -1 ms no limit, any other
# negative value is refused on every rank, naming it. Made through the backend's constructor:
# torch 1.13's new_group runs a store barrier of its own that takes a negative timeout as
# already expired.
store = dist.distributed_c10d._get_default_store()
expect_raises(ValueError, "timeout -2",
              lambda: _torch.ProcessGroupEagercomm(dist.PrefixStore("refused/", store), rank,
                                                   size, datetime.timedelta(milliseconds=-2)))
unlimited = _torch.ProcessGroupEagercomm(dist.PrefixStore("unlimited/", store), rank, size,
                                         datetime.timedelta(milliseconds=-1))
check(unlimited.timeout_ms == -1, f"timeout_ms {unlimited.timeout_ms}")
t = torch.ones(3)
unlimited.allreduce([t]).wait()
check(torch.equal(t, torch.full((3,), float(size))), "allreduce on a group without time limit")

# The group is still fine.
t = torch.ones(5)
dist.all_reduce(t)
check(torch.equal(t, torch.full((5,), float(size))), "allreduce after the refusals")
done("test_bad_input")
