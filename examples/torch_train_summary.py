#!/usr/bin/env python3
"""Markdown rows for sgd/EXPERIMENTS.md from examples/torch_train.py --json files, one per setup:

    examples/torch_train_summary.py NAME=FILE.json [NAME=FILE.json ...]

Per setup and configuration, mean [min, max] over seeds of: the speedup in time to the
reference's final accuracy (with how many seeds never reached it), accuracy minus the reference
at equal epochs (points), accuracy at equal wall time (%), speedup per epoch over the reference
(its time per epoch over this configuration's), and the mean momentum EagerSGD applied.
"""

import json
import sys


def spread(values, fmt):
    if not values:
        return "-"
    return f"{fmt.format(sum(values) / len(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def rows(name, path):
    with open(path) as f:
        d = json.load(f)
    ref = d["target_config"]
    runs = d["runs"]
    configs = list(dict.fromkeys(r["config"] for r in runs))
    per_epoch_ref = {r["seed"]: r["time_s"] / r["epochs_trained"] for r in runs if r["config"] == ref}
    acc_ref = {r["seed"]: r["accuracy_at_equal_epochs"] for r in runs if r["config"] == ref}
    settings = d["settings"]
    label = (f"{name} ({settings['k']} of {d['ranks']} x {settings['delay_ms']:g} ms, "
             f"{settings['epochs']} epochs, eager up to {settings['eager_epochs'] or settings['epochs']}, "
             f"seeds {len(d['seeds'])})")
    out = []
    for i, c in enumerate(configs):
        rs = [r for r in runs if r["config"] == c]
        sp = [r["speedup"] for r in rs if r["speedup"] is not None]
        missed = len(rs) - len(sp)
        tta = spread(sp, "{:.2f}x") + (f", {missed}/{len(rs)} not reached" if missed else "")
        if not sp:
            tta = f"not reached, {missed}/{len(rs)}"
        eq = spread([100 * (r["accuracy_at_equal_epochs"] - acc_ref[r["seed"]]) for r in rs], "{:+.2f}")
        at_time = spread([100 * r["accuracy_at_equal_time"] for r in rs], "{:.2f}")
        per_epoch = spread([per_epoch_ref[r["seed"]] / (r["time_s"] / r["epochs_trained"]) for r in rs],
                           "{:.2f}x")
        mom = spread([r["stats"]["mean_momentum"] for r in rs], "{:.2f}") if "stats" in rs[0] else "-"
        out.append(f"| {label if i == 0 else ''} | {c} | {tta} | {eq} | {at_time} | {per_epoch} | {mom} |")
    return out


def main():
    print("| setup | configuration | time to the reference's accuracy (speedup) | accuracy - "
          "reference, equal epochs (points) | accuracy at equal time (%) | speedup per epoch | "
          "momentum |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for arg in sys.argv[1:]:
        name, _, path = arg.partition("=")
        for line in rows(name, path):
            print(line)


if __name__ == "__main__":
    main()
