"""Helpers shared by the torch tests (run under eagercomm-run, one process per rank)."""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import eagercomm.torch  # noqa: F401  (registers the backend)


def init(timeout_s=60):
    dist.init_process_group("eagercomm", timeout=datetime.timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size()


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {os.environ.get('RANK', '?')}: {what}")


def expect_raises(exc_types, needle, fn):
    """fn() must raise one of exc_types with `needle` in its message; returns the message."""
    try:
        fn()
    except exc_types as e:
        msg = str(e).splitlines()[0] if str(e) else ""
        check(needle in str(e), f"error {type(e).__name__}: {msg!r} does not mention {needle!r}")
        return msg
    except Exception as e:  # the wrong kind of error is a failure too
        raise AssertionError(f"expected {exc_types} mentioning {needle!r}, got "
                             f"{type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {exc_types} mentioning {needle!r}, nothing was raised")


def done(name):
    dist.barrier()
    print(f"{name}: rank {dist.get_rank()} ok", flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
