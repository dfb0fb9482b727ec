"""The toy task the DDP hook tests train: 4 Gaussian blobs in 8 dimensions, one rank's batches
from its own generator, a shared schedule of which rank is slow at each step."""

import random
import time

import torch

CLASSES = 4
torch.manual_seed(5)  # the centres, then the caller's model: the same on every rank
centers = torch.randn(CLASSES, 8) * 2.5


def batch(gen, n):
    y = torch.randint(0, CLASSES, (n,), generator=gen)
    return centers[y] + torch.randn(n, 8, generator=gen), y


def train(ddp, opt, rank, size, steps=150, before_step=None):
    """`steps` SGD steps of batches of 32; a rank drawn per step sleeps 5 ms before its optimizer
    step. before_step(step), if given, runs first at every step."""
    gen = torch.Generator().manual_seed(100 + rank)
    shared = random.Random(11)
    for step in range(steps):
        if before_step:
            before_step(step)
        slow = shared.randrange(size)
        x, y = batch(gen, 32)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        if rank == slow:
            time.sleep(0.005)
        opt.step()


def accuracy(model):
    """On 1000 held-out points, the same on every rank."""
    x_test, y_test = batch(torch.Generator().manual_seed(999), 1000)
    with torch.no_grad():
        return (model(x_test).argmax(1) == y_test).float().mean().item()
