"""EagerSGD: eager-SGD (sgd/eager_sgd.h) as a torch optimizer."""

import torch

from .. import _torch
from ._args import U64_MAX, uint_arg
from ._backend import get_communicator

# Each tensor starts at a multiple of 16 floats (64 bytes) in the flat buffers, as torch's own
# allocations do, so kernels see the alignment they would see without us.
_ALIGN = 16


class EagerSGD(torch.optim.Optimizer):
    """Data-parallel momentum SGD on eagercomm's partial allreduce (the PPoPP'20 eager-SGD).

    ``loss.backward(); opt.step()`` posts this rank's gradient (divided by the world size) and
    applies every round that has completed, in round order: exactly sgd::EagerSgd::step. Every
    rank applies the same rounds with the same arithmetic, so the replicas stay bit-identical;
    rank 0's parameters are broadcast at construction. Call :meth:`finish` at the end of an epoch
    (collective): it flushes every carried gradient, after which every gradient any rank posted
    has been applied exactly once, on every rank.

    Memory: the parameters and their gradients are *views* of two flat float32 buffers made at
    construction (no per-step copy; the C++ optimizer updates the model in place). When something
    replaces a gradient (``zero_grad(set_to_none=True)`` elsewhere, ``p.grad = ...``), step()
    copies it into the flat buffer and re-binds the view; replacing a parameter's data
    (``model.to(...)`` after construction) is an error. :meth:`zero_grad` zeroes the flat gradient
    buffer and never sets gradients to None.

    Arguments: lr, momentum in [0, 1), weight_decay >= 0 (PyTorch's conventions:
    d = g + wd * p; v = mu * v + d; p -= lr(round) * v); mode "solo", "majority", "sync",
    "adaptive", "quorum:K" or "deadline:T" (T "5ms", "auto", ...); staleness "momentum" (default: mu is momentum lowered for the
    measured staleness of the rounds, 1 - mu = (1 - momentum)(1 + s), so the same momentum as
    for torch.optim.SGD is right in every mode), "step" (the same mu, and lr raised by
    (1 - mu) / (1 - momentum) so that a gradient's total step lr / (1 - mu) stays as configured),
    "rate" (lr / (1 + s) per round) or "none";
    solo_speedup (adaptive: runs solo rounds while they are predicted to make an epoch at least
    that many times faster than synchronous rounds, from the measured compute times; default
    1.3, 1 to 10); the rate is a function of the round (warmup_rounds, warmup_start,
    milestones, gamma), which keeps replicas identical (torch lr schedulers are not supported);
    late "carry" (default) or "drop"; sync_every N makes every N-th round synchronous; seed
    (majority's shared PRNG); result_depth (rounds a rank may lag); timeout in seconds
    (None or 0: EAGERCOMM_TIMEOUT; eagercomm.WAIT_FOREVER: no limit); on_failure "fail"
    (default) or "continue" (a rank that dies or hangs leaves the survivors training: the
    communicator shrinks to them, under ``eagercomm-run --keep-going``). The communicator: ``communicator=`` if given, else the
    eagercomm ``process_group``'s, else the default group's when it runs eagercomm, else one
    joined from the launcher's environment.

    Parameters must be dense float32 CPU tensors in one parameter group. Frozen parameters
    (``requires_grad=False``) take no part, as in torch.optim: they are neither moved into the
    flat buffers nor broadcast nor updated, so which parameters train is fixed at construction
    (freeze or unfreeze before making the optimizer) and frozen ones must be identical on every
    rank already (loaded from the same checkpoint).
    """

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, mode="solo", *,
                 warmup_rounds=0, warmup_start=0.1, milestones=(), gamma=0.1, late="carry",
                 sync_every=0, seed=0, result_depth=4, timeout=0.0, broadcast_initial=True,
                 staleness="momentum", solo_speedup=1.3, on_failure="fail", process_group=None,
                 communicator=None):
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError(
                f"EagerSGD: one parameter group only, got {len(self.param_groups)} (the rate "
                f"is a function of the round, shared by every parameter)")
        sync_every = uint_arg(sync_every, "EagerSGD: sync_every", hint=" (0: no synchronous "
                              "rounds)")
        seed = uint_arg(seed, "EagerSGD: seed", U64_MAX)
        result_depth = uint_arg(result_depth, "EagerSGD: result_depth",
                                hint=" (accepted: 1 .. 1024)")
        warmup_rounds = uint_arg(warmup_rounds, "EagerSGD: warmup_rounds", U64_MAX)
        milestones = [uint_arg(m, "EagerSGD: milestone", U64_MAX) for m in milestones]
        params = self.param_groups[0]["params"]
        if not params:
            raise ValueError("EagerSGD: no parameters")
        # Frozen parameters stay in the group (torch.optim keeps them too) but take no part.
        trainable = [(i, p) for i, p in enumerate(params) if p.requires_grad]
        if not trainable:
            raise ValueError(f"EagerSGD: no trainable parameters (all {len(params)} have "
                             f"requires_grad=False)")
        for i, p in trainable:
            if p.dtype != torch.float32:
                raise TypeError(f"EagerSGD: parameter {i} is {p.dtype}; only float32 is supported")
            if p.device.type != "cpu":
                raise ValueError(
                    f"EagerSGD: parameter {i} is on {p.device}; only CPU parameters are "
                    f"supported (collectives on GPU memory are not built yet)")
            if p.layout != torch.strided:
                raise ValueError(f"EagerSGD: parameter {i} is {p.layout}; dense tensors only")
        self._params = [p for _, p in trainable]
        self._indices = [i for i, _ in trainable]  # positions in the group, for messages
        self._slots = []
        offset = 0
        for p in self._params:
            self._slots.append((offset, p.numel()))
            offset += (p.numel() + _ALIGN - 1) // _ALIGN * _ALIGN
        self._flat_params = torch.zeros(offset, dtype=torch.float32)
        self._flat_grads = torch.zeros(offset, dtype=torch.float32)
        with torch.no_grad():
            for p, (off, n) in zip(self._params, self._slots):
                self._flat_params[off:off + n].copy_(p.detach().reshape(-1))
                p.data = self._flat_params[off:off + n].view_as(p)
                if p.grad is not None:
                    self._flat_grads[off:off + n].copy_(p.grad.reshape(-1))
                p.grad = self._flat_grads[off:off + n].view_as(p)
        self._comm = communicator if communicator is not None else get_communicator(process_group)
        self._impl = _torch._EagerSgd(
            self._comm, self._flat_params, self._flat_grads, mode=str(mode), lr=float(lr),
            momentum=float(momentum), weight_decay=float(weight_decay),
            warmup_rounds=warmup_rounds, warmup_start=float(warmup_start),
            milestones=milestones, gamma=float(gamma), late=str(late),
            sync_every=sync_every, seed=seed, result_depth=result_depth,
            timeout_s=0.0 if timeout is None else float(timeout), broadcast_initial=bool(broadcast_initial),
            staleness=str(staleness), solo_speedup=float(solo_speedup),
            on_failure=str(on_failure))

    def _rebind(self):
        """Makes every parameter and gradient a view of the flat buffers again (see class doc)."""
        base_p = self._flat_params.data_ptr()
        base_g = self._flat_grads.data_ptr()
        for i, p, (off, n) in zip(self._indices, self._params, self._slots):
            if p.data_ptr() != base_p + 4 * off:
                raise RuntimeError(
                    f"EagerSGD: parameter {i} no longer lives in the optimizer's flat buffer "
                    f"(was the model moved or its parameters replaced after EagerSGD was made?)")
            g = p.grad
            if g is not None and g.data_ptr() == base_g + 4 * off:
                continue
            view = self._flat_grads[off:off + n].view_as(p)
            with torch.no_grad():
                if g is None:
                    view.zero_()  # no gradient this step: contributes zeros
                else:
                    view.copy_(g)
            p.grad = view

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._rebind()
        self._impl.step()
        return loss

    def zero_grad(self, set_to_none=False):
        # Never None: the gradients must stay views of the flat buffer.
        self._rebind()
        self._flat_grads.zero_()

    def finish(self):
        """Collective: flush carried gradients and apply every remaining round (end of epoch)."""
        self._impl.finish()

    @property
    def version(self):
        """Rounds applied so far (identical on every rank after finish())."""
        return self._impl.version

    @property
    def current_lr(self):
        return self._impl.current_lr

    @property
    def current_momentum(self):
        """The momentum the next round is applied with (after the staleness rule)."""
        return self._impl.current_momentum

    @property
    def mode(self):
        return self._impl.mode

    def stats(self):
        """Counters of sgd::SgdStats: steps, rounds_applied, fresh/late posts, staleness, times."""
        return self._impl.stats()

    @property
    def flat_parameters(self):
        """The flat float32 parameter buffer (read it, e.g. to compare replicas; do not resize)."""
        return self._flat_params

    def state_dict(self):
        raise NotImplementedError(
            "EagerSGD: state_dict is not supported yet (the momentum lives in the C++ optimizer)")

    def load_state_dict(self, state_dict):
        raise NotImplementedError("EagerSGD: load_state_dict is not supported yet")
