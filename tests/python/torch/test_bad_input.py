"""Bad input gets clear Python exceptions naming what was wrong, and the group stays usable."""

import torch
import torch.distributed as dist

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
# The backend's own device check, called directly: what a CUDA tensor would meet.
expect_raises(ValueError, "allreduce: tensor is on meta; only CPU tensors are supported",
              lambda: _torch._check_tensor(torch.ones(4, device="meta"), "allreduce"))
check(_torch._check_tensor(torch.ones(4, dtype=torch.bfloat16), "x") == "bf16", "bf16 maps")

# Sparse tensors, several tensors per call, mismatched allgather outputs.
expect_raises((ValueError, RuntimeError), "",
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
expect_raises(ValueError, "late='later'",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, late="later"))
gloo = dist.new_group(backend="gloo")
expect_raises(ValueError, "does not run the eagercomm backend",
              lambda: et.get_communicator(gloo))
# Collective refusals (every rank passes the same bad value): momentum out of range.
expect_raises(ValueError, "momentum",
              lambda: et.EagerSGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, momentum=1.5))

# The group is still fine.
t = torch.ones(5)
dist.all_reduce(t)
check(torch.equal(t, torch.full((5,), float(size))), "allreduce after the refusals")
done("test_bad_input")
