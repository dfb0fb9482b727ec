#!/usr/bin/env bash
# Cross-validation of the simulation (issue 21, item 4): the same partial-allreduce runs on this
# machine's shm transport (eagercomm-bench --imbalance, processes) and in eagercomm-sim with
# this machine's measured link, and their ratios compared.
#
#   sim/cross_validate.sh BUILD [--ranks "2 4 8"] [--bytes 8K] [--compute-ms 2] [--delay-ms 4]
#                         [--iters 40] [--tolerance 0.2] [--json FILE]
#
# The link: a 2-rank ping-pong and a windowed stream on shm (eagercomm-bench --p2p) give the
# one-way latency of 8 bytes, the 8-byte message rate and the bandwidth of the largest size; in
# LogGP terms o = g = 1 / message rate (on shm the sender's CPU is what limits the rate),
# L = latency - 2 o (at least 0), bw = that bandwidth.
# The runs: every rank computes --compute-ms per step, one rank drawn per step computes
# --delay-ms more (bench: --pattern random --delayed 1; sim: --stragglers 1), solo and sync
# rounds, --iters steps, result depth 16 in both.
# The ratios, per P: solo's fast ranks' mean step over sync's (what solo saves), and solo's fast
# over slow steps (what the straggler costs itself). Exit status 1 if any pair differs by more
# than --tolerance (relative), 2 on a bad argument or a failed run.
set -euo pipefail

build=${1:?usage: sim/cross_validate.sh BUILD [options]}
shift
ranks="2 4 8"
bytes=8K
compute_ms=2
delay_ms=4
iters=40
tolerance=0.2
json=
while (($#)); do
  case $1 in
    --ranks) ranks=$2 ;;
    --bytes) bytes=$2 ;;
    --compute-ms) compute_ms=$2 ;;
    --delay-ms) delay_ms=$2 ;;
    --iters) iters=$2 ;;
    --tolerance) tolerance=$2 ;;
    --json) json=$2 ;;
    *)
      echo "cross_validate: unknown option $1" >&2
      exit 2
      ;;
  esac
  shift 2
done
run=$build/tools/eagercomm-run
bench=$build/bench/eagercomm-bench
sim=$build/sim/eagercomm-sim
for tool in "$run" "$bench" "$sim"; do
  [[ -x $tool ]] || {
    echo "cross_validate: $tool is not built" >&2
    exit 2
  }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The link, measured.
"$run" -n 2 --transport shm "$bench" --p2p -b 8 -e 1M -f 8 --json "$tmp/p2p.json" >"$tmp/p2p.txt" 2>&1 || {
  echo "cross_validate: eagercomm-bench --p2p failed: $(cat "$tmp/p2p.txt")" >&2
  exit 2
}
link=$(python3 - "$tmp/p2p.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
small, large = rows[0], rows[-1]
g = small["bytes"] / small["bandwidth_gbps"]          # ns per message
L = max(small["latency_us"] * 1000 - 2 * g, 0.0)
print(f"L={L:.0f},o={g:.0f},g={g:.0f},bw={large['bandwidth_gbps']:.2f}")
PY
)
echo "# cross-validation: shm on this machine against eagercomm-sim --link $link"
echo "# compute ${compute_ms} ms per step, one rank drawn per step ${delay_ms} ms more, $bytes, $iters steps"

delay_steps=$(python3 -c "print($delay_ms / $compute_ms)")
compute_us=$(python3 -c "print($compute_ms * 1000)")
for P in $ranks; do
  "$run" -n "$P" --transport shm "$bench" --imbalance -b "$bytes" -e "$bytes" \
    --delay-ms "$delay_ms" --compute-ms "$compute_ms" --pattern random --delayed 1 \
    --modes full,sync,solo -n "$iters" -w 5 --result-depth 16 --json "$tmp/shm$P.json" \
    >"$tmp/shm$P.txt" 2>&1 || {
    echo "cross_validate: shm run at P = $P failed: $(tail -5 "$tmp/shm$P.txt")" >&2
    exit 2
  }
  "$sim" --modes sync,solo --ranks "$P" --bytes "$bytes" --stragglers 1 \
    --compute-us "$compute_us" --delay-steps "$delay_steps" --steps "$iters" --result-depth 16 \
    --link "$link" --json "$tmp/sim$P.json" >"$tmp/sim$P.txt" 2>&1 || {
    echo "cross_validate: eagercomm-sim at P = $P failed: $(tail -5 "$tmp/sim$P.txt")" >&2
    exit 2
  }
done

python3 - "$tmp" "$tolerance" "$link" "$json" $ranks <<'PY'
import json, sys
tmp, tol, link, out = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
rows, worst = [], 0.0
print(f"# {'P':>3} {'ratio':>24} {'shm':>7} {'sim':>7} {'sim/shm':>8}")
for P in map(int, sys.argv[5:]):
    shm = {r["mode"]: r for r in json.load(open(f"{tmp}/shm{P}.json"))["rows"]}
    sim = {r["mode"]: r for r in json.load(open(f"{tmp}/sim{P}.json"))}
    pairs = {
        "solo fast / sync fast": (shm["solo"]["fast_mean_ms"] / shm["sync"]["fast_mean_ms"],
                                  sim["solo"]["fast_step_us"] / sim["sync"]["fast_step_us"]),
        "solo fast / solo slow": (shm["solo"]["fast_mean_ms"] / shm["solo"]["slow_mean_ms"],
                                  sim["solo"]["fast_step_us"] / sim["solo"]["slow_step_us"]),
    }
    for name, (a, b) in pairs.items():
        off = b / a - 1
        worst = max(worst, abs(off))
        print(f"  {P:>3} {name:>24} {a:7.3f} {b:7.3f} {b / a:8.3f}")
        rows.append({"ranks": P, "ratio": name, "shm": a, "sim": b})
    print(f"  {P:>3} {'(full allreduce, ms)':>24} {shm['full']['fast_mean_ms']:7.3f}")
print(f"# largest difference {worst:.3f} (tolerance {tol})")
if out:
    json.dump({"link": link, "tolerance": tol, "rows": rows}, open(out, "w"), indent=1)
sys.exit(1 if worst > tol else 0)
PY
