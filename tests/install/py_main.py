"""Uses an installed eagercomm Python package, as a rank of a job started by the installed
eagercomm-run: eagercomm._core (an allreduce against its known result), eagercomm.torch (the
torch.distributed backend and one EagerSGD step, whose replicas must agree) and eagercomm._torch
underneath. Prints "OK ..." on every rank."""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import eagercomm
import eagercomm.torch as et

expected_prefix = sys.argv[1]
for module in (eagercomm, et):
    if not os.path.realpath(module.__file__).startswith(os.path.realpath(expected_prefix) + "/"):
        sys.exit(f"{module.__name__} loaded from {module.__file__}, not from {expected_prefix}")

with eagercomm.Communicator.from_env() as comm:
    x = np.full(5, comm.rank + 1, dtype=np.float32)
    comm.allreduce(x)
    want = comm.size * (comm.size + 1) / 2
    if not np.all(x == want):
        sys.exit(f"allreduce gave {x}, expected {want}")

dist.init_process_group("eagercomm")
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
if not torch.all(t == size * (size + 1) / 2):
    sys.exit(f"torch all_reduce gave {t}")

torch.manual_seed(rank)  # different starting models: EagerSGD starts from rank 0's
model = torch.nn.Linear(8, 1)
opt = et.EagerSGD(model.parameters(), lr=0.1, mode="solo")
loss = model(torch.randn(16, 8)).pow(2).mean()
loss.backward()
opt.step()
opt.finish()
mine = opt.flat_parameters.clone()
gathered = [torch.empty_like(mine) for _ in range(size)]
dist.all_gather(gathered, mine)
if not all(torch.equal(g, gathered[0]) for g in gathered):
    sys.exit("EagerSGD replicas differ after finish()")
dist.destroy_process_group()
print(f"OK rank {rank} of {size} (eagercomm {eagercomm.__version__}, {len(mine)} parameters)")
