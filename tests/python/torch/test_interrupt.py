"""Ctrl-C while dist.barrier() waits on the eagercomm backend for a late rank: KeyboardInterrupt
arrives within a few seconds, and the group is left as its timeout leaves it (the communicator
aborted: later collectives fail at once on every rank, none hangs). Compared against a group
whose timeout expires in the same situation."""

import datetime
import os
import signal
import threading
import time

import torch
import torch.distributed as dist

from _common import check, done, init

SIGNAL_AFTER = 0.3  # s into the wait
BOUND = 3.0         # KeyboardInterrupt within this after the signal
LATE = 4.0          # the other ranks come this much later (> SIGNAL_AFTER + BOUND)

rank, size = init()


def fails_at_once(group, what):
    """A collective on the abandoned group raises RuntimeError quickly; returns its message."""
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4), group=group)
        check(False, f"{what}: all_reduce on the abandoned group succeeded")
        return ""
    except RuntimeError as e:
        took = time.monotonic() - start
        check(took < BOUND, f"{what}: all_reduce on the abandoned group took {took:.2f} s")
        return str(e)


def case(what, timeout_s, interrupt):
    group = dist.new_group(backend="eagercomm", timeout=datetime.timedelta(seconds=timeout_s))
    dist.barrier(group=group)
    if rank == 0:
        start = time.monotonic()
        timer = None
        if interrupt:
            timer = threading.Timer(SIGNAL_AFTER, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
        try:
            dist.barrier(group=group)
            check(False, f"{what}: the barrier completed without the late ranks")
        except KeyboardInterrupt:
            check(interrupt, f"{what}: KeyboardInterrupt without a signal")
            waited = time.monotonic() - start
            check(waited < SIGNAL_AFTER + BOUND, f"{what}: KeyboardInterrupt after {waited:.2f} s")
        except RuntimeError as e:
            check(not interrupt, f"{what}: RuntimeError instead of KeyboardInterrupt: {e}")
            check("timeout" in str(e), f"{what}: {e}")
        if timer is not None:
            timer.join()
        msg = fails_at_once(group, what)
        check("aborted" in msg and ("interrupted" if interrupt else "timeout") in msg,
              f"{what}: rank 0's later error does not say why: {msg}")
    else:
        time.sleep(LATE)
        try:
            dist.barrier(group=group)
            check(False, f"{what}: rank {rank}'s late barrier succeeded")
        except RuntimeError as e:
            check("failed" in str(e), f"{what}: rank {rank}'s late barrier: {e}")
        fails_at_once(group, what)
    dist.barrier()  # the default group is another communicator: unaffected


case("group timeout", 1, interrupt=False)
case("Ctrl-C", 60, interrupt=True)
done("test_interrupt")
