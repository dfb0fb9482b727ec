#!/usr/bin/python3
"""Plots of eagercomm-sim's JSON.

usage: sim/plot_sim.py OUT.png RESULT.json [RESULT.json ...]

Collective rows (eagercomm-sim --json): the first call's time against the number of ranks, one
line per size, with the LogGP closed form dashed. Partial rows (eagercomm-sim --modes ... --json):
the fast ranks' step time with stragglers over the time without, against the number of ranks,
one line per mode and result depth. Both kinds in the files: two panels.
Needs Debian's python3-matplotlib (run with /usr/bin/python3).
"""
import json
import sys
from collections import defaultdict


def finish(ax, ylabel):
    """Both panels: ranks on a log2 axis, the value on a log axis, legend, grid."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_sim.py: matplotlib is missing (apt-get install python3-matplotlib; "
              "run with /usr/bin/python3)", file=sys.stderr)
        return 3
    rows = []
    for path in argv[2:]:
        with open(path) as f:
            rows.extend(json.load(f))
    coll = [r for r in rows if "first_us" in r]
    part = [r for r in rows if "fast_step_us" in r]
    if not coll and not part:
        print("plot_sim.py: no eagercomm-sim rows in " + ", ".join(argv[2:]), file=sys.stderr)
        return 1
    panels = (1 if coll else 0) + (1 if part else 0)
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
    ax_iter = iter(axes[0])
    if coll:
        ax = next(ax_iter)
        lines = defaultdict(list)
        for r in coll:
            lines[(r["collective"], r["bytes"])].append(r)
        for (name, size), rs in sorted(lines.items()):
            rs.sort(key=lambda r: r["ranks"])
            x = [r["ranks"] for r in rs]
            line, = ax.plot(x, [r["first_us"] for r in rs], marker="o",
                            label=f"{name} {size} B")
            if any(r["model_us"] > 0 for r in rs):
                ax.plot(x, [r["model_us"] for r in rs], linestyle="--", color=line.get_color())
        finish(ax, "virtual time of one call (us); dashed: LogGP closed form")
    if part:
        ax = next(ax_iter)
        lines = defaultdict(list)
        for r in part:
            lines[(r["mode"], r.get("result_depth", 0))].append(r)
        for (mode, depth), rs in sorted(lines.items()):
            rs.sort(key=lambda r: r["ranks"])
            ax.plot([r["ranks"] for r in rs], [r["ratio"] for r in rs], marker="o",
                    label=f"{mode}, result depth {depth}" if depth else mode)
        ax.axhline(1.1, color="grey", linestyle=":", label="1.1x")
        finish(ax, "fast ranks' step time, stragglers / none")
    fig.tight_layout()
    fig.savefig(argv[1], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
