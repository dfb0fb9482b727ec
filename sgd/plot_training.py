#!/usr/bin/env python3
"""Draws test accuracy against wall-clock training time, one line per mode, from the CSV that
`eagercomm-train --curve FILE` writes (mode,seed,epoch,step,seconds,accuracy,loss).

With several seeds each mode gets a thick line, the mean over the seeds, and a thin line per seed.
The seeds evaluate at different times, so the mean is taken at every time any of them evaluated,
each seed interpolated linearly between its evaluations and kept at its final accuracy after its
end (a finished run keeps its final model), as eagercomm-train's accuracy_at() does. A CSV
without a seed column (an older eagercomm-train) is one seed.

usage: sgd/plot_training.py CURVE.csv OUT.png [--title TEXT]
Needs Debian's python3-matplotlib.
"""
import argparse
import csv
import sys


def interp(points, t):
    """Accuracy at time t of one seed's (seconds, accuracy) points, ascending in time."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, a0), (t1, a1) in zip(points, points[1:]):
        if t <= t1:
            return a1 if t1 <= t0 else a0 + (t - t0) / (t1 - t0) * (a1 - a0)
    return points[-1][1]


def mean_curve(runs):
    """(times, mean accuracies) over the seeds' runs of one mode."""
    times = sorted({t for points in runs for t, _ in points})
    return times, [sum(interp(p, t) for p in runs) / len(runs) for t in times]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("curve")
    parser.add_argument("png")
    parser.add_argument("--title", default="eager-SGD: test accuracy against training time")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_training.py: matplotlib is missing (apt-get install python3-matplotlib)")
    series = {}  # mode -> seed -> [(seconds, accuracy %)], in the CSV's (the --mode) order
    try:
        with open(args.curve, newline="") as f:
            for row in csv.DictReader(f):
                seed = row.get("seed") or "1"
                series.setdefault(row["mode"], {}).setdefault(seed, []).append(
                    (float(row["seconds"]), 100.0 * float(row["accuracy"])))
    except (OSError, KeyError, ValueError) as e:
        sys.exit(f"plot_training.py: cannot read {args.curve}: {e}")
    if not series:
        sys.exit(f"plot_training.py: {args.curve} holds no rows")
    fig, ax = plt.subplots(figsize=(8, 5))
    for mode, seeds in series.items():
        runs = [sorted(points) for points in seeds.values()]
        xs, ys = mean_curve(runs)
        if len(runs) == 1:
            ax.plot(xs, ys, marker="o", label=mode)
            continue
        (line,) = ax.plot(xs, ys, linewidth=2, label=f"{mode} (mean of {len(runs)} seeds)")
        for points in runs:
            px, py = zip(*points)
            ax.plot(px, py, color=line.get_color(), linewidth=0.8, alpha=0.35, marker=".",
                    markersize=3)
    ax.set_xlabel("training wall-clock time (s)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(args.title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    print(f"plot_training.py: wrote {args.png}")


if __name__ == "__main__":
    main()
