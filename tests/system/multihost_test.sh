#!/usr/bin/env bash
# Three "hosts" on one machine (tests/system/netns_hosts.sh: network and IPC namespaces, veth links to a
# bridge, ranks started with torchrun's variables, eagercomm over UCX with UCX_TLS=tcp): the
# multi-process collective tests must pass across the "hosts".
# usage: tests/system/multihost_test.sh <build-dir> [test program [args...]]
# Exits 77 (ctest: skipped) with the reason when namespaces can't be made (not root, no ip(8),
# no netns support, UCX not built).
set -uo pipefail
build=${1:?usage: multihost_test.sh <build-dir> [program [args...]]}
shift
if (($#)); then
  program=("$@")
else
  program=("$build/tests/mp_collectives_test")
fi
test_name=multihost_test
. "$(dirname "$0")/netns_hosts.sh"
[ -x "${program[0]}" ] || fail "${program[0]} not built"
netns_hosts_up

echo "multihost_test: 3 hosts 198.18.0.1-3 (netns ${hosts[*]}), store 198.18.0.1:$((port + 1)), ucx over tcp"
run_job "${program[@]}"
status=0
for i in 0 1 2; do
  if [ "${codes[$i]}" -ne 0 ]; then
    status=1
    echo "--- rank $i failed (exit ${codes[$i]}):"
    tail -n 40 "$tmp/out-$i"
  fi
done
((status)) && fail "the multi-host job failed"
tail -n 3 "$tmp/out-0"

# With the default program: a host's rank dies by SIGKILL mid-allreduce; the other hosts must
# name it (over TCP, UCX's peer-failure handling notices the connection loss).
if [ "${program[0]}" = "$build/tests/mp_collectives_test" ] && [ -x "$build/tests/dead_peer_main" ]; then
  run_job "$build/tests/dead_peer_main" 4096
  [ "${codes[2]}" -eq 137 ] || fail "dead peer: rank 2 exited ${codes[2]}, expected 137 (SIGKILL)"
  for i in 0 1; do
    grep -q "DETECTED rank=$i code=peer failed .*rank 2" "$tmp/out-$i" \
      || { tail -n 20 "$tmp/out-$i"; fail "dead peer: rank $i did not name rank 2 (exit ${codes[$i]})"; }
  done
  echo "multihost_test: a SIGKILLed rank on host 2 was named by hosts 0 and 1"
fi
echo "multihost_test: OK"
