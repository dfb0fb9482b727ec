"""EagerSGD under random delays: after 50 steps and finish() the replicas are bit-identical and
the loss went down. One rank in three, drawn each step from a PRNG every rank shares, sleeps."""

import random
import time

import torch
import torch.distributed as dist

import eagercomm.torch as et
from _common import check, done, init

rank, size = init()
torch.manual_seed(1234 + rank)  # different initial models: create() must broadcast rank 0's

# A regression task with a known answer; every rank draws its own batches.
w_true = torch.linspace(-1, 1, 16)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
# Modest rate and momentum: staleness adds momentum of its own (sgd/EXPERIMENTS.md), and the
# test is about semantics, not about how fast this converges.
opt = et.EagerSGD(model.parameters(), lr=0.02, momentum=0.5, mode="solo")

gen = torch.Generator().manual_seed(99)
x_eval = torch.randn(256, 16, generator=gen)
y_eval = (x_eval @ w_true).unsqueeze(1)


def eval_loss():
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(x_eval), y_eval).item()


loss_before = eval_loss()
shared = random.Random(7)  # the same draws on every rank: who is slow at each step
data_gen = torch.Generator().manual_seed(rank)
for step in range(50):
    slow = shared.randrange(size)
    x = torch.randn(32, 16, generator=data_gen)
    loss = torch.nn.functional.mse_loss(model(x), (x @ w_true).unsqueeze(1))
    if step % 10 == 3:
        model.zero_grad(set_to_none=True)  # breaks the gradient views: step() must re-bind
    else:
        opt.zero_grad()
    loss.backward()
    if rank == slow:
        time.sleep(0.01)
    opt.step()
opt.finish()
loss_after = eval_loss()

stats = opt.stats()
check(stats["steps"] == 50, f"steps {stats['steps']}")
# Identical replicas: every rank's flat parameters against rank 0's, bit for bit.
mine = opt.flat_parameters.clone()
gathered = [torch.empty_like(mine) for _ in range(size)]
dist.all_gather(gathered, mine)
for r in range(size):
    check(torch.equal(gathered[r], gathered[0]), f"rank {r}'s parameters differ from rank 0's")
versions = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
dist.all_gather(versions, torch.tensor([opt.version]))
check(len({v.item() for v in versions}) == 1, f"versions differ: {versions}")
check(loss_after < 0.75 * loss_before, f"loss did not go down: {loss_before} -> {loss_after}")
# The default staleness rule lowers the momentum for stale rounds, never raises it.
check(0 <= stats["mean_momentum"] <= 0.5 and 0 <= opt.current_momentum <= 0.5,
      f"momentum in force {stats['mean_momentum']} / {opt.current_momentum} (configured 0.5)")
# The model's own tensors are the optimizer's buffer: the model reads what EagerSGD wrote.
check(model[0].weight.data_ptr() == opt.flat_parameters.data_ptr(), "parameter views lost")
print(f"rank {rank}: loss {loss_before:.4f} -> {loss_after:.4f}, {opt.version} rounds, "
      f"fresh {stats['fresh_fraction']:.2f}, late posts {stats['late_posts']}", flush=True)
done("test_eager_sgd")
