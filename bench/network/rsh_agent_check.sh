#!/bin/bash
# network_bench's launch agent for mpirun (--role=rsh, bench/network/peers.h) makes each node a
# host of its own: two nodes get their own host names and TMPDIRs, so one node's daemon never
# sees another's files, the host keeps its name, and an IP that names no node is refused.
# Usage: rsh_agent_check.sh NETWORK_BENCH
# Runs in mount and UTS namespaces of its own, with /run on tmpfs there (not /tmp, which may hold
# the build): the network namespace it names and the folders it makes go with it, also when it
# is killed, and an agent that renamed its caller would rename only this script's namespace.
set -euo pipefail
bench=$1
if [[ $(id -u) -ne 0 ]] || ! unshare --mount --net --uts true 2>/dev/null; then
  echo "SKIP: needs root and mount, network and UTS namespaces"
  exit 77
fi
host=$(hostname)
if [[ ${IN_PRIVATE_MOUNTS:-} != 1 ]]; then
  exec env IN_PRIVATE_MOUNTS=1 unshare --mount --uts --propagation private bash "$0" "$@"
fi
mount -t tmpfs tmpfs /run
mkdir /run/netns /run/nodes
ip netns add node
export NETWORK_BENCH_NODES="198.51.100.1=node=node-a,198.51.100.2=node=node-b"
export NETWORK_BENCH_NODES_TMP=/run/nodes
fail() { echo "FAIL: $*"; exit 1; }

# As ssh is called: options first, then the host, then the command's words, which the node's
# shell expands, not this one.
# shellcheck disable=SC2016
a=$("$bench" --role=rsh -x 198.51.100.1 'echo $(hostname) $TMPDIR; touch $TMPDIR/from-a')
# shellcheck disable=SC2016
b=$("$bench" --role=rsh 198.51.100.2 echo '$(hostname) $TMPDIR $(ls $TMPDIR | wc -l)')
[[ $a == "node-a /run/nodes/node-a" ]] || fail "node-a's agent printed: $a"
[[ $b == "node-b /run/nodes/node-b 0" ]] || fail "node-b's agent printed: $b (node-a's file seen?)"
[[ -e /run/nodes/node-a/from-a ]] || fail "node-a's file is not in its TMPDIR"
[[ $(hostname) == "$host" ]] || fail "the host's name changed to $(hostname)"
if out=$("$bench" --role=rsh 198.51.100.9 true 2>&1); then
  fail "an IP that names no node ran: $out"
fi
[[ $out == *"no sandbox IP"* ]] || fail "an IP that names no node: $out"
echo "PASS: each node its own host name and TMPDIR"
