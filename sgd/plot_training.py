#!/usr/bin/env python3
"""Draws test accuracy against wall-clock training time, one line per mode, from the CSV that
`eagercomm-train --curve FILE` writes (mode,epoch,seconds,accuracy,loss).

usage: sgd/plot_training.py CURVE.csv OUT.png [--title TEXT]
Needs Debian's python3-matplotlib.
"""
import argparse
import csv
import sys


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
    series = {}
    try:
        with open(args.curve, newline="") as f:
            for row in csv.DictReader(f):
                series.setdefault(row["mode"], []).append(
                    (float(row["seconds"]), 100.0 * float(row["accuracy"])))
    except (OSError, KeyError, ValueError) as e:
        sys.exit(f"plot_training.py: cannot read {args.curve}: {e}")
    if not series:
        sys.exit(f"plot_training.py: {args.curve} holds no rows")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, points in series.items():
        xs, ys = zip(*sorted(points))
        ax.plot(xs, ys, marker="o", label=mode)
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
