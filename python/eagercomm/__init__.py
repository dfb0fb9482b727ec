"""eagercomm: collectives and partial collectives (eager-SGD) for Python.

    import numpy as np, eagercomm
    with eagercomm.Communicator.from_env() as comm:        # under eagercomm-run / torchrun
        grad = np.ones(1024, dtype=np.float32)
        comm.allreduce(grad)                               # in place: the sum over ranks
        pa = eagercomm.PartialAllreduce(comm, grad.size, "float32", mode="solo")
        pa.post(grad)
        r = pa.wait()                                      # r.data, r.round, r.fresh_count

Timeouts (``timeout=``, in seconds) follow one rule here, in the C API and in C++: None (the
default) or 0 waits EAGERCOMM_TIMEOUT (300 s unless set), ``eagercomm.WAIT_FOREVER``
(``math.inf``) waits without limit, a positive number is that limit; -1 is an alias of
WAIT_FOREVER (the C API's EC_TIMEOUT_INFINITE), any other negative number raises ValueError.

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
    WAIT_FOREVER,
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
    "WAIT_FOREVER",
]
# eagercomm.TimeoutError (a builtins.TimeoutError) stays out of __all__: a star import would
# shadow the builtin.
