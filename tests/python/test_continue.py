"""on_failure="continue" from Python (ctest: python_continue_3, under eagercomm-run --keep-going).

The last rank SIGKILLs itself in the middle of solo rounds. The survivors go on through
PartialAllreduce(on_failure="continue"), and check: the object and the communicator now have
size - 1 ranks, every post of theirs is summed exactly once, the dead rank's posts that made it
are a prefix of its posts (its last contribution in every result or in none), and an allreduce
over the survivors (after Communicator.generation says it was rebuilt) agrees on the results'
checksum. Each survivor prints "SURVIVOR OK rank=<r>" when every check passed.
"""
import math
import os
import signal
import sys

import numpy as np

import eagercomm

comm = eagercomm.Communicator.from_env()
P, me = comm.size, comm.rank
victim = P - 1
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"rank {me}: FAIL: {what}", file=sys.stderr, flush=True)


n = P + 1
pa = eagercomm.PartialAllreduce(comm, n, "float64", mode="solo", seed=5, on_failure="continue")
total = np.zeros(n)
rounds = 0


def take(r):
    global rounds
    check(r.round == rounds, f"round {r.round} taken, expected {rounds}")
    rounds += 1
    total[:] += r.data


posts = 0
for step in range(24):
    if me == victim and step == 9:
        os.kill(os.getpid(), signal.SIGKILL)
    g = np.zeros(n)
    g[me] = 2.0 ** posts if me == victim else 1.0
    g[P] = 1.0
    pa.post(g)
    posts += 1
    got = False
    while (r := pa.poll()) is not None:
        take(r)
        got = True
    if not got and step % 3 == 2:
        take(pa.wait())
pa.flush(take)
pa.flush(take)  # a survivor that returned from the first flush before the death meets it here

check(pa.size == P - 1 and comm.size == P - 1, f"size {pa.size} / {comm.size}, expected {P - 1}")
check(comm.generation == 1, f"generation {comm.generation}")
check(total[me] == posts, f"my posts: {posts}, in the results {total[me]}")
included = round(math.log2(total[victim] + 1))
check(total[victim] == 2 ** included - 1, f"dead rank's posts {total[victim]} not a prefix")
mine = np.array([total.sum(), float(rounds)])
everyone = comm.allreduce(mine.copy(), op="max")
check(np.array_equal(everyone, mine), f"results differ between survivors: {mine} vs {everyone}")
survivors = comm.allreduce(np.array([1.0]))
check(survivors[0] == P - 1, f"{survivors[0]} survivors in an allreduce")
try:
    eagercomm.PartialAllreduce(comm, 4, "float32", on_failure="sometimes")
    check(False, "on_failure='sometimes' accepted")
except ValueError as e:
    check("on_failure" in str(e), f"error names on_failure: {e}")
if not failures:
    print(f"SURVIVOR OK rank={me}", flush=True)
sys.exit(1 if failures else 0)
