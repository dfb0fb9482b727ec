#!/usr/bin/python3
"""Straggler attribution from an eagercomm-train JSON report: per mode, each rank's share of its
posts that landed after the round they were meant for (bars) and how many rounds late its carried
posts landed on average (dots, right axis), averaged over the seeds.

usage: sgd/plot_lateness.py REPORT.json OUT.png [--title TEXT]

REPORT.json is `eagercomm-train --json FILE`; every run carries "lateness", one entry per rank
(RankLateness: rounds, posts, fresh, late, absent, late_rounds, late_seconds, late_fraction). A rank that is slow at
every step shows as the tall bar in every eager mode; sync rounds wait for everybody, so its
bars are zero. Needs Debian's python3-matplotlib (run with /usr/bin/python3).
"""
import argparse
import json
import sys


def per_mode(report):
    """{mode: [(late fraction of its posts, mean rounds late) per rank]}, averaged over seeds."""
    acc = {}
    for run in report["modes"]:
        rows = acc.setdefault(run["mode"], {})
        for entry in run.get("lateness", []):
            late = entry["late_rounds"] / entry["late"] if entry["late"] else 0.0
            frac = entry["late_fraction"]
            rows.setdefault(entry["rank"], []).append((frac, late))
    out = {}
    for mode, rows in acc.items():
        out[mode] = [tuple(sum(v[i] for v in rows[r]) / len(rows[r]) for i in (0, 1))
                     for r in sorted(rows)]
    return out


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("out")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv[1:])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_lateness.py: matplotlib is missing (apt-get install python3-matplotlib; run "
              "with /usr/bin/python3)", file=sys.stderr)
        return 3
    with open(args.report) as f:
        report = json.load(f)
    modes = per_mode(report)
    if not modes or not any(modes.values()):
        print(f"plot_lateness.py: {args.report} has no per-rank lateness (an eagercomm-train "
              "older than the attribution?)", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(1, len(modes), figsize=(3.2 * len(modes), 3.2), squeeze=False,
                             sharey=True)
    for ax, (mode, ranks) in zip(axes[0], modes.items()):
        xs = list(range(len(ranks)))
        ax.bar(xs, [r[0] for r in ranks], color="tab:red", alpha=0.7)
        ax.set_ylim(0, 1)
        ax.set_title(mode)
        ax.set_xlabel("rank")
        ax.set_xticks(xs)
        twin = ax.twinx()
        twin.plot(xs, [r[1] for r in ranks], "o", color="tab:blue")
        twin.set_ylim(bottom=0)
        twin.tick_params(axis="y", labelcolor="tab:blue")
    axes[0][0].set_ylabel("posts that landed late (share)")
    fig.suptitle(args.title or f"{report.get('model', '?')}: who was late (dots: rounds late)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"plot_lateness.py: wrote {args.out} ({len(modes)} modes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
