"""Registers the "eagercomm" torch.distributed backend and finds communicators for the rest."""

import inspect

import torch
import torch.distributed as dist

from .. import _torch

BACKEND_NAME = "eagercomm"


def _torch_major():
    # "1.13.0a0", "2.1.0+cpu": the major version decides which Backend API we face.
    return int(torch.__version__.split(".")[0])


def _create_process_group(store, rank, size, timeout):
    """The creator torch.distributed calls from init_process_group / new_group."""
    return _torch.ProcessGroupEagercomm(store, rank, size, timeout)


def _register():
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return  # registered by an earlier import (importlib.reload)
    register = dist.Backend.register_backend
    if _torch_major() >= 2 and "devices" in inspect.signature(register).parameters:
        # torch >= 2.1: a backend says which devices it serves (the extension is built against
        # c10d::Backend there). Untested here: only torch 1.13 is installed.
        register(BACKEND_NAME, _create_process_group, devices=["cpu"])
    else:
        register(BACKEND_NAME, _create_process_group)


_register()

_env_communicator = None


def _eagercomm_backend_of(group):
    """The ProcessGroupEagercomm behind `group`, or None when it runs another backend."""
    if isinstance(group, _torch.ProcessGroupEagercomm):
        return group
    if _torch_major() >= 2 and hasattr(group, "_get_backend"):
        try:
            backend = group._get_backend(torch.device("cpu"))
        except RuntimeError:
            return None
        return backend if isinstance(backend, _torch.ProcessGroupEagercomm) else None
    return None


def get_communicator(process_group=None):
    """The eagercomm communicator for `process_group`.

    With a group: that group's, which must run the eagercomm backend. Without: the default
    group's when init_process_group("eagercomm") made it, else one joined from the launcher's
    environment (eagercomm-run, torchrun, mpirun, srun), made once per process.
    """
    global _env_communicator
    if process_group is not None:
        backend = _eagercomm_backend_of(process_group)
        if backend is None:
            raise ValueError(
                f"eagercomm: process group {process_group!r} does not run the eagercomm backend "
                f"(create it with backend='eagercomm', or pass no group)")
        return backend._communicator()
    if dist.is_available() and dist.is_initialized():
        backend = _eagercomm_backend_of(dist.distributed_c10d._get_default_group())
        if backend is not None:
            return backend._communicator()
    if _env_communicator is None:
        _env_communicator = _torch.Communicator.from_env()
    return _env_communicator


# Short alias.
communicator = get_communicator
