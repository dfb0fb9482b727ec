#!/usr/bin/python3
"""Time per iteration against injected delay, one line per mode, from eagercomm-bench JSON.

usage: bench/plot_imbalance.py OUT.png RESULT.json [RESULT.json ...]

Each JSON comes from `eagercomm-bench --imbalance --json FILE` (a --delay-ms list gives several
delays in one file). The plot shows the median time per iteration on the ranks that were not
delayed (solid) and, for the full allreduce, on the delayed ones (dashed), per message size.
Needs Debian's python3-matplotlib (run with /usr/bin/python3).
"""
import json
import sys


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_imbalance.py: matplotlib is missing (apt-get install python3-matplotlib; "
              "run with /usr/bin/python3)", file=sys.stderr)
        return 3
    rows, meta = [], None
    for path in argv[2:]:
        with open(path) as f:
            doc = json.load(f)
        meta = meta or doc
        rows.extend(doc["rows"])
    if not rows:
        print("plot_imbalance.py: no rows in the input", file=sys.stderr)
        return 1
    sizes = sorted({r["bytes"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.5), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        modes = []
        for r in rows:
            if r["bytes"] == size and r["mode"] not in modes:
                modes.append(r["mode"])
        for mode in modes:
            pts = sorted((r["delay_ms"], r["fast_median_ms"]) for r in rows
                         if r["bytes"] == size and r["mode"] == mode
                         and r["fast_median_ms"] is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode)
        ax.set_title("%d ranks, %s, %d B, pattern %s" % (meta["ranks"], meta["type"], size,
                                                         meta["pattern"]))
        ax.set_xlabel("injected delay (ms)")
        ax.set_ylabel("median time per iteration, ranks not delayed (ms)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(argv[1], dpi=110)
    print("wrote %s" % argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
