"""eagercomm for PyTorch (docs/TORCH.md).

``import eagercomm.torch`` registers the ``"eagercomm"`` torch.distributed backend, so that::

    import torch.distributed as dist
    import eagercomm.torch
    dist.init_process_group("eagercomm")      # under eagercomm-run or torchrun

and provides :class:`EagerSGD` (the eager-SGD optimizer: solo / majority / quorum / sync
partial allreduce) and :func:`partial_allreduce_hook` with :class:`PartialAllreduceState` for
``DistributedDataParallel.register_comm_hook``.

This subpackage does not need ``eagercomm._core``: its extension ``eagercomm._torch`` links
libeagercomm itself.
"""

from ._backend import BACKEND_NAME, communicator, get_communicator
from .ddp_hook import PartialAllreduceState, partial_allreduce_hook
from .optim import EagerSGD

__all__ = [
    "BACKEND_NAME",
    "EagerSGD",
    "PartialAllreduceState",
    "communicator",
    "get_communicator",
    "partial_allreduce_hook",
]
