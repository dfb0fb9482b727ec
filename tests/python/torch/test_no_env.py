"""Without a launcher's environment, init_process_group("eagercomm") and the communicator
lookup fail with errors that say which variable is missing (no hang)."""

import os
import subprocess
import sys

import torch.distributed as dist

import eagercomm.torch as et

for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
    os.environ.pop(var, None)
for var in [v for v in os.environ if v.startswith("EAGERCOMM_")]:
    os.environ.pop(var)

try:
    dist.init_process_group("eagercomm")
except ValueError as e:
    assert "RANK" in str(e) or "MASTER_ADDR" in str(e), f"unclear error: {e}"
    print(f"init_process_group without env: ValueError: {str(e).splitlines()[0]}")
else:
    raise AssertionError("init_process_group('eagercomm') without RANK etc. did not fail")

# torchrun's variables half set: the communicator lookup (EagerSGD, the DDP hook) names what
# is missing. Run in a child so that this process's environment stays clean.
code = ("import eagercomm.torch as et\n"
        "try:\n"
        "    et.get_communicator()\n"
        "except Exception as e:\n"
        "    print(type(e).__name__ + ': ' + str(e).splitlines()[0]); raise SystemExit(3)\n")
env = dict(os.environ, RANK="0", WORLD_SIZE="2")
child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
print("get_communicator with RANK/WORLD_SIZE only:", child.stdout.strip())
assert child.returncode == 3, f"expected a clear failure, got rc {child.returncode}: " \
    f"{child.stdout} {child.stderr}"
assert "MASTER_ADDR" in child.stdout, f"the error does not name MASTER_ADDR: {child.stdout}"
print("test_no_env: ok")
