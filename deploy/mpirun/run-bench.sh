#!/usr/bin/env bash
# Runs eagercomm-bench on the nodes of an Open MPI hostfile: eagercomm's allreduce beside Open
# MPI's and Gloo's (--compare) on the same processes, then the imbalance benchmark with one rank
# delayed. eagercomm bootstraps from MPI (communicator_from_mpi), so nothing else is needed on
# the nodes than the same eagercomm build at the same path.
#
# usage: deploy/mpirun/run-bench.sh [-np N] [extra eagercomm-bench flags...]
# env:
#   HOSTFILE        the hostfile [deploy/mpirun/hostfile]; "localhost slots=4" runs on this host
#   BENCH           the eagercomm-bench binary [build/bench/eagercomm-bench]
#   MPIRUN_ARGS     more mpirun flags, e.g. "--mca btl_tcp_if_include ib0"
#   EAGERCOMM_*, UCX_*  forwarded to every rank (e.g. EAGERCOMM_TRANSPORT=ucx UCX_TLS=rc,sm)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
hostfile=${HOSTFILE:-$here/hostfile}
bench=${BENCH:-$root/build/bench/eagercomm-bench}
[ -r "$hostfile" ] || { echo "run-bench: no hostfile $hostfile (copy hostfile.example)" >&2; exit 2; }
[ -x "$bench" ] || { echo "run-bench: $bench not built (make build)" >&2; exit 2; }
np=()
if [[ ${1:-} == -np ]]; then
  np=(-np "$2")
  shift 2
fi

forward=()
for var in $(compgen -e); do
  case $var in EAGERCOMM_* | UCX_*) forward+=(-x "$var") ;; esac
done
# Debian's Open MPI refuses to run as root without these (containers, CI).
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# shellcheck disable=SC2086 # MPIRUN_ARGS is a list of flags
mpi=(mpirun --hostfile "$hostfile" "${np[@]}" --bind-to none "${forward[@]}" ${MPIRUN_ARGS:-})

echo "== allreduce: eagercomm vs Open MPI vs Gloo"
"${mpi[@]}" "$bench" --compare mpi,gloo "$@"
echo "== imbalance: one rank delayed 5 ms per iteration"
"${mpi[@]}" "$bench" --compare mpi --imbalance --delay-ms 5 --modes full,solo,majority "$@"
