"""eagercomm: collectives and partial collectives (eager-SGD) for Python.

    import numpy as np, eagercomm
    with eagercomm.Communicator.from_env() as comm:        # under eagercomm-run / torchrun
        grad = np.ones(1024, dtype=np.float32)
        comm.allreduce(grad)                               # in place: the sum over ranks
        pa = eagercomm.PartialAllreduce(comm, grad.size, "float32", mode="solo")
        pa.post(grad)
        r = pa.wait()                                      # r.data, r.round, r.fresh_count

Buffers are used in place, without copies: numpy arrays and anything else with the buffer
protocol, and CPU torch tensors (torch is never imported here). docs/EMBEDDING.md has the
rules, the exceptions and the threading model.
"""

from eagercomm._core import (
    ABI_VERSION,
    AbortedError,
    Communicator,
    Error,
    InvalidArgumentError,
    InvalidTypeError,
    MismatchError,
    NotSupportedError,
    PartialAllreduce,
    PeerFailedError,
    Round,
    TimeoutError,
    UnavailableError,
    __version__,
)

__all__ = [
    "ABI_VERSION",
    "AbortedError",
    "Communicator",
    "Error",
    "InvalidArgumentError",
    "InvalidTypeError",
    "MismatchError",
    "NotSupportedError",
    "PartialAllreduce",
    "PeerFailedError",
    "Round",
    "UnavailableError",
]
# eagercomm.TimeoutError (a builtins.TimeoutError) stays out of __all__: a star import would
# shadow the builtin.
