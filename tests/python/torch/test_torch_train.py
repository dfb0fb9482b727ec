"""examples/torch_train.py end to end on a small slice of Fashion-MNIST: DDP over Gloo as the
reference and EagerSGD solo, the eager run allowed 3 epochs to reach the reference's accuracy
after 1 (--eager-epochs 3 --stop-at-target). Checks what the report promises: the reference
trains first and exactly --epochs; an eager run trains past --epochs only while it has not
reached the target, and one that stopped early stopped at the first evaluation that reached
it; accuracy at equal epochs is the evaluation at --epochs; time to accuracy and speedup are
set exactly when the curve reaches the target; the summary covers every configuration.
"""

import json
import os
import sys
import tempfile

from _common import check

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))

import torch_train  # noqa: E402


def main():
    rank = int(os.environ.get("RANK", "0"))
    out = os.path.join(tempfile.gettempdir(),
                       f"torch_train_test_{os.environ.get('EAGERCOMM_JOB_ID', os.getppid())}.json")
    sys.argv = ["torch_train.py", "--train-samples", "2048", "--test-samples", "1000",
                "--epochs", "1", "--eager-epochs", "3", "--stop-at-target", "--batch", "32",
                "--evals-per-epoch", "2", "-k", "1", "--delay-ms", "2",
                "--configs", "ddp-gloo,eager-solo", "--seeds", "1", "--json", out]
    torch_train.main()
    if rank != 0:
        return
    with open(out) as f:
        d = json.load(f)
    os.remove(out)
    runs = {r["config"]: r for r in d["runs"]}
    check(set(runs) == {"ddp-gloo", "eager-solo"}, f"configurations {sorted(runs)}")
    ref, eager = runs["ddp-gloo"], runs["eager-solo"]
    target = ref["final_accuracy"]
    check(ref["epochs_trained"] == 1.0, f"the reference trained {ref['epochs_trained']} epochs")
    check(ref["time_to_accuracy_s"] is not None and ref["speedup"] == 1.0,
          f"the reference against itself: {ref['time_to_accuracy_s']}, {ref['speedup']}")
    for r in (ref, eager):
        check(len(r["curve"]) == len(r["curve_epochs"]), "curve and epochs differ in length")
        at_epochs = [a for (_, a), e in zip(r["curve"], r["curve_epochs"]) if e >= 1.0][0]
        check(r["accuracy_at_equal_epochs"] == at_epochs,
              f"{r['config']}: equal-epoch accuracy {r['accuracy_at_equal_epochs']} is not the "
              f"evaluation at epoch 1 ({at_epochs})")
        check(r["target_accuracy"] == target, "a run scored against another target")
    # The eager run: past epoch 1 only while short of the target, stopped at the first hit.
    accs = [a for _, a in eager["curve"]]
    epochs = eager["curve_epochs"]
    check(1.0 <= eager["epochs_trained"] <= 3.0, f"eager epochs {eager['epochs_trained']}")
    for i, e in enumerate(epochs[:-1]):
        if e >= 1.0:
            check(accs[i] < target, f"the eager run went on after reaching the target at epoch {e}")
    if eager["epochs_trained"] < 3.0:
        check(accs[-1] >= target, "the eager run stopped early without reaching the target")
    reached = max(accs) >= target
    check((eager["time_to_accuracy_s"] is not None) == reached,
          f"time to accuracy {eager['time_to_accuracy_s']} but reached={reached}")
    check((eager["speedup"] is not None) == reached, "speedup set without reaching the target")
    check(eager["stats"]["rounds"] > 0, "EagerSGD applied no round")
    summary = {s["config"]: s for s in d["summary"]}
    check(set(summary) == set(runs), "summary configurations")
    check(summary["eager-solo"]["accuracy_at_equal_epochs"] == [eager["accuracy_at_equal_epochs"]],
          "summary of equal-epoch accuracy")
    print("test_torch_train: OK")


if __name__ == "__main__":
    main()
