"""init_process_group("eagercomm"): every supported collective against the gloo backend's
answers (a gloo group in the same job) and against values computed locally; unsupported
operations raise NotImplementedError naming the operation."""

import torch
import torch.distributed as dist

from _common import check, done, expect_raises, init

rank, size = init()
gloo = dist.new_group(backend="gloo")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX]


def data(r, dtype, n=37):
    # Small integers: sums are exact in every dtype, so results must match bit for bit.
    return ((torch.arange(n) * (r + 3)) % 11 - 5 + r).to(dtype)


def expected(dtype, op, n=37):
    stack = torch.stack([data(r, torch.float64, n) for r in range(size)])
    ref = {dist.ReduceOp.SUM: stack.sum(0), dist.ReduceOp.MIN: stack.min(0).values,
           dist.ReduceOp.MAX: stack.max(0).values}[op]
    return ref.to(dtype)


# allreduce: every dtype and operator, in place, blocking and async.
for dtype in DTYPES:
    for op in OPS:
        mine = data(rank, dtype)
        dist.all_reduce(mine, op=op)
        check(torch.equal(mine, expected(dtype, op)), f"allreduce {dtype} {op}: {mine}")
        if dtype != torch.bfloat16:  # gloo: "Invalid scalar type"; the local answer stands
            theirs = data(rank, dtype)
            dist.all_reduce(theirs, op=op, group=gloo)
            check(torch.equal(mine, theirs), f"allreduce {dtype} {op}: eagercomm {mine} "
                  f"gloo {theirs}")
        work = dist.all_reduce(data(rank, dtype), op=op, async_op=True)
        check(work.wait(), "Work.wait() returned False")

# Async with the future (what DDP chains on), several in flight at once.
tensors = [data(rank, torch.float32, 1000 + i) for i in range(4)]
works = [dist.all_reduce(t, async_op=True) for t in tensors]
futs = [w.get_future() for w in works]
for i, (t, f) in enumerate(zip(tensors, futs)):
    out = f.wait()
    check(torch.equal(out[0], expected(torch.float32, dist.ReduceOp.SUM, 1000 + i)),
          f"future result {i}")
    check(works[i].is_completed(), "work state after the future")

# Large enough for the ring / pipelined paths.
big = torch.full((1 << 18,), float(rank + 1))
dist.all_reduce(big)
check(torch.all(big == size * (size + 1) / 2).item(), "large allreduce")

# Non-contiguous tensors are copied and copied back.
nc = data(rank, torch.float32, 48).reshape(6, 8).t()
check(not nc.is_contiguous(), "test setup: tensor should be non-contiguous")
dist.all_reduce(nc)
check(torch.equal(nc, expected(torch.float32, dist.ReduceOp.SUM, 48).reshape(6, 8).t()),
      "non-contiguous allreduce")

# broadcast from every root, every dtype.
for dtype in DTYPES:
    for root in range(size):
        mine = data(rank, dtype)
        dist.broadcast(mine, src=root)
        check(torch.equal(mine, data(root, dtype)), f"broadcast {dtype} root {root}")
        if dtype != torch.bfloat16:  # gloo: "Invalid scalar type"
            theirs = data(rank, dtype)
            dist.broadcast(theirs, src=root, group=gloo)
            check(torch.equal(mine, theirs), f"broadcast {dtype} root {root} vs gloo")
nc = torch.arange(20.0).reshape(4, 5).t() * (rank + 1)
dist.broadcast(nc, src=size - 1)
check(torch.equal(nc, torch.arange(20.0).reshape(4, 5).t() * size), "non-contiguous broadcast")

# allgather (list form and the flat _all_gather_base form).
for dtype in DTYPES:
    mine = [torch.empty(5, 3, dtype=dtype) for _ in range(size)]
    dist.all_gather(mine, data(rank, dtype, 15).reshape(5, 3))
    theirs = [torch.empty(5, 3, dtype=dtype) for _ in range(size)]
    if dtype != torch.bfloat16:  # gloo: "Invalid scalar type"
        dist.all_gather(theirs, data(rank, dtype, 15).reshape(5, 3), group=gloo)
    else:
        theirs = [data(r, dtype, 15).reshape(5, 3) for r in range(size)]
    for r in range(size):
        check(torch.equal(mine[r], data(r, dtype, 15).reshape(5, 3)), f"allgather {dtype} [{r}]")
        check(torch.equal(mine[r], theirs[r]), f"allgather {dtype} [{r}] vs gloo")
flat = torch.empty(size * 7, dtype=torch.int64)
dist.all_gather_into_tensor(flat, data(rank, torch.int64, 7))
check(torch.equal(flat, torch.cat([data(r, torch.int64, 7) for r in range(size)])),
      "all_gather_into_tensor")

# barrier, async too.
dist.barrier()
check(dist.barrier(async_op=True).wait(), "async barrier")

# Unsupported operations: a clear NotImplementedError naming the operation.
t = torch.ones(4)
expect_raises(NotImplementedError, "eagercomm backend: reduce is not supported",
              lambda: dist.reduce(t, dst=0))
expect_raises(NotImplementedError, "eagercomm backend: gather is not supported",
              lambda: dist.gather(t, [torch.ones(4) for _ in range(size)] if rank == 0 else None,
                                  dst=0))
expect_raises(NotImplementedError, "eagercomm backend: scatter is not supported",
              lambda: dist.scatter(t, [torch.ones(4) for _ in range(size)] if rank == 0 else None,
                                   src=0))
expect_raises(NotImplementedError, "eagercomm backend: reduce_scatter is not supported",
              lambda: dist.reduce_scatter(t, [torch.ones(4) for _ in range(size)]))
expect_raises(NotImplementedError, "eagercomm backend: alltoall",
              lambda: dist.all_to_all_single(torch.ones(size), torch.ones(size)))
expect_raises(NotImplementedError, "eagercomm backend: send is not supported",
              lambda: dist.send(t, dst=(rank + 1) % size))
expect_raises(ValueError, "PRODUCT is not supported",
              lambda: dist.all_reduce(t, op=dist.ReduceOp.PRODUCT))
# The group still works after the refusals (nothing was started).
t = torch.ones(3)
dist.all_reduce(t)
check(torch.equal(t, torch.full((3,), float(size))), "allreduce after the refusals")

done("test_backend")
