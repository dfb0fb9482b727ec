#!/usr/bin/env bash
# The hardware check for two InfiniBand or RoCE hosts (tests/rdma/README.md): perftest's
# ib_write_lat and ib_write_bw between host A (server) and host B (client), eagercomm-bench --p2p
# over verbs at the same sizes, eagercomm's allreduce against Open MPI over UCX on the same two
# hosts, and the transport contract suite's verbs instance on each host's real device. Writes one
# JSON summary (tests/rdma/summarize.py) with every command, its exit status and its figures.
#
# usage: tests/rdma/run.sh [options] HOST_A HOST_B          (--help lists the options)
# Needs: passwordless ssh from here to both hosts (BatchMode: it never prompts), perftest on both,
# Open MPI with UCX (mpirun here and on both hosts), the eagercomm build at the same absolute path
# on both hosts. HOST_A must be a name B reaches A by (perftest's handshake and eagercomm's store
# connect to it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

usage() {
  cat <<EOF
usage: tests/rdma/run.sh [options] HOST_A HOST_B
  HOST_A, HOST_B      the two RDMA hosts as ssh and mpirun reach them (A serves perftest and
                      eagercomm's store; B must reach A by this name)
  -d, --device DEV    RDMA device on both hosts, as ibv_devices lists it (mlx5_0)
                      [each tool's own choice]
  -i, --port N        port of DEV, 1..255 [1]
  -x, --gid-index N   GID index, 0..255 (RoCE: the RoCE v2 entry, see show_gids)
                      [each tool's own choice; eagercomm: auto]
  -s, --sizes MIN:MAX message sizes in bytes, powers of two from 2 to 8M (perftest -a's range),
                      K and M allowed [8:4M]
  -n, --iters N       timed iterations per size, every tool [1000]
  -w, --window N      writes in flight in the bandwidth tests (eagercomm --window, perftest -t),
                      1..4096 [64]
  -b, --build DIR     eagercomm build directory, the same absolute path on both hosts
                      [$root/build/default]
  -o, --out DIR       logs and summary.json go here [./rdma-results-<date>]
      --steps LIST    comma-separated subset of info,perftest,p2p,allreduce,contract [all]
      --perftest-port N   perftest's TCP handshake port on A [18515]
      --store-port N      eagercomm's bootstrap store port on A for --p2p [29517]
      --timeout SECS  limit for each command [600]
      --dry-run       print the commands it would run and run none
  -h, --help
env: SSH (default "ssh -o BatchMode=yes"), MPIRUN (default "mpirun"), MPIRUN_ARGS (extra mpirun
     arguments, e.g. "--allow-run-as-root")
EOF
}

die() {  # an argument error: the message and a pointer to --help, exit 2
  echo "rdma/run.sh: $*" >&2
  echo "rdma/run.sh: see tests/rdma/run.sh --help" >&2
  exit 2
}

# A decimal integer in [lo, hi], else an error naming the option.
int_arg() {
  local name=$1 value=$2 lo=$3 hi=$4
  [[ $value =~ ^[0-9]+$ ]] && ((10#$value >= lo && 10#$value <= hi)) ||
    die "$name: '$value' is not an integer in [$lo, $hi]"
  echo $((10#$value))
}

# A size (8, 4K, 1M; binary multiples) that is a power of two in [2, 8M], printed in bytes.
size_arg() {
  local name=$1 text=$2 n unit
  [[ $text =~ ^([0-9]+)([KkMm]?)$ ]] || die "$name: '$text' is not a size (8, 4K, 1M)"
  n=$((10#${BASH_REMATCH[1]}))
  unit=${BASH_REMATCH[2]}
  case $unit in
    [Kk]) n=$((n * 1024)) ;;
    [Mm]) n=$((n * 1024 * 1024)) ;;
  esac
  # perftest -a runs exactly the powers of two from 2 to 2^23: other sizes would have no peer.
  ((n >= 2 && n <= 8388608 && (n & (n - 1)) == 0)) ||
    die "$name: '$text' must be a power of two from 2 to 8M (the sizes perftest -a runs)"
  echo "$n"
}

device='' port=1 gid='' min=8 max=4194304 iters=1000 window=64
build=$root/build/default out='' dry_run=0 timeout_s=600
perftest_port=18515 store_port=29517
steps=(info perftest p2p allreduce contract)
hosts=()
need_value() { (($# >= 2)) || die "$1: missing value"; }
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    -d | --device) need_value "$@"; device=$2; shift
      [[ $device =~ ^[A-Za-z0-9_.-]+$ ]] || die "--device: '$device' is not a device name (mlx5_0)" ;;
    -i | --port) need_value "$@"; port=$(int_arg --port "$2" 1 255); shift ;;
    -x | --gid-index) need_value "$@"; gid=$(int_arg --gid-index "$2" 0 255); shift ;;
    -s | --sizes) need_value "$@"
      [[ $2 == *:* ]] || die "--sizes: '$2' is not MIN:MAX"
      min=$(size_arg "--sizes (MIN)" "${2%%:*}")
      max=$(size_arg "--sizes (MAX)" "${2#*:}")
      ((min <= max)) || die "--sizes: MIN ($min) is larger than MAX ($max)"
      shift ;;
    -n | --iters) need_value "$@"; iters=$(int_arg --iters "$2" 2 100000000); shift ;;
    -w | --window) need_value "$@"; window=$(int_arg --window "$2" 1 4096); shift ;;
    -b | --build) need_value "$@"; build=$2; shift ;;
    -o | --out) need_value "$@"; out=$2; shift ;;
    --steps) need_value "$@"
      IFS=, read -r -a steps <<<"$2"
      ((${#steps[@]})) || die "--steps: empty list"
      for s in "${steps[@]}"; do
        [[ $s =~ ^(info|perftest|p2p|allreduce|contract)$ ]] ||
          die "--steps: '$s' is not one of info, perftest, p2p, allreduce, contract"
      done
      shift ;;
    --perftest-port) need_value "$@"; perftest_port=$(int_arg --perftest-port "$2" 1024 65535); shift ;;
    --store-port) need_value "$@"; store_port=$(int_arg --store-port "$2" 1024 65535); shift ;;
    --timeout) need_value "$@"; timeout_s=$(int_arg --timeout "$2" 1 86400); shift ;;
    --dry-run) dry_run=1 ;;
    --) shift; hosts+=("$@"); break ;;
    -*) die "unknown option '$1'" ;;
    *) hosts+=("$1") ;;
  esac
  shift
done
((${#hosts[@]} == 2)) || die "expected two hosts (HOST_A HOST_B), got ${#hosts[@]}: ${hosts[*]:-none}"
host_a=${hosts[0]} host_b=${hosts[1]}
for h in "$host_a" "$host_b"; do
  [[ $h =~ ^([A-Za-z0-9_.-]+@)?[A-Za-z0-9_.:-]+$ && $h != -* ]] || die "'$h' is not a host name"
done
[[ $host_a != "$host_b" ]] || die "HOST_A and HOST_B are both '$host_a': the check needs two hosts"
# mpirun's host list takes names without a user; ssh's may carry one.
mpi_a=${host_a#*@} mpi_b=${host_b#*@}
build=$(realpath -m "$build")
[[ -n $out ]] || out=rdma-results-$(date +%Y%m%d-%H%M%S)
out=$(realpath -m "$out")
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }

read -r -a ssh_cmd <<<"${SSH:-ssh -o BatchMode=yes}"
read -r -a mpirun_cmd <<<"${MPIRUN:-mpirun}"
read -r -a mpirun_extra <<<"${MPIRUN_ARGS:-}"

# ---- the commands ----
# perftest: the same flags on both sides (the client adds A's name).
perftest_flags=(-a -n "$iters" -F -p "$perftest_port" -i "$port")
[[ -n $device ]] && perftest_flags+=(-d "$device")
[[ -n $gid ]] && perftest_flags+=(-x "$gid")
lat_cmd=(ib_write_lat "${perftest_flags[@]}")
bw_cmd=(ib_write_bw "${perftest_flags[@]}" -t "$window" --report_gbits)

# eagercomm's choice of device, forced to the real one (an inherited EAGERCOMM_VERBS_EMULATE=1
# would measure the emulated device instead).
ec_env=(EAGERCOMM_TRANSPORT=verbs EAGERCOMM_VERBS_EMULATE=0 EAGERCOMM_IB_PORT="$port")
[[ -n $device ]] && ec_env+=(EAGERCOMM_IB_HCA="$device")
[[ -n $gid ]] && ec_env+=(EAGERCOMM_IB_GID_INDEX="$gid")
bench=$build/bench/eagercomm-bench
mpi_common=("${mpirun_cmd[@]}" -np 2 -H "$mpi_a:1,$mpi_b:1" --bind-to core --map-by node
            "${mpirun_extra[@]}")
for v in "${ec_env[@]}"; do mpi_common+=(-x "$v"); done
p2p_cmd=("${mpi_common[@]}" -x EAGERCOMM_MASTER_ADDR="$mpi_a" -x EAGERCOMM_MASTER_PORT="$store_port"
         "$bench" --p2p -b "$min" -e "$max" -f 2 -n "$iters" -w 100 --window "$window" --json -)
# Open MPI over UCX on the same port: pml ucx, no other byte transfer layer.
ucx_dev=${device:+$device:$port}
allreduce_cmd=("${mpi_common[@]}" --mca pml ucx --mca btl '^vader,tcp,openib,uct')
[[ -n $ucx_dev ]] && allreduce_cmd+=(-x UCX_NET_DEVICES="$ucx_dev")
[[ -n $gid ]] && allreduce_cmd+=(-x UCX_IB_GID_INDEX="$gid")
allreduce_cmd+=("$bench" --compare mpi -b "$min" -e "$max" -f 2 -n "$iters" -w 10 -I 0 --json -)
# The contract suite on the real device: EAGERCOMM_VERBS_EMULATE removed, not just 0, so the
# suite decides which device it sees as it would on an ordinary host.
contract_env=(env -u EAGERCOMM_VERBS_EMULATE EAGERCOMM_IB_PORT="$port")
[[ -n $device ]] && contract_env+=(EAGERCOMM_IB_HCA="$device")
[[ -n $gid ]] && contract_env+=(EAGERCOMM_IB_GID_INDEX="$gid")
contract_cmd=("${contract_env[@]}" "$build/tests/transport_contract_test" '--gtest_filter=*verbs*')
info_cmd=("$build/tools/eagercomm-info" -t)

quoted() { local q; printf -v q '%q ' "$@"; echo "${q% }"; }
sq() { local s=$1; echo "'${s//\'/\'\\\'\'}'"; }  # one single-quoted shell word
# ssh hands the remote shell one string, which parses it again: the words are quoted for that
# shell, and the string once more for the local one. timeout(1) runs on the host, so nothing
# outlives the step there.
on() {
  local host=$1
  shift
  echo "$(quoted "${ssh_cmd[@]}" "$host" --) $(sq "$(quoted timeout "$timeout_s" "$@")")"
}

# perftest's server on A prints its shell's pid first (exec keeps it), so that a server whose
# client never came can be stopped by that pid; the client on B names A.
perftest_server() {
  echo "$(quoted "${ssh_cmd[@]}" "$host_a" --)" \
    "$(sq "echo perftest-server-pid \$\$; exec $(quoted timeout "$timeout_s" "$@")")"
}
perftest_client() { on "$host_b" "$@" "$mpi_a"; }

if ((dry_run)); then
  echo "rdma/run.sh: dry run: hosts A=$host_a B=$host_b, sizes $min..$max, $iters iterations;" \
    "would write $out/summary.json"
  if want info; then
    echo "[info_a] $(on "$host_a" "${info_cmd[@]}")"
    echo "[info_b] $(on "$host_b" "${info_cmd[@]}")"
  fi
  if want perftest; then
    echo "[perftest_write_lat] server on A: $(perftest_server "${lat_cmd[@]}")"
    echo "[perftest_write_lat] client on B: $(perftest_client "${lat_cmd[@]}")"
    echo "[perftest_write_bw] server on A: $(perftest_server "${bw_cmd[@]}")"
    echo "[perftest_write_bw] client on B: $(perftest_client "${bw_cmd[@]}")"
  fi
  want p2p && echo "[eagercomm_p2p] $(quoted timeout "$timeout_s" "${p2p_cmd[@]}")"
  want allreduce && echo "[allreduce_vs_mpi] $(quoted timeout "$timeout_s" "${allreduce_cmd[@]}")"
  if want contract; then
    echo "[contract_a] $(on "$host_a" "${contract_cmd[@]}")"
    echo "[contract_b] $(on "$host_b" "${contract_cmd[@]}")"
  fi
  exit 0
fi

# ---- running them ----
command -v python3 >/dev/null || { echo "rdma/run.sh: python3 is needed for the summary" >&2; exit 2; }
if want p2p || want allreduce; then
  command -v "${mpirun_cmd[0]}" >/dev/null ||
    { echo "rdma/run.sh: ${mpirun_cmd[0]} not found (install Open MPI: openmpi-bin)" >&2; exit 2; }
fi
mkdir -p "$out"
steps_tsv=$out/steps.tsv
: >"$steps_tsv"
echo "rdma/run.sh: hosts A=$host_a B=$host_b; logs in $out"

# Each host: reachable without a prompt, with what the chosen steps run (the contract suite is
# left to its step: a missing one fails that step only).
needed=()
want info && needed+=("$build/tools/eagercomm-info")
want p2p || want allreduce && needed+=("$bench")
check="for f in $(quoted "${needed[@]}" /bin/sh); do [ -x \"\$f\" ] || echo \"\$f\"; done"
want perftest && check+="; for t in ib_write_lat ib_write_bw; do
  command -v \$t >/dev/null || echo \"\$t (install perftest)\"; done"
for h in "$host_a" "$host_b"; do
  missing=$("${ssh_cmd[@]}" "$h" -- "$check" 2>"$out/ssh-$h.err") ||
    { echo "rdma/run.sh: cannot run commands on $h over ssh: $(tail -1 "$out/ssh-$h.err")" >&2; exit 2; }
  [[ -z $missing ]] || { echo "rdma/run.sh: missing on $h: ${missing//$'\n'/, }" >&2; exit 2; }
done

# record NAME HOST RC SECONDS COMMAND [SERVER_COMMAND]: one line of steps.tsv for summarize.py.
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${6:-}" >>"$steps_tsv"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# step NAME HOST COMMAND: runs one shell command line, stdout and stderr to NAME.out / NAME.err.
step() {
  local name=$1 host=$2 cmd=$3 start rc=0
  echo "rdma/run.sh: [$name] $cmd"
  start=$(now)
  bash -c "$cmd" >"$out/$name.out" 2>"$out/$name.err" || rc=$?
  record "$name" "$host" "$rc" "$(elapsed "$start")" "$cmd"
  echo "rdma/run.sh: [$name] exit $rc"
}

# perftest_pair NAME COMMAND...: the server on A, then the client on B, retried while the server
# still waits (it needs a moment to listen); a server left waiting is stopped.
perftest_pair() {
  local name=$1 server_cmd client_cmd server_pid start rc=1 try srv_rc=0 pid
  shift
  server_cmd=$(perftest_server "$@")
  client_cmd=$(perftest_client "$@")
  echo "rdma/run.sh: [$name] server: $server_cmd"
  echo "rdma/run.sh: [$name] client: $client_cmd"
  start=$(now)
  bash -c "$server_cmd" >"$out/$name.server.out" 2>"$out/$name.server.err" &
  server_pid=$!
  for try in 1 2 3 4 5 6 7 8 9 10; do
    sleep 1
    rc=0
    bash -c "$client_cmd" >"$out/$name.out" 2>"$out/$name.err" || rc=$?
    if ((rc == 0)) || ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    echo "rdma/run.sh: [$name] client attempt $try exited $rc; the server still waits: retrying"
  done
  # A server whose client failed waits for nobody; one whose client finished ends by itself,
  # given a while.
  ((rc != 0)) || for _ in $(seq 60); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$server_pid" 2>/dev/null; then
    pid=$(sed -n 's/^perftest-server-pid //p' "$out/$name.server.out")
    if [[ -n $pid ]]; then "${ssh_cmd[@]}" "$host_a" -- kill "$pid" 2>/dev/null || true; fi
  fi
  wait "$server_pid" || srv_rc=$?
  ((rc != 0)) || rc=$srv_rc
  record "$name" "$host_b" "$rc" "$(elapsed "$start")" "$client_cmd" "$server_cmd"
  echo "rdma/run.sh: [$name] exit $rc"
}

if want info; then
  step info_a "$host_a" "$(on "$host_a" "${info_cmd[@]}")"
  step info_b "$host_b" "$(on "$host_b" "${info_cmd[@]}")"
fi
if want perftest; then
  perftest_pair perftest_write_lat "${lat_cmd[@]}"
  perftest_pair perftest_write_bw "${bw_cmd[@]}"
fi
want p2p && step eagercomm_p2p "$host_a,$host_b" "$(quoted timeout "$timeout_s" "${p2p_cmd[@]}")"
want allreduce && step allreduce_vs_mpi "$host_a,$host_b" \
  "$(quoted timeout "$timeout_s" "${allreduce_cmd[@]}")"
if want contract; then
  step contract_a "$host_a" "$(on "$host_a" "${contract_cmd[@]}")"
  step contract_b "$host_b" "$(on "$host_b" "${contract_cmd[@]}")"
fi

python3 "$here/summarize.py" --out "$out" --steps "$steps_tsv" \
  --meta host_a="$host_a" host_b="$host_b" device="${device:-}" port="$port" gid_index="${gid:-}" \
  min_bytes="$min" max_bytes="$max" iters="$iters" window="$window" build="$build"
