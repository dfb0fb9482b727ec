"""The eagercomm Python module end to end, on every rank of a job started by eagercomm-run
(ctest: python_core_2, python_core_3). Every collective against numpy references, CPU torch
tensors used in place, partial allreduce conservation, bad input raising the documented
exceptions, the GIL released while waiting, abort from another thread.

Every rank runs the same checks in the same order (they are collective). A failed check is
printed and counted; the exit code is 1 if any failed.
"""
import builtins
import os
import sys
import threading
import time
import traceback

import numpy as np

import eagercomm

FAILURES = []
RANK = -1


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"rank {RANK}: FAIL: {what}", file=sys.stderr, flush=True)


def expect_raises(what, exc_type, needles, fn, *args, **kwargs):
    """fn(*args) must raise exc_type whose message contains every needle."""
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        msg = str(e)
        for needle in needles:
            check(needle in msg, f"{what}: message {msg!r} lacks {needle!r}")
        check(isinstance(e, eagercomm.Error), f"{what}: {type(e).__name__} is no eagercomm.Error")
        check(isinstance(getattr(e, "code", None), str), f"{what}: no .code on {e!r}")
        return e
    except Exception as e:  # noqa: BLE001 - report what came instead
        check(False, f"{what}: raised {type(e).__name__}: {e}, expected {exc_type.__name__}")
        return None
    check(False, f"{what}: did not raise {exc_type.__name__}")
    return None


def rank_data(r, n, dtype):
    """Rank r's contribution: small integers, exact in every type."""
    i = np.arange(n)
    return ((r + 1) * (i % 7) - 3 * r + (i % 3)).astype(dtype)


# ---- collectives ----

def check_allreduce(comm):
    size, rank = comm.size, comm.rank
    n = 1001
    for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64):
        all_data = np.stack([rank_data(r, n, dtype) for r in range(size)])
        for op, ref in (("sum", all_data.sum(axis=0, dtype=dtype)), ("min", all_data.min(axis=0)),
                        ("max", all_data.max(axis=0))):
            send = rank_data(rank, n, dtype)
            recv = np.empty_like(send)
            out = comm.allreduce(send, recv, op=op)
            check(out is recv, f"allreduce returns recv ({dtype.__name__} {op})")
            check(np.array_equal(recv, ref), f"allreduce {dtype.__name__} {op} out of place")
            check(np.array_equal(send, rank_data(rank, n, dtype)), "allreduce changed send")
            buf = rank_data(rank, n, dtype)
            out = comm.allreduce(buf, op=op, timeout=60)
            check(out is buf, "in-place allreduce returns its buffer")
            check(np.array_equal(buf, ref), f"allreduce {dtype.__name__} {op} in place")
    # Other buffer-protocol objects: array.array and a memoryview of a bytearray.
    import array
    a = array.array("d", [float(rank)] * 5)
    comm.allreduce(a)
    check(list(a) == [float(sum(range(size)))] * 5, "allreduce of an array.array")
    ba = bytearray(np.full(4, rank + 1, dtype=np.int32).tobytes())
    comm.allreduce(memoryview(ba).cast("i"))
    check(np.array_equal(np.frombuffer(ba, np.int32), np.full(4, size * (size + 1) // 2)),
          "allreduce of a memoryview")
    comm.allreduce(np.zeros(0, np.float32))  # empty is fine


def check_broadcast_allgather_barrier(comm):
    size, rank = comm.size, comm.rank
    for root in range(size):
        buf = np.arange(300, dtype=np.int64) + 1000 * root if rank == root else \
            np.full(300, -1, dtype=np.int64)
        out = comm.broadcast(buf, root)
        check(out is buf, "broadcast returns its buffer")
        check(np.array_equal(buf, np.arange(300) + 1000 * root), f"broadcast from {root}")
    send = rank_data(rank, 77, np.float64)
    recv = np.empty(77 * size, np.float64)
    out = comm.allgather(send, recv, timeout=60)
    check(out is recv, "allgather returns recv")
    ref = np.concatenate([rank_data(r, 77, np.float64) for r in range(size)])
    check(np.array_equal(recv, ref), "allgather")
    recv2 = recv.reshape(size, 77)  # a 2-D C-contiguous array is one buffer too
    recv2[:] = -1
    comm.allgather(send, recv2)
    check(np.array_equal(recv2.ravel(), ref), "allgather into a 2-D array")
    comm.barrier()
    comm.barrier(timeout=60)
    # One rule for every timeout (C++ kWaitForever, C EC_WAIT_FOREVER): WAIT_FOREVER is math.inf
    # (so is its old spelling), -1 its alias, 0 the same as None (EAGERCOMM_TIMEOUT).
    check(eagercomm.WAIT_FOREVER == float("inf"), "WAIT_FOREVER is math.inf")
    comm.barrier(timeout=eagercomm.WAIT_FOREVER)
    comm.barrier(timeout=float("inf"))
    comm.barrier(timeout=-1)
    comm.barrier(timeout=0)


def check_gil_released(comm):
    """Another thread runs while this one waits in a collective that the others join late."""
    comm.barrier()
    ticks = [0]
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.01)

    if comm.rank == 0:
        t = threading.Thread(target=tick)
        t.start()
        comm.barrier()  # the others come 1 s later
        stop.set()
        t.join()
        check(ticks[0] >= 3, f"the GIL was held during barrier: {ticks[0]} ticks in 1 s")
    else:
        time.sleep(1.0)
        comm.barrier()


# ---- torch ----

def check_torch(comm):
    try:
        import torch
    except ImportError:
        print(f"rank {comm.rank}: torch not importable: torch checks skipped", flush=True)
        return
    size, rank = comm.size, comm.rank
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                  torch.int64):
        t = torch.arange(50, dtype=torch.int64).to(dtype) + rank
        ptr = t.data_ptr()
        out = comm.allreduce(t)
        ref = (torch.arange(50, dtype=torch.int64) * size + size * (size - 1) // 2).to(dtype)
        check(out is t and t.data_ptr() == ptr, f"torch {dtype}: not the same tensor")
        check(torch.equal(t, ref), f"torch {dtype} allreduce in place: {t[:4]} vs {ref[:4]}")
    # Out of place into a slice of a bigger tensor (a contiguous view: data_ptr has the offset).
    big = torch.zeros(20, dtype=torch.float32)
    comm.allreduce(torch.ones(10), big[5:15], op="max")
    check(torch.equal(big, torch.cat([torch.zeros(5), torch.ones(10), torch.zeros(5)])),
          "torch allreduce into a view")
    t = torch.full((3, 4), float(rank))
    comm.broadcast(t, size - 1)
    check(torch.equal(t, torch.full((3, 4), float(size - 1))), "torch broadcast")
    recv = torch.empty(size * 2, dtype=torch.int64)
    comm.allgather(torch.tensor([rank, -rank]), recv)
    check(recv.tolist() == [v for r in range(size) for v in (r, -r)], "torch allgather")
    # Bad tensors.
    expect_raises("non-contiguous tensor", eagercomm.InvalidArgumentError, ["contiguous"],
                  comm.allreduce, torch.zeros(10)[::2])
    check(issubclass(eagercomm.InvalidArgumentError, ValueError), "InvalidArgumentError is a "
          "ValueError")
    expect_raises("int8 tensor", eagercomm.InvalidTypeError, ["torch.int8"], comm.allreduce,
                  torch.zeros(4, dtype=torch.int8))
    expect_raises("mixed tensor types", eagercomm.InvalidTypeError, ["float64", "float32"],
                  comm.allreduce, torch.zeros(4), torch.zeros(4, dtype=torch.float64))

    class FakeCudaTensor:  # what a CUDA tensor looks like to the duck typing
        dtype = torch.float32
        device = torch.device("cuda", 0) if hasattr(torch, "device") else None

        def data_ptr(self):
            return 0

        def is_contiguous(self):
            return True

        def numel(self):
            return 4

    expect_raises("CUDA tensor", eagercomm.NotSupportedError, ["CUDA build", "cuda"],
                  comm.allreduce, FakeCudaTensor())
    # A meta tensor is no GPU tensor (it has no memory at all); a sparse one has no single
    # buffer: both are bad arguments, named as such (not torch's own RuntimeError).
    e = expect_raises("meta tensor", eagercomm.InvalidArgumentError, ["meta tensor", "CPU"],
                      comm.allreduce, torch.ones(4, device="meta"))
    check(e is None or "GPU" not in str(e), f"a meta tensor called a GPU tensor: {e}")
    expect_raises("sparse tensor", eagercomm.InvalidArgumentError,
                  ["torch.sparse_coo", "dense"], comm.allreduce, torch.eye(3).to_sparse())
    expect_raises("sparse recv", eagercomm.InvalidArgumentError, ["recv", "sparse"],
                  comm.allreduce, torch.ones(9), torch.eye(3).to_sparse())
    # A partial allreduce on tensors: post a tensor, receive into a tensor.
    pa = eagercomm.PartialAllreduce(comm, 8, torch.float32, mode="sync")
    pa.post(torch.full((8,), float(rank + 1)))
    out = torch.zeros(8)
    r = pa.wait(out=out)
    check(r.data is out, "partial wait(out=tensor) hands back the tensor")
    check(torch.equal(out, torch.full((8,), float(size * (size + 1) // 2))),
          f"partial sync round on tensors: {out}")
    pa.flush()
    pa.destroy()


# ---- partial allreduce ----

def check_partial(comm, mode, dtype):
    size, rank = comm.size, comm.rank
    n, steps = 129, 30
    pa = eagercomm.PartialAllreduce(comm, n, dtype, mode=mode, seed=3)
    check(pa.count == n, "pa.count")
    check(pa.dtype == np.dtype(dtype).name, f"pa.dtype {pa.dtype}")
    total = np.zeros(n, np.float64)
    rounds = []

    def take(r):
        rounds.append(r.round)
        check(0 <= r.fresh_count <= size and 0 <= r.contributors <= size,
              f"round {r.round}: fresh {r.fresh_count} contributors {r.contributors}")
        total[:] += r.data

    out = np.empty(n, dtype)
    for step in range(steps):
        if rank == step % size:
            time.sleep(0.002)  # some imbalance: a different slow rank each step
        pa.post(rank_data(rank, n, dtype) + step)
        took = False
        while True:
            r = pa.poll(out=out if step % 2 else None)
            if r is None:
                break
            take(r)
            took = True
        if not took:
            take(pa.wait(timeout=(None, 60, eagercomm.WAIT_FOREVER)[step % 3]))
    flush_round = pa.flush(take)
    check(rounds == list(range(len(rounds))), f"rounds out of order: {rounds[:10]}...")
    check(rounds and rounds[-1] == flush_round, f"flush round {flush_round}, last {rounds[-1:]}")
    want = sum(rank_data(r, n, np.float64) + s for r in range(size) for s in range(steps))
    check(np.array_equal(total, want), f"partial {mode} {np.dtype(dtype).name}: the results do "
          f"not add up to the posts (max diff {np.abs(total - want).max()})")
    stats = pa.stats
    check(stats["posts"] == steps, f"stats {stats}")
    # Straggler attribution: every rank's line counts every round taken once.
    late = pa.lateness()
    check(len(late) == size, f"lateness has {len(late)} entries for {size} ranks")
    for q, l in enumerate(late):
        check(l["rounds"] == len(rounds) and l["posts"] == steps and l["fresh"] <= l["posts"]
              and l["absent"] <= l["rounds"] and 0.0 <= l["late_fraction"] <= 1.0,
              f"lateness of rank {q}: {l}")
    # A wait that nothing can satisfy (nobody posts) ends at its timeout; the object lives on.
    e = expect_raises("partial wait timeout", eagercomm.TimeoutError, ["timeout"], pa.wait,
                      timeout=0.2)
    check(e is None or isinstance(e, builtins.TimeoutError), "TimeoutError is a builtin one")
    comm.barrier()
    # Bad input on a live object.
    expect_raises("post of the wrong size", eagercomm.InvalidArgumentError, ["128", "129"],
                  pa.post, np.zeros(n - 1, dtype))
    expect_raises("post of the wrong dtype", eagercomm.InvalidTypeError, ["int32"], pa.post,
                  np.zeros(n, np.int32))
    expect_raises("poll into the wrong size", eagercomm.InvalidArgumentError, ["out"], pa.poll,
                  np.zeros(n + 1, dtype))
    ro = np.zeros(n, dtype)
    ro.setflags(write=False)
    expect_raises("poll into a read-only array", eagercomm.InvalidArgumentError, ["read-only"],
                  pa.poll, ro)
    pa.destroy()
    expect_raises("post after destroy", eagercomm.AbortedError, ["destroy"], pa.post,
                  np.zeros(n, dtype))
    expect_raises("wait after destroy", eagercomm.AbortedError, ["destroy"], pa.wait)


# ---- bad input ----

def check_bad_input(comm):
    size = comm.size
    f = np.zeros(8, np.float32)
    expect_raises("uint8 buffer", eagercomm.InvalidTypeError, ["uint8", "'B'"], comm.allreduce,
                  np.zeros(8, np.uint8))
    check(issubclass(eagercomm.InvalidTypeError, TypeError), "InvalidTypeError is a TypeError")
    expect_raises("complex buffer", eagercomm.InvalidTypeError, ["'Zf'"], comm.allreduce,
                  np.zeros(8, np.complex64))
    expect_raises("a list", eagercomm.InvalidTypeError, ["list"], comm.allreduce, [1.0, 2.0])
    expect_raises("None", eagercomm.InvalidTypeError, ["None"], comm.broadcast, None, 0)
    expect_raises("non-contiguous array", eagercomm.InvalidArgumentError, ["C-contiguous"],
                  comm.allreduce, np.zeros(16, np.float32)[::2])
    expect_raises("Fortran-ordered array", eagercomm.InvalidArgumentError, ["C-contiguous"],
                  comm.broadcast, np.zeros((3, 4), np.float32, order="F"), 0)
    ro = np.zeros(8, np.float32)
    ro.setflags(write=False)
    expect_raises("read-only in place", eagercomm.InvalidArgumentError, ["read-only"],
                  comm.allreduce, ro)
    expect_raises("read-only recv", eagercomm.InvalidArgumentError, ["recv", "read-only"],
                  comm.allreduce, f, ro)
    expect_raises("bytes as recv", eagercomm.InvalidArgumentError, ["read-only"],
                  comm.allgather, f, bytes(32 * size))
    comm.allreduce(ro, f)  # a read-only send is fine
    expect_raises("recv of the wrong size", eagercomm.InvalidArgumentError, ["9", "8"],
                  comm.allreduce, f, np.zeros(9, np.float32))
    expect_raises("recv of another type", eagercomm.InvalidTypeError, ["float64", "float32"],
                  comm.allreduce, f, np.zeros(8, np.float64))
    expect_raises("allgather recv of the wrong size", eagercomm.InvalidArgumentError,
                  ["size x len(send)"], comm.allgather, f, np.zeros(8 * size + 1, np.float32))
    expect_raises("unknown op", eagercomm.InvalidArgumentError, ["prod", "sum, min, max"],
                  comm.allreduce, f, None, "prod")
    expect_raises("negative timeout", eagercomm.InvalidArgumentError, ["timeout", "WAIT_FOREVER"],
                  comm.barrier, -2.0)
    expect_raises("NaN timeout", eagercomm.InvalidArgumentError, ["timeout", "WAIT_FOREVER"],
                  comm.barrier, float("nan"))
    expect_raises("unknown mode", eagercomm.InvalidArgumentError, ["fast"],
                  eagercomm.PartialAllreduce, comm, 4, "float32", mode="fast")
    expect_raises("unknown late policy", eagercomm.InvalidArgumentError, ["keep"],
                  eagercomm.PartialAllreduce, comm, 4, "float32", late="keep")
    expect_raises("unsupported dtype name", eagercomm.InvalidTypeError, ["int8"],
                  eagercomm.PartialAllreduce, comm, 4, "int8")
    expect_raises("unsupported numpy dtype", eagercomm.InvalidTypeError, ["uint16"],
                  eagercomm.PartialAllreduce, comm, 4, np.dtype(np.uint16))
    # Checked by the runtime on every rank (collective): a root that does not exist.
    e = expect_raises("broadcast from root = size", eagercomm.InvalidArgumentError, ["root"],
                      comm.broadcast, f, size)
    check(e is None or e.code == "invalid argument", f"code {getattr(e, 'code', None)}")
    comm.barrier()  # still usable
    # Integers beyond what the C++ types hold: eagercomm's errors naming the argument, not
    # pybind11's "incompatible function arguments" TypeError.
    e = expect_raises("broadcast from root 2**40", eagercomm.InvalidArgumentError,
                      ["root 1099511627776", "not a rank"], comm.broadcast, f, 2**40)
    check(e is None or e.code == "invalid argument", f"code {getattr(e, 'code', None)}")
    expect_raises("broadcast from root -2**70", eagercomm.InvalidArgumentError,
                  ["root -" + str(2**70)], comm.broadcast, f, -2**70)
    expect_raises("root of another type", eagercomm.InvalidTypeError, ["root", "float"],
                  comm.broadcast, f, 1.5)
    comm.barrier()  # still usable
    expect_raises("negative count", eagercomm.InvalidArgumentError, ["count -5", "negative"],
                  eagercomm.PartialAllreduce, comm, -5, "float32")
    expect_raises("negative sync_every", eagercomm.InvalidArgumentError,
                  ["sync_every -1", "negative"], eagercomm.PartialAllreduce, comm, 4, "float32",
                  sync_every=-1)
    expect_raises("sync_every too large", eagercomm.InvalidArgumentError,
                  ["sync_every", "too large"], eagercomm.PartialAllreduce, comm, 4, "float32",
                  sync_every=2**32)
    expect_raises("seed too large", eagercomm.InvalidArgumentError, ["seed", "too large"],
                  eagercomm.PartialAllreduce, comm, 4, "float32", seed=2**64)
    expect_raises("negative result_depth", eagercomm.InvalidArgumentError,
                  ["result_depth -1"], eagercomm.PartialAllreduce, comm, 4, "float32",
                  result_depth=-1)
    expect_raises("count of another type", eagercomm.InvalidTypeError, ["count", "str"],
                  eagercomm.PartialAllreduce, comm, "4", "float32")
    comm.barrier()


def check_mismatch_messages(comm):
    """Ranks that disagree: the messages name element types by name and the call the
    application made, not the allgather a partial allreduce runs to compare its arguments."""
    comm.barrier()
    e = expect_raises("partial allreduces of different types", eagercomm.MismatchError,
                      ["dtype=f32", "dtype=f64"], eagercomm.PartialAllreduce, comm, 4,
                      "float32" if comm.rank == 0 else "float64")
    check(e is None or "type=0" not in str(e), f"dtype as a number: {e}")
    expect_raises("partial allreduces with different late policies", eagercomm.MismatchError,
                  ["late=carry", "late=drop"], eagercomm.PartialAllreduce, comm, 4, "float32",
                  late="carry" if comm.rank == 0 else "drop")
    # One side creates a partial allreduce while the other calls a barrier; then the sides
    # swap, so that every rank has used as many partial allreduce numbers as the others.
    for creators in ({0}, set(range(1, comm.size))):
        comm.barrier()
        if comm.rank in creators:
            e = expect_raises("creation against a barrier", eagercomm.MismatchError,
                              ["partial allreduce creation", "barrier"],
                              eagercomm.PartialAllreduce, comm, 4, "float32")
        else:
            e = expect_raises("barrier against a creation", eagercomm.MismatchError,
                              ["partial allreduce creation", "barrier"], comm.barrier, 60)
        check(e is None or "allgather" not in str(e), f"the setup collective is named: {e}")
    comm.barrier()  # still usable
    pa = eagercomm.PartialAllreduce(comm, 4, "float32")  # and creation works again
    pa.flush()
    pa.destroy()


def check_partial_drop_stats(comm):
    """late="drop": stats["posts"] counts every post, the dropped ones too."""
    pa = eagercomm.PartialAllreduce(comm, 16, "float32", mode="solo", late="drop")
    steps = 5
    for step in range(steps):
        pa.post(np.ones(16, np.float32))
        time.sleep(0.2)  # round `step` activates meanwhile (solo: on the first post)...
        pa.post(np.ones(16, np.float32))  # ...so this one, meant for it too, is late: dropped
        pa.wait(timeout=60)
    while pa.poll() is not None:
        pass
    pa.flush()
    stats = pa.stats
    check(stats["posts"] == 2 * steps, f"late=drop: posts {stats['posts']}, expected "
          f"{2 * steps} (dropped {stats['dropped_posts']})")
    check(stats["dropped_posts"] >= 1, f"late=drop: nothing was dropped: {stats}")
    check(stats["late_posts"] >= stats["dropped_posts"], f"dropped posts are late ones: {stats}")
    pa.destroy()


def check_abort_from_thread(comm):
    """abort() from another thread ends a call blocked in this one (the GIL is released)."""
    marker = f"/tmp/eagercomm-test-core-{os.environ.get('EAGERCOMM_JOB_ID', 'job')}.aborted"
    comm.barrier()
    if comm.rank == 0:
        timer = threading.Timer(0.5, comm.abort, args=("test_core abort",))
        timer.start()
        # Nobody else joins this barrier: only the abort can end it.
        expect_raises("barrier aborted from a thread", eagercomm.AbortedError,
                      ["test_core abort"], comm.barrier, 60.0)
        timer.join()
        expect_raises("allreduce after abort", eagercomm.AbortedError, ["test_core abort"],
                      comm.allreduce, np.zeros(4, np.float32))
        with open(marker, "w") as f:
            f.write("aborted\n")
        # The others say they saw it; then the files go.
        seen = [f"{marker}.{r}" for r in range(1, comm.size)]
        deadline = time.monotonic() + 120
        while not all(map(os.path.exists, seen)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for path in [marker] + seen:
            if os.path.exists(path):
                os.unlink(path)
    else:
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(os.path.exists(marker), "rank 0 never reported its abort")
        open(f"{marker}.{comm.rank}", "w").close()
        # The peers' operations that need rank 0 fail instead of hanging.
        try:
            comm.barrier(timeout=60)
            check(False, "a barrier with an aborted rank 0 succeeded")
        except eagercomm.Error as e:
            check(isinstance(e, (eagercomm.PeerFailedError, eagercomm.AbortedError)),
                  f"barrier with an aborted rank 0 raised {type(e).__name__}: {e}")
    comm.destroy()
    expect_raises("barrier after destroy", eagercomm.AbortedError, [], comm.barrier)


def main():
    global RANK
    check(eagercomm.ABI_VERSION >= 1, "ABI_VERSION")
    with eagercomm.Communicator.from_env() as comm:
        RANK = comm.rank
        check(comm.size == int(os.environ["WORLD_SIZE"]), "size matches WORLD_SIZE")
        check(comm.rank == int(os.environ["RANK"]), "rank matches RANK")
        steps = [check_allreduce, check_broadcast_allgather_barrier, check_gil_released,
                 check_torch, check_bad_input, check_mismatch_messages, check_partial_drop_stats,
                 lambda c: check_partial(c, "solo", np.float32),
                 lambda c: check_partial(c, "majority", np.dtype(np.float64)),
                 lambda c: check_partial(c, "quorum:2", "int64"),
                 lambda c: check_partial(c, "deadline:2ms", np.float32),
                 lambda c: check_partial(c, "deadline:auto", np.float32),
                 check_abort_from_thread]
        for step in steps:
            try:
                step(comm)
            except Exception:  # noqa: BLE001 - report and stop: the ranks have diverged
                check(False, f"unexpected exception:\n{traceback.format_exc()}")
                break
    if FAILURES:
        print(f"rank {RANK}: {len(FAILURES)} checks failed", file=sys.stderr, flush=True)
        return 1
    print(f"rank {RANK}: test_core passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
