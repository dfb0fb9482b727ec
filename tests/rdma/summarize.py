#!/usr/bin/env python3
"""The JSON summary of tests/rdma/run.sh: each step's command, exit status and figures, parsed
from the logs the step left in OUT (NAME.out, NAME.err), and the ratios eagercomm / perftest and
eagercomm / Open MPI per message size.

usage: summarize.py --out DIR --steps STEPS.tsv [--meta KEY=VALUE ...]
STEPS.tsv (written by run.sh): name, host, exit status, seconds, command, server command; tabs.
Writes DIR/summary.json, prints one line per step and per compared size; exits 0 when every
step passed, 1 otherwise.
"""
import argparse
import json
import os
import re
import sys

# perftest -a runs every power of two; these are the sizes the run asked for.
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(.*)$")


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def perftest_rows(text, kind):
    """Rows of an ib_write_lat / ib_write_bw report, after its ' #bytes' header line."""
    rows, unit, in_table = [], None, False
    for line in text.splitlines():
        if line.strip().startswith("#bytes"):
            in_table = True
            if "Gb/sec" in line:
                unit = "Gb/sec"
            elif "MB/sec" in line:
                unit = "MB/sec"
            continue
        m = ROW.match(line) if in_table else None
        if not m:
            continue
        values = [number(v) for v in m.group(3).split()]
        if kind == "lat":
            # t_min t_max t_typical t_avg t_stdev p99 p99.9 (older perftest: the first three)
            names = ["t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us",
                     "p99_us", "p99_9_us"]
        else:
            names = ["bw_peak", "bw_avg", "msg_rate_mpps"]
        row = {"bytes": int(m.group(1)), "iterations": int(m.group(2))}
        row.update({n: v for n, v in zip(names, values)})
        if kind == "bw":
            # perftest's MB is 2^20 bytes, its Gb 10^9 bits; eagercomm reports 10^9 bytes.
            scale = {"Gb/sec": 1e9 / 8, "MB/sec": 1048576.0}.get(unit)
            for key in ("bw_peak", "bw_avg"):
                v = row.pop(key, None)
                row[key + "_gbytes_per_s"] = v * scale / 1e9 if v is not None and scale else None
            row["reported_unit"] = unit
        rows.append(row)
    return rows


def bench_json(text):
    """The JSON document eagercomm-bench --json - printed, amid whatever else went to stdout
    (mpirun's and UCX's lines): the first object that parses from the start of a line."""
    decoder, offset = json.JSONDecoder(), 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("{"):
            try:
                doc, _ = decoder.raw_decode(text, offset + len(line) - len(line.lstrip()))
                if isinstance(doc, dict):
                    return doc
            except json.JSONDecodeError:
                pass
        offset += len(line)
    return None


def gtest_counts(text):
    counts = {}
    for key, pattern in (("ran", r"^\[==========\] (\d+) tests? from .* ran"),
                         ("passed", r"^\[  PASSED  \] (\d+) tests?"),
                         ("failed", r"^\[  FAILED  \] (\d+) tests?, listed below"),
                         ("skipped", r"^\[  SKIPPED \] (\d+) tests?, listed below")):
        m = re.search(pattern, text, re.M)
        counts[key] = int(m.group(1)) if m else 0
    counts["failed_tests"] = re.findall(r"^\[  FAILED  \] (\S+)(?: \(\d+ ms\))?$", text, re.M)
    return counts


def ratio(a, b):
    return round(a / b, 4) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b \
        else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", required=True)
    ap.add_argument("--meta", nargs="*", default=[])
    args = ap.parse_args()
    meta = {}
    for kv in args.meta:
        key, sep, value = kv.partition("=")
        if not sep:
            sys.exit(f"summarize.py: --meta '{kv}' is not KEY=VALUE")
        meta[key] = int(value) if re.fullmatch(r"\d+", value) else (value or None)
    lo, hi = meta.get("min_bytes") or 0, meta.get("max_bytes") or float("inf")
    in_range = lambda rows: [r for r in rows if lo <= r["bytes"] <= hi]

    steps, by_name = [], {}
    with open(args.steps) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 5:
                continue
            name, host, rc, seconds, command = fields[:5]
            server = fields[5] if len(fields) > 5 and fields[5] else None
            out = read(os.path.join(args.out, name + ".out"))
            err = read(os.path.join(args.out, name + ".err")) or ""
            step = {"name": name, "host": host, "command": command, "exit_status": int(rc),
                    "seconds": float(seconds), "log": name + ".out"}
            if server:
                step["server_command"] = server
            problem = None if int(rc) == 0 else f"exit status {rc}"
            figures = None
            if out is None:
                problem = problem or "no output file"
            elif name.startswith("perftest_write_"):
                kind = "lat" if name.endswith("lat") else "bw"
                rows = in_range(perftest_rows(out, kind))
                figures = {"rows": rows}
                if not rows and not problem:
                    problem = "no result rows for the sizes asked for in the perftest output"
            elif name in ("eagercomm_p2p", "allreduce_vs_mpi"):
                doc = bench_json(out)
                if doc is None:
                    problem = problem or "no JSON document from eagercomm-bench on stdout"
                else:
                    figures = doc
                    if doc.get("transport") != "verbs" and not problem:
                        problem = f"eagercomm ran over '{doc.get('transport')}', not verbs"
            elif name.startswith("contract_"):
                figures = gtest_counts(out)
                if figures["ran"] == 0 and not problem:
                    problem = "no test matched --gtest_filter=*verbs* (0 tests ran)"
            elif name.startswith("info_"):
                figures = {"lines": [l for l in out.splitlines() if l.strip()][:60]}
            if problem:
                step["problem"] = problem
                step["stderr_tail"] = err[-2000:]
            step["passed"] = problem is None
            step["figures"] = figures
            steps.append(step)
            by_name[name] = step

    def rows_of(name):
        s = by_name.get(name)
        return {r["bytes"]: r for r in ((s or {}).get("figures") or {}).get("rows", [])}

    lat, bw, p2p = rows_of("perftest_write_lat"), rows_of("perftest_write_bw"), \
        rows_of("eagercomm_p2p")
    p2p_cmp = []
    for size in sorted(set(p2p) | set(lat) | set(bw)):
        e, l, b = p2p.get(size, {}), lat.get(size, {}), bw.get(size, {})
        p2p_cmp.append({
            "bytes": size,
            "eagercomm_latency_us": e.get("latency_us"),
            "perftest_latency_us": l.get("t_typical_us"),
            "latency_ratio": ratio(e.get("latency_us"), l.get("t_typical_us")),
            "eagercomm_latency_mean_us": e.get("latency_mean_us"),
            "perftest_latency_mean_us": l.get("t_avg_us"),
            "latency_mean_ratio": ratio(e.get("latency_mean_us"), l.get("t_avg_us")),
            "eagercomm_bandwidth_gbytes_per_s": e.get("bandwidth_gbps"),
            "perftest_bandwidth_gbytes_per_s": b.get("bw_avg_gbytes_per_s"),
            "bandwidth_ratio": ratio(e.get("bandwidth_gbps"), b.get("bw_avg_gbytes_per_s")),
        })
    mpi_cmp = []
    for r in rows_of("allreduce_vs_mpi").values():
        ec, mpi = r.get("eagercomm", {}), r.get("mpi", {})
        mpi_cmp.append({"bytes": r["bytes"], "eagercomm_us": ec.get("time_us"),
                        "mpi_us": mpi.get("time_us"),
                        "ratio": ratio(ec.get("time_us"), mpi.get("time_us")),
                        "wrong": (ec.get("wrong") or 0) + (mpi.get("wrong") or 0)})
    mpi_cmp.sort(key=lambda r: r["bytes"])

    summary = {
        "tool": "tests/rdma/run.sh",
        **meta,
        "passed": bool(steps) and all(s["passed"] for s in steps),
        "ratios": "eagercomm / reference: latency and time > 1 means eagercomm is slower, "
                  "bandwidth < 1 means eagercomm moves less",
        "steps": steps,
        "p2p_vs_perftest": p2p_cmp,
        "allreduce_vs_mpi": mpi_cmp,
    }
    path = os.path.join(args.out, "summary.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    for s in steps:
        print(f"rdma/run.sh: {s['name']:20} {'ok' if s['passed'] else 'FAILED: ' + s['problem']}"
              f" ({s['seconds']:.1f} s)")
    for r in p2p_cmp:
        print(f"rdma/run.sh: p2p {r['bytes']:>9} B  latency x{r['latency_ratio']}  "
              f"bandwidth x{r['bandwidth_ratio']}  (eagercomm / perftest)")
    for r in mpi_cmp:
        print(f"rdma/run.sh: allreduce {r['bytes']:>9} B  x{r['ratio']}  (eagercomm / Open MPI)")
    print(f"rdma/run.sh: wrote {path}: {'PASSED' if summary['passed'] else 'FAILED'}")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
