"""Ctrl-C while a Python call waits in the runtime (ctest: python_interrupt_2).

Rank 0 sends itself SIGINT while it waits in a blocking collective that the other ranks join
late, or in PartialAllreduce.wait(): KeyboardInterrupt must arrive within a few seconds (not
when the call would have returned by itself), the collective must be abandoned as at a
timeout (the late ranks' calls end the same way as after rank 0 timed out) and the
communicator must stay usable. Then two child processes (single-rank jobs): an uncaught
KeyboardInterrupt from pa.wait(timeout=8) ends the child at once with a traceback, and an
error raised while a SIGINT is pending gives a traceback too, not the interpreter's raw
"object type name: ... lost sys.stderr" dump.

Every rank runs the same steps in the same order; a failed check is printed and counted.
"""
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

import eagercomm

FAILURES = []
RANK = -1
SIGNAL_AFTER = 0.3  # s into the wait
BOUND = 3.0         # KeyboardInterrupt within this after the signal (slices are 50 ms)
LATE = 4.0          # the others join this much later (> SIGNAL_AFTER + BOUND)


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"rank {RANK}: FAIL: {what}", file=sys.stderr, flush=True)


def outcome(fn):
    """'ok', or the name of the eagercomm error fn() raised."""
    try:
        fn()
        return "ok"
    except eagercomm.Error as e:
        return type(e).__name__


def usable(comm, what):
    """The communicator still works: an allreduce with the right answer, then a barrier."""
    x = np.full(8, comm.rank + 1.0, np.float32)
    comm.allreduce(x, timeout=60)
    check(np.array_equal(x, np.full(8, comm.size * (comm.size + 1) / 2, np.float32)),
          f"{what}: allreduce afterwards gave {x[:3]}")
    comm.barrier(timeout=60)


def interrupted(comm, what, call, late_call):
    """Rank 0: call() gets SIGINT while it waits. Others: late_call() LATE s later. Returns the
    late ranks' outcome (None on rank 0)."""
    comm.barrier(timeout=60)
    result = None
    if comm.rank == 0:
        timer = threading.Timer(SIGNAL_AFTER, os.kill, (os.getpid(), signal.SIGINT))
        start = time.monotonic()
        timer.start()
        try:
            call()
            check(False, f"{what}: returned instead of raising KeyboardInterrupt")
        except KeyboardInterrupt:
            waited = time.monotonic() - start
            check(waited < SIGNAL_AFTER + BOUND,
                  f"{what}: KeyboardInterrupt came {waited:.2f} s into the wait")
        except Exception as e:  # noqa: BLE001 - report what came instead
            check(False, f"{what}: raised {type(e).__name__}: {e}, not KeyboardInterrupt")
        timer.join()
    else:
        time.sleep(LATE)
        result = outcome(late_call)
    usable(comm, what)
    return result


def timed_out(comm, what, call, late_call):
    """As interrupted(), with rank 0's call ending at its timeout instead of a signal."""
    comm.barrier(timeout=60)
    result = None
    if comm.rank == 0:
        got = outcome(call)
        check(got == "TimeoutError", f"{what}: rank 0 got {got}, expected TimeoutError")
    else:
        time.sleep(LATE)
        result = outcome(late_call)
    usable(comm, what)
    return result


def check_collectives(comm):
    big = 1 << 16  # past the small boxes: the late rank cannot find rank 0's data complete
    cases = [
        ("barrier", lambda t: comm.barrier(timeout=t)),
        ("allreduce (ring)", lambda t: comm.allreduce(np.ones(big, np.float32), timeout=t)),
        ("broadcast", lambda t: comm.broadcast(np.ones(big, np.float32), 0, timeout=t)),
        ("allgather", lambda t: comm.allgather(np.ones(big, np.float32),
                                               np.empty(big * comm.size, np.float32),
                                               timeout=t)),
    ]
    for what, fn in cases:
        after_signal = interrupted(comm, what, lambda: fn(math.inf), lambda: fn(60))
        after_timeout = timed_out(comm, what, lambda: fn(0.3), lambda: fn(60))
        if comm.rank != 0:
            check(after_signal == after_timeout,
                  f"{what}: the late ranks got {after_signal} after rank 0's KeyboardInterrupt "
                  f"but {after_timeout} after its timeout")
            check(after_signal != "ok", f"{what}: the late rank completed an abandoned call")
    # The small-box allreduce (its late peers may still complete it: they hold all the data)
    # and the default timeout (EAGERCOMM_TIMEOUT).
    interrupted(comm, "allreduce (small boxes)", lambda: comm.allreduce(np.ones(4, np.float32)),
                lambda: comm.allreduce(np.ones(4, np.float32), timeout=60))


def check_partial(comm):
    pa = eagercomm.PartialAllreduce(comm, 8, "float32", mode="sync")
    comm.barrier(timeout=60)
    if comm.rank == 0:
        # Nobody posts: only the signal ends this wait (timeout=math.inf), as it ends one with
        # a timeout (the pa.wait(timeout=8)).
        for timeout in (math.inf, 8):
            timer = threading.Timer(SIGNAL_AFTER, os.kill, (os.getpid(), signal.SIGINT))
            start = time.monotonic()
            timer.start()
            try:
                pa.wait(timeout=timeout)
                check(False, f"pa.wait(timeout={timeout}) returned a round nobody posted for")
            except KeyboardInterrupt:
                waited = time.monotonic() - start
                check(waited < SIGNAL_AFTER + BOUND,
                      f"pa.wait(timeout={timeout}): KeyboardInterrupt after {waited:.2f} s")
            timer.join()
    comm.barrier(timeout=60)
    # The object lives on, as after a timeout: the round completes once everyone posts.
    pa.post(np.full(8, comm.rank + 1.0, np.float32))
    r = pa.wait(timeout=60)
    check(r.round == 0 and np.array_equal(r.data, np.full(8, comm.size * (comm.size + 1) / 2)),
          f"partial round after the interrupt: round {r.round}, {r.data[:3]}")
    pa.flush()
    pa.destroy()


CHILD_WAIT = """
import eagercomm, sys
comm = eagercomm.Communicator.from_env()
pa = eagercomm.PartialAllreduce(comm, 4, "float32")
print("waiting", flush=True)
pa.wait(timeout=8)
"""

# SIGINT, then at once an abort that ends the wait with AbortedError: the error is raised while
# the signal is pending.
CHILD_PENDING = """
import os, signal, threading, eagercomm
comm = eagercomm.Communicator.from_env()
pa = eagercomm.PartialAllreduce(comm, 4, "float32")
def fire():
    os.kill(os.getpid(), signal.SIGINT)
    comm.abort("child abort")
threading.Timer(0.3, fire).start()
pa.wait(timeout=30)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child(code, interrupt_after=None):
    """Runs `code` as a single-rank job; returns (returncode, stderr, seconds)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EAGERCOMM_") and k not in
           ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               EAGERCOMM_TIMEOUT="60s")
    start = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    if interrupt_after is not None:
        line = p.stdout.readline()  # "waiting": in (or about to enter) the wait
        check(line.strip() == "waiting", f"child printed {line!r}")
        time.sleep(interrupt_after)
        start = time.monotonic()
        p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        check(False, "child did not end within 60 s")
    return p.returncode, err, time.monotonic() - start


def check_children():
    rc, err, took = child(CHILD_WAIT, interrupt_after=0.5)
    check(took < BOUND + 1, f"child pa.wait(timeout=8): ended {took:.2f} s after SIGINT")
    check(rc != 0, f"child pa.wait: exit code {rc}")
    check("Traceback" in err and "KeyboardInterrupt" in err,
          f"child pa.wait: no KeyboardInterrupt traceback:\n{err}")
    rc, err, _ = child(CHILD_PENDING)
    check(rc != 0, f"child with a pending signal: exit code {rc}")
    check("lost sys.stderr" not in err and "object type name" not in err,
          f"child with a pending signal: raw dump instead of a traceback:\n{err}")
    # KeyboardInterrupt with the AbortedError as its context, or alone when the wait saw the
    # signal before the abort ended it (the slices race with the abort).
    check("Traceback" in err and "KeyboardInterrupt" in err,
          f"child with a pending signal: expected a KeyboardInterrupt traceback:\n{err}")


def main():
    global RANK
    with eagercomm.Communicator.from_env() as comm:
        RANK = comm.rank
        try:
            check_collectives(comm)
            check_partial(comm)
            if comm.rank == 0:
                check_children()
            comm.barrier(timeout=120)
        except Exception as e:  # noqa: BLE001 - report and stop: the ranks have diverged
            import traceback
            check(False, f"unexpected exception {e!r}:\n{traceback.format_exc()}")
    if FAILURES:
        print(f"rank {RANK}: {len(FAILURES)} checks failed", file=sys.stderr, flush=True)
        return 1
    print(f"rank {RANK}: test_interrupt passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
