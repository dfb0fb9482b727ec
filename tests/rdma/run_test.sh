#!/usr/bin/env bash
# tests/rdma/run.sh without hardware: --dry-run prints the commands it would run with the flags
# asked for, bad arguments are refused naming what is wrong, and summarize.py turns recorded
# perftest / eagercomm-bench / gtest output into the summary's figures and ratios.
# usage: tests/rdma/run_test.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
run=$here/run.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$run" --help >"$tmp/help" || fail "--help exited $?"
grep -q "usage: tests/rdma/run.sh" "$tmp/help" || fail "--help prints no usage"

# ---- the commands of a dry run ----
"$run" --dry-run -d mlx5_1 -i 2 -x 3 -s 16:1M -n 500 -w 32 -b /opt/ec/build -o "$tmp/res" \
  nodeA nodeB >"$tmp/dry" 2>"$tmp/dry.err" || fail "--dry-run exited $?: $(cat "$tmp/dry.err")"
cat "$tmp/dry"
line() {  # the dry run's line for a step (and role), or a failure naming it
  grep -F "[$1]${2:+ $2}" "$tmp/dry" || fail "the dry run has no line for $1 $2"
}
has() {  # has STEP ROLE FRAGMENT...: that line contains every fragment
  local l f
  l=$(line "$1" "$2")
  for f in "${@:3}"; do
    [[ $l == *"$f"* ]] || fail "$1 $2: '$f' missing in: $l"
  done
}
lacks() {
  local l f
  l=$(line "$1" "$2")
  for f in "${@:3}"; do
    [[ $l != *"$f"* ]] || fail "$1 $2: '$f' should not be in: $l"
  done
}
grep -q "would write $tmp/res/summary.json" "$tmp/dry" || fail "the dry run names no summary path"
for tool in lat bw; do
  has perftest_write_$tool "server on A:" "ssh -o BatchMode=yes nodeA --" "ib_write_$tool -a" \
    "-n 500" "-d mlx5_1" "-i 2" "-x 3" "-p 18515" "timeout 600"
  has perftest_write_$tool "client on B:" "ssh -o BatchMode=yes nodeB --" "-d mlx5_1" "-x 3" \
    " nodeA'"
  lacks perftest_write_$tool "server on A:" " nodeA'"
done
has perftest_write_bw "client on B:" "-t 32" "--report_gbits"
has eagercomm_p2p "" "mpirun -np 2 -H nodeA:1" "nodeB:1" "EAGERCOMM_TRANSPORT=verbs" \
  "EAGERCOMM_VERBS_EMULATE=0" "EAGERCOMM_IB_HCA=mlx5_1" "EAGERCOMM_IB_PORT=2" \
  "EAGERCOMM_IB_GID_INDEX=3" "EAGERCOMM_MASTER_ADDR=nodeA" \
  "/opt/ec/build/bench/eagercomm-bench --p2p -b 16 -e 1048576 -f 2 -n 500" "--window 32" "--json -"
has allreduce_vs_mpi "" "--mca pml ucx" "UCX_NET_DEVICES=mlx5_1:2" "UCX_IB_GID_INDEX=3" \
  "EAGERCOMM_TRANSPORT=verbs" "eagercomm-bench --compare mpi -b 16 -e 1048576 -f 2 -n 500" "-I 0"
for h in a b; do
  has contract_$h "" "env -u EAGERCOMM_VERBS_EMULATE" "EAGERCOMM_IB_HCA=mlx5_1" \
    "/opt/ec/build/tests/transport_contract_test" "--gtest_filter=\\*verbs\\*"
  has info_$h "" "/opt/ec/build/tools/eagercomm-info -t"
done
grep -q "nodeA --" <(line contract_a) && grep -q "nodeB --" <(line contract_b) ||
  fail "the contract suite does not run on each host"
# Without device flags every tool picks its own: no empty -d, no empty variables.
"$run" --dry-run --steps perftest,allreduce h1 h2 >"$tmp/dry2" || fail "minimal dry run failed"
grep -q "\[eagercomm_p2p\]\|\[contract_a\]" "$tmp/dry2" && fail "--steps did not leave steps out"
grep -E "ib_write_(lat|bw) .*( -d | -x )" "$tmp/dry2" && fail "perftest gets -d or -x not asked for"
grep -E "EAGERCOMM_IB_HCA|UCX_NET_DEVICES|GID_INDEX" "$tmp/dry2" &&
  fail "eagercomm or UCX gets a device or GID not asked for"
grep -q "ib_write_lat -a -n 1000" "$tmp/dry2" && grep -q -- "-b 8 -e 4194304" "$tmp/dry2" ||
  fail "defaults (1000 iterations, 8..4M) not used: $(cat "$tmp/dry2")"
[[ ! -e $tmp/res ]] || fail "the dry run created its output directory"

# ---- bad arguments: exit 2, the message names the problem ----
bad() {  # bad FRAGMENT ARGS...
  local want=$1 rc=0
  shift
  "$run" --dry-run "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  ((rc == 2)) || fail "run.sh $* exited $rc, expected 2"
  grep -qF -- "$want" "$tmp/err" || fail "run.sh $*: error does not say '$want': $(cat "$tmp/err")"
  [[ ! -s $tmp/out ]] || fail "run.sh $*: printed commands despite the error"
}
bad "expected two hosts" nodeA
bad "expected two hosts" nodeA nodeB nodeC
bad "both 'nodeA'" nodeA nodeA
bad "is not a host name" "node A" nodeB
bad "--port: 'x' is not an integer in [1, 255]" -i x nodeA nodeB
bad "--port: '0' is not an integer" -i 0 nodeA nodeB
bad "--gid-index: '256' is not an integer in [0, 255]" -x 256 nodeA nodeB
bad "--iters: '1' is not an integer" -n 1 nodeA nodeB
bad "--window: '0'" -w 0 nodeA nodeB
bad "must be a power of two from 2 to 8M" -s 8:3000 nodeA nodeB
bad "must be a power of two from 2 to 8M" -s 8:16M nodeA nodeB
bad "--sizes (MIN): 'x' is not a size" -s x:8 nodeA nodeB
bad "is not MIN:MAX" -s 64 nodeA nodeB
bad "MIN (1024) is larger than MAX (64)" -s 1K:64 nodeA nodeB
bad "--steps: 'gpu' is not one of" --steps perftest,gpu nodeA nodeB
bad "--device: 'mlx5 0' is not a device name" -d "mlx5 0" nodeA nodeB
bad "-d: missing value" nodeA nodeB -d
bad "unknown option '--bogus'" --bogus nodeA nodeB

# ---- a whole run against stand-ins for ssh, mpirun, perftest and the build ----
# ssh runs the command here (as the host's shell would); perftest's server starts listening only
# after a while, so the client's first attempt fails and must be retried.
bin=$tmp/bin fake=$tmp/fakebuild
mkdir -p "$bin" "$fake/bench" "$fake/tools" "$fake/tests"
cat >"$bin/ssh" <<EOF
#!/usr/bin/env bash
echo "\$1" >>"$tmp/ssh-hosts"
shift
[[ \$1 == -- ]] && shift
exec bash -c "\$*"
EOF
cat >"$bin/perftest" <<EOF
#!/usr/bin/env bash
# ib_write_lat and ib_write_bw: the server has no host argument, the client names A last.
tool=\$(basename "\$0")
if [[ \${@: -1} != nodeA ]]; then
  sleep 1.5
  touch "$tmp/\$tool.listening"
  for _ in \$(seq 100); do [[ -e $tmp/\$tool.done ]] && break; sleep 0.1; done
  echo " server of \$tool"
  exit 0
fi
[[ -e $tmp/\$tool.listening ]] || { echo "Couldn't connect to nodeA:18515" >&2; exit 1; }
touch "$tmp/\$tool.done"
if [[ \$tool == ib_write_lat ]]; then
  echo " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
  for s in 8 16; do echo " \$s       1000          1.00           2.00         2.00     	       2.00"; done
else
  echo " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
  for s in 8 16; do echo " \$s         1000             9.00               8.00   		   1.0"; done
fi
EOF
ln -s perftest "$bin/ib_write_lat"
ln -s perftest "$bin/ib_write_bw"
cat >"$bin/mpirun" <<EOF
#!/usr/bin/env bash
echo "\$*" >>"$tmp/mpirun-args"
[[ " \$* " == *" EAGERCOMM_TRANSPORT=verbs "* ]] || { echo "mpirun: not over verbs" >&2; exit 1; }
if [[ " \$* " == *" --p2p "* ]]; then
  echo '{"transport": "verbs", "rows": ['
  echo '  {"bytes": 8, "latency_us": 3.0, "latency_mean_us": 3.0, "bandwidth_gbps": 0.5},'
  echo '  {"bytes": 16, "latency_us": 3.0, "latency_mean_us": 3.0, "bandwidth_gbps": 0.5}]'
  echo '}'
else
  echo '{"transport": "verbs", "libraries": ["eagercomm", "mpi"], "rows": ['
  echo '  {"bytes": 8, "eagercomm": {"time_us": 4.0, "wrong": 0}, "mpi": {"time_us": 5.0, "wrong": 0}}]'
  echo '}'
fi
EOF
for f in bench/eagercomm-bench tools/eagercomm-info; do printf '#!/bin/sh\necho "%s"\n' "$f" >"$fake/$f"; done
cat >"$fake/tests/transport_contract_test" <<'EOF'
#!/bin/sh
# The real device's suite: an inherited EAGERCOMM_VERBS_EMULATE would make it the emulated one.
[ -z "${EAGERCOMM_VERBS_EMULATE+set}" ] || { echo "EAGERCOMM_VERBS_EMULATE is set" >&2; exit 1; }
[ "$1" = "--gtest_filter=*verbs*" ] || { echo "wrong filter: $1" >&2; exit 1; }
echo "[==========] 2 tests from 1 test suite ran. (5 ms total)"
echo "[  PASSED  ] 2 tests."
EOF
chmod +x "$bin"/* "$fake"/*/*
rc=0
EAGERCOMM_VERBS_EMULATE=1 PATH=$bin:$PATH SSH=$bin/ssh MPIRUN=$bin/mpirun \
  "$run" -s 8:16 -b "$fake" -o "$tmp/whole" nodeA nodeB >"$tmp/whole.out" 2>&1 || rc=$?
cat "$tmp/whole.out"
((rc == 0)) || fail "the stand-in run exited $rc"
grep -q "client attempt 1 exited 1; the server still waits: retrying" "$tmp/whole.out" ||
  fail "the perftest client was not retried while the server was not yet listening"
python3 - "$tmp/whole/summary.json" <<'PY' || fail "the stand-in run's summary is wrong"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["passed"] is True, [(s["name"], s.get("problem")) for s in d["steps"]]
names = [s["name"] for s in d["steps"]]
assert names == ["info_a", "info_b", "perftest_write_lat", "perftest_write_bw", "eagercomm_p2p",
                 "allreduce_vs_mpi", "contract_a", "contract_b"], names
lat = next(s for s in d["steps"] if s["name"] == "perftest_write_lat")
assert "perftest-server-pid" in lat["server_command"] and lat["host"] == "nodeB", lat
p = {r["bytes"]: r for r in d["p2p_vs_perftest"]}
assert p[8]["latency_ratio"] == 1.5 and p[16]["bandwidth_ratio"] == 0.5, p
assert d["allreduce_vs_mpi"][0]["ratio"] == 0.8, d["allreduce_vs_mpi"]
assert d["max_bytes"] == 16 and d["host_b"] == "nodeB", d
PY
grep -qx nodeA "$tmp/ssh-hosts" && grep -qx nodeB "$tmp/ssh-hosts" || fail "ssh did not reach both hosts"
# A host without the build: refused before any step, naming the host and the program.
rc=0
PATH=$bin:$PATH SSH=$bin/ssh MPIRUN=$bin/mpirun "$run" -b "$tmp/nobuild" -o "$tmp/nob" nodeA nodeB \
  >"$tmp/nob.out" 2>&1 || rc=$?
((rc == 2)) && grep -q "missing on nodeA: $tmp/nobuild/tools/eagercomm-info" "$tmp/nob.out" ||
  fail "a missing build was not named (exit $rc): $(cat "$tmp/nob.out")"
grep -q -- "-H nodeA:1,nodeB:1" "$tmp/mpirun-args" || fail "mpirun not given both hosts"

# ---- the summary, from recorded output ----
res=$tmp/rec
mkdir -p "$res"
cat >"$res/perftest_write_lat.out" <<'EOF'
---------------------------------------------------------------------------------------
                    RDMA_Write Latency Test
 Dual-port       : OFF		Device         : mlx5_1
 Number of qps   : 1		Transport type : IB
 Mtu             : 4096[B]
 local address: LID 0x02 QPN 0x0128 PSN 0x5a7e1b RKey 0x1fddbd VAddr 0x0055d5e2a4f000
 remote address: LID 0x01 QPN 0x0126 PSN 0x1e6a4f RKey 0x1fdcbc VAddr 0x005590c5bd9000
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       500          0.95           3.80         1.00     	       1.01        	0.04   		1.08    		3.80   
 16      500          0.96           3.10         1.02     	       1.03        	0.03   		1.10    		3.10   
 32      500          0.97           3.00         1.05     	       1.06        	0.03   		1.12    		3.00   
---------------------------------------------------------------------------------------
EOF
cat >"$res/perftest_write_bw.out" <<'EOF'
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 TX depth        : 32
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 16         500              1.10               1.00   		   7.812500
 32         500              2.20               2.00   		   7.812500
---------------------------------------------------------------------------------------
EOF
cat >"$res/eagercomm_p2p.out" <<'EOF'
{
  "benchmark": "eagercomm-bench --p2p",
  "transport": "verbs",
  "ranks": 2,
  "iters": 500,
  "window": 32,
  "consume": false,
  "rows": [
    {"bytes": 16, "latency_us": 1.53, "latency_mean_us": 1.545, "latency_p99_us": 2.1, "bandwidth_gbps": 0.1},
    {"bytes": 32, "latency_us": 2.1, "latency_mean_us": 2.12, "latency_p99_us": 2.5, "bandwidth_gbps": 0.2}
  ]
}
EOF
echo "[1,0]<stderr>: a warning that went to stdout" >"$res/allreduce_vs_mpi.out"
cat >>"$res/allreduce_vs_mpi.out" <<'EOF'
{
  "benchmark": "eagercomm-bench --compare",
  "ranks": 2,
  "transport": "verbs",
  "type": "f32",
  "device": "host",
  "iters": 500,
  "libraries": ["eagercomm", "mpi"],
  "rows": [
    {"bytes": 16, "count": 4, "eagercomm": {"time_us": 3.000, "p99_us": 4.0, "wrong": 0}, "mpi": {"time_us": 2.000, "p99_us": 3.0, "wrong": 0, "ratio": 1.5000}},
    {"bytes": 32, "count": 8, "eagercomm": {"time_us": 3.000, "p99_us": 4.0, "wrong": 0}, "mpi": {"time_us": 4.000, "p99_us": 5.0, "wrong": 0, "ratio": 0.7500}}
  ]
}
EOF
cat >"$res/contract_a.out" <<'EOF'
[==========] 3 tests from 1 test suite ran. (120 ms total)
[  PASSED  ] 3 tests.
EOF
cat >"$res/contract_b.out" <<'EOF'
Note: Google Test filter = *verbs*
[==========] 0 tests from 0 test suites ran. (0 ms total)
[  PASSED  ] 0 tests.
EOF
printf 'RDMA devices: mlx5_1 port 2 ACTIVE\n' >"$res/info_a.out"
for name in info_a perftest_write_lat perftest_write_bw eagercomm_p2p allreduce_vs_mpi contract_a \
    contract_b; do
  printf '%s\tnodeB\t0\t1.5\tcmd of %s\t\n' "$name" "$name" >>"$res/steps.tsv"
  touch "$res/$name.err"
done
rc=0
python3 "$here/summarize.py" --out "$res" --steps "$res/steps.tsv" \
  --meta host_a=nodeA host_b=nodeB min_bytes=16 max_bytes=32 device=mlx5_1 gid_index= \
  >"$tmp/sum.out" || rc=$?
cat "$tmp/sum.out"
((rc == 1)) || fail "summarize.py exited $rc; expected 1 (contract_b ran no test)"
python3 - "$res/summary.json" <<'PY' || fail "summary.json is not what the recorded output says"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["host_a"] == "nodeA" and d["min_bytes"] == 16 and d["gid_index"] is None, d
assert d["passed"] is False, d["passed"]
steps = {s["name"]: s for s in d["steps"]}
assert steps["contract_a"]["passed"] and steps["contract_a"]["figures"]["passed"] == 3, steps
assert not steps["contract_b"]["passed"] and "0 tests ran" in steps["contract_b"]["problem"]
lat = steps["perftest_write_lat"]["figures"]["rows"]
assert [r["bytes"] for r in lat] == [16, 32], lat  # 2 B is outside the sizes asked for
assert lat[0]["t_typical_us"] == 1.02 and lat[0]["t_avg_us"] == 1.03 and lat[0]["p99_9_us"] == 3.1
bw = steps["perftest_write_bw"]["figures"]["rows"]
assert abs(bw[0]["bw_avg_gbytes_per_s"] - 0.125) < 1e-9, bw  # 1 Gb/s = 0.125 GB/s
assert steps["allreduce_vs_mpi"]["passed"], steps["allreduce_vs_mpi"]
assert steps["perftest_write_lat"]["command"] == "cmd of perftest_write_lat"
p = {r["bytes"]: r for r in d["p2p_vs_perftest"]}
assert p[16]["latency_ratio"] == 1.5 and p[16]["latency_mean_ratio"] == 1.5, p[16]
assert p[16]["bandwidth_ratio"] == 0.8 and p[32]["bandwidth_ratio"] == 0.8, p
assert p[32]["latency_ratio"] == 2.0, p[32]
m = {r["bytes"]: r for r in d["allreduce_vs_mpi"]}
assert m[16]["ratio"] == 1.5 and m[32]["ratio"] == 0.75 and m[32]["wrong"] == 0, m
PY
# A failed step keeps its exit status and its stderr; a JSON-less bench log is a problem.
printf 'eagercomm_p2p\tnodeA,nodeB\t1\t0.5\tmpirun ...\t\n' >"$res/steps.tsv"
echo "not json" >"$res/eagercomm_p2p.out"
echo "eagercomm-bench: verbs: no active port" >"$res/eagercomm_p2p.err"
python3 "$here/summarize.py" --out "$res" --steps "$res/steps.tsv" >/dev/null && fail "a failed step passed"
python3 - "$res/summary.json" <<'PY' || fail "a failed step is not reported"
import json, sys
s = json.load(open(sys.argv[1]))["steps"][0]
assert s["exit_status"] == 1 and s["problem"] == "exit status 1", s
assert "no active port" in s["stderr_tail"], s
PY
echo "rdma_run_test: OK"
