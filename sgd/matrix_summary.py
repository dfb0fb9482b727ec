#!/usr/bin/env python3
"""Markdown table of eagercomm-train JSON reports (sgd/matrix.sh): per setup and mode, over the
seeds, mean [min, max] of the speedup in time to the seed's sync accuracy, the accuracy
difference to sync at equal epochs, the accuracy at equal time, and the speedup per epoch.

    sgd/matrix_summary.py REPORT.json ...
"""

import json
import os
import statistics
import sys


def spread(values, fmt):
    vals = [v for v in values if v is not None]
    missing = len(values) - len(vals)
    if not vals:
        return f"not reached ({missing}/{len(values)})" if missing else "-"
    text = fmt.format(statistics.mean(vals))
    if len(vals) > 1:
        text += " [" + fmt.format(min(vals)) + ", " + fmt.format(max(vals)) + "]"
    if missing:
        text += f", {missing}/{len(values)} not reached"
    return text


def describe(report):
    if report.get("imbalance_linear"):
        imbalance = f"rank r x {report['imbalance_ms']:g} ms"
    elif report.get("imbalance_ranks", 0) > 0:
        imbalance = f"{report['imbalance_ranks']} of {report['ranks']} x {report['imbalance_ms']:g} ms"
    else:
        imbalance = "none"
    average = report.get("average_decay", 0)
    return (f"{report['model']}, imbalance {imbalance}, staleness {report.get('staleness', '?')}, "
            + (f"parameters averaged ({average:g}), " if average else "")
            + f"{report['epochs']} epochs (eager up to {report.get('eager_epochs', report['epochs'])})")


def main(paths):
    print("| setup | mode | time to sync's accuracy (speedup) | accuracy - sync, equal epochs "
          "(points) | accuracy at equal time (%) | speedup per epoch | momentum |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        runs = report["modes"]
        sync = {r["seed"]: r for r in runs if r["mode"] == "sync"}
        name = os.path.splitext(os.path.basename(path))[0]
        seen = []
        for r in runs:
            if r["mode"] not in seen:
                seen.append(r["mode"])
        for i, mode in enumerate(seen):
            mine = [r for r in runs if r["mode"] == mode]
            delta = [100 * (r["accuracy"] - sync[r["seed"]]["accuracy"]) if r["seed"] in sync
                     else None for r in mine]
            setup = f"{name} ({describe(report)}, seeds {len(mine)})" if i == 0 else ""
            print(f"| {setup} | {mode} | {spread([r['tta_speedup'] for r in mine], '{:.2f}x')} | "
                  f"{spread(delta, '{:+.2f}')} | "
                  f"{spread([100 * r['accuracy_at_equal_time'] for r in mine], '{:.2f}')} | "
                  f"{spread([r['epoch_speedup'] for r in mine], '{:.2f}x')} | "
                  f"{spread([r['mean_momentum'] for r in mine], '{:.2f}')} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
