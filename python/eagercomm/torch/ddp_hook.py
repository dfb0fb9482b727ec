"""partial_allreduce_hook: eager-SGD's partial allreduce as a DDP communication hook.

    state = PartialAllreduceState(mode="solo")
    ddp.register_comm_hook(state, partial_allreduce_hook)
    for batch in loader:
        loss(ddp(batch)).backward(); opt.step(); opt.zero_grad()
    if state.finish(ddp.module):      # collective: the gradients still carried
        opt.step(); opt.zero_grad()

Each DDP bucket gets a persistent partial allreduce (made collectively the first time the
bucket is seen; DDP reduces buckets in the same order on every rank). At every iteration the
hook posts the bucket divided by the world size and hands DDP the *next round's result*, one
round per iteration: the mean of the round's contributions (fresh gradients of the ranks that
made it, plus the carried gradients of ranks that were late for earlier rounds; zeros for a rank
that contributed nothing). A rank that is late finds that round complete and does not wait; a
rank that is early waits only for the round its own post started (solo) or joined. Since every
rank applies round k at its k-th iteration, replicas stay identical under a deterministic
optimizer. See docs/TORCH.md for what a late rank receives and how far it may lag.
"""

import torch

from .. import _torch
from ._args import U64_MAX, uint_arg
from ._backend import get_communicator


class PartialAllreduceState:
    """State of :func:`partial_allreduce_hook`: the communicator and one partial allreduce per
    bucket.

    mode: "solo" (default), "majority", "sync", "adaptive", "quorum:K" or "deadline:T" (T a
    duration such as "5ms", or "auto"); late: "carry" or "drop";
    sync_every: every N-th round synchronous (bounds staleness); seed: majority's PRNG;
    result_depth: how many rounds a rank may fall behind before the others wait for it;
    timeout: seconds a rank waits for a round (None or 0: EAGERCOMM_TIMEOUT;
    eagercomm.WAIT_FOREVER: no limit; the rule of every eagercomm timeout); on_failure "fail"
    (default) or "continue": when a rank dies or hangs the buckets' rounds go on over the
    survivors (the communicator shrinks in place, the hook divides by the survivors' number).
    DDP's own collectives through the process group are not covered: use
    ``broadcast_buffers=False`` (or a model without buffers), and compare or gather with
    eagercomm's or ``dist.all_reduce`` rather than collectives sized by the original world.
    The communicator:
    ``communicator=``, else ``process_group``'s (an eagercomm group), else the default group's
    when it runs eagercomm, else one joined from the launcher's environment.
    """

    def __init__(self, mode="solo", *, late="carry", sync_every=0, seed=0, result_depth=4,
                 timeout=0.0, on_failure="fail", process_group=None, communicator=None):
        self.mode = str(mode)
        self.late = str(late)
        self.sync_every = uint_arg(sync_every, "PartialAllreduceState: sync_every",
                                   hint=" (0: no synchronous rounds)")
        self.seed = uint_arg(seed, "PartialAllreduceState: seed", U64_MAX)
        self.result_depth = uint_arg(result_depth, "PartialAllreduceState: result_depth",
                                     hint=" (accepted: 1 .. 1024)")
        self.timeout = 0.0 if timeout is None else float(timeout)
        self.on_failure = str(on_failure)
        self._process_group = process_group
        self._comm = communicator
        self._buckets = {}  # (index, numel) -> [_PartialAllreduce, parameters]
        self._order = []    # keys in creation order: the same on every rank
        self.last_round = {}  # bucket index -> the last result's round info

    @property
    def communicator(self):
        if self._comm is None:
            self._comm = get_communicator(self._process_group)
        return self._comm

    @property
    def world_size(self):
        return self.communicator.size

    def _object_for(self, bucket, tensor):
        key = (bucket.index(), tensor.numel())
        entry = self._buckets.get(key)
        if entry is None:
            pa = _torch._PartialAllreduce(
                self.communicator, tensor.numel(), mode=self.mode, late=self.late,
                sync_every=self.sync_every, seed=self.seed, result_depth=self.result_depth,
                timeout_s=self.timeout, on_failure=self.on_failure)
            entry = [pa, list(bucket.parameters())]
            self._buckets[key] = entry
            self._order.append(key)
        return entry[0]

    def finish(self, module=None):
        """Collective, at the end of training (or of an epoch): flushes every bucket.

        The gradients still carried (posted by late ranks but in no round delivered yet) are
        summed per bucket; when there are any, they are written into the parameters' ``.grad``
        (identical on every rank) and True is returned: run one more optimizer step. `module` is
        accepted for symmetry with DDP code and not needed.
        """
        del module
        wrote = False
        for key in self._order:
            pa, params = self._buckets[key]
            out = torch.zeros(pa.count, dtype=torch.float32)
            if pa.flush_into(out) == 0:
                continue
            if not wrote:
                for entry in self._buckets.values():
                    for p in entry[1]:
                        if p.grad is not None:
                            p.grad.zero_()
                wrote = True
            offset = 0
            for p in params:
                n = p.numel()
                g = out[offset:offset + n].view_as(p)
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.add_(g)
                offset += n
        return wrote

    def stats(self):
        """Per bucket (in creation order): the partial allreduce's counters."""
        return [dict(bucket=k[0], count=k[1], **self._buckets[k][0].stats()) for k in self._order]


def partial_allreduce_hook(state, bucket):
    """DDP comm hook: the bucket's gradient through eager-SGD's partial allreduce (module doc)."""
    tensor = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    if tensor.dtype != torch.float32:
        raise TypeError(f"partial_allreduce_hook: bucket {bucket.index()} is {tensor.dtype}; "
                        f"only float32 gradients are supported")
    if tensor.device.type != "cpu":
        raise ValueError(f"partial_allreduce_hook: bucket {bucket.index()} is on "
                         f"{tensor.device}; only CPU gradients are supported")
    pa = state._object_for(bucket, tensor)
    tensor.div_(state.world_size)
    state.last_round[bucket.index()] = pa.exchange(tensor)
    fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut
