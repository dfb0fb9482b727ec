"""DDP with partial_allreduce_hook(on_failure="continue") training through a dead rank (ctest:
torch_ddp_continue_3, under eagercomm-run --keep-going): the last of 3 ranks SIGKILLs itself at
step 40; the survivors keep training (the buckets' rounds go on over them, each gradient divided
by the survivors' number), finish, reach well above chance, and end with identical replicas
(element-wise max and min over the survivors agree). Each survivor prints "DDP CONTINUE OK"."""

import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import eagercomm.torch as et
from _blobs import CLASSES, accuracy, train
from _common import check, init

rank, size = init()
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, CLASSES))
ddp = DDP(model, bucket_cap_mb=0.001, broadcast_buffers=False)
state = et.PartialAllreduceState(mode="solo", on_failure="continue")
ddp.register_comm_hook(state, et.partial_allreduce_hook)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)


def die_at_40(step):
    if rank == size - 1 and step == 40:
        os.kill(os.getpid(), signal.SIGKILL)


train(ddp, opt, rank, size, steps=150, before_step=die_at_40)
if state.finish():
    opt.step()
# A survivor whose flush returned before the death in the other's flush meets it here.
if state.finish():
    opt.step()

check(state.world_size == size - 1, f"the hook's world is {state.world_size}, expected {size - 1}")
acc = accuracy(model)
print(f"rank {rank}: accuracy {acc:.3f} after the death of rank {size - 1}", flush=True)
check(acc > 0.6, f"accuracy {acc} is not well above chance")
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
high, low = flat.clone(), flat.clone()
dist.all_reduce(high, op=dist.ReduceOp.MAX)
dist.all_reduce(low, op=dist.ReduceOp.MIN)
check(torch.equal(high, flat) and torch.equal(low, flat), "the survivors' models differ")
print(f"DDP CONTINUE OK rank {rank}", flush=True)
