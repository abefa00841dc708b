#!/usr/bin/env bash
# Data-parallel training across two "hosts" on one box (docs/distributed.md): two network namespaces
# joined by a veth pair stand for two machines on a 10.x network. mpirun runs in the first; it starts
# the second host's daemon through a launch agent (tests/cli/netns_agent.sh, in place of ssh) that
# enters that namespace. Transport: TCP over the veth link only (no shared memory). The 2-"host" run
# must agree with a 1-process run within train_mpi.sh's tolerance.
# Namespaces need root (CAP_NET_ADMIN / CAP_SYS_ADMIN). Where they cannot be made (an unprivileged
# container), the same run goes over TCP on loopback with shared memory off, and the test says so.
# Usage: train_mpi_hosts.sh ROFORMER_BINARY MPIEXEC WORK_DIR
set -euo pipefail
roformer="$1"
mpiexec="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work"
mkdir -p "$work"

awk 'BEGIN { srand(5); split("north south river hill town field road bridge stone water light", w, " ");
             for (i = 0; i < 3000; i++) { s = ""; n = 3 + int(rand() * 8);
               for (j = 0; j < n; j++) s = s w[1 + int(rand() * 11)] " ";
               print s i % 71 "." } }' > "$work/corpus.txt"
opts=(--data "$work/corpus.txt" --task mlm --layers 2 --hidden 64 --heads 2 --ff 128 --seq 32 --batch 8 --steps 50
      --lr 3e-3 --warmup 5 --save-every 0 --eval-every 25 --eval-batches 2 --dropout 0.1 --threads 1 --no-progress)
"$roformer" train "${opts[@]}" --out "$work/one" 2> "$work/one.log"

root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
ns1="rf$$a" ns2="rf$$b"
cleanup() { ip netns del "$ns1" 2> /dev/null || true; ip netns del "$ns2" 2> /dev/null || true; }
trap cleanup EXIT
make_hosts() {
  ip netns add "$ns1" && ip netns add "$ns2" &&
  ip link add "${ns1}v" type veth peer name "${ns2}v" &&
  ip link set "${ns1}v" netns "$ns1" && ip link set "${ns2}v" netns "$ns2" &&
  ip -n "$ns1" addr add 10.77.0.1/24 dev "${ns1}v" && ip -n "$ns2" addr add 10.77.0.2/24 dev "${ns2}v" &&
  ip -n "$ns1" link set lo up && ip -n "$ns2" link set lo up &&
  ip -n "$ns1" link set "${ns1}v" up && ip -n "$ns2" link set "${ns2}v" up
}
if command -v ip > /dev/null && make_hosts 2> "$work/netns.err"; then
  printf "10.77.0.1 slots=1\n10.77.0.2 slots=1\n" > "$work/hostfile"
  # The agent maps each host address to its namespace; mpirun, in the first, starts the second's daemon.
  export ROFORMER_NETNS_MAP="10.77.0.1=$ns1 10.77.0.2=$ns2"
  ip netns exec "$ns1" "$mpiexec" "${root[@]}" --hostfile "$work/hostfile" -np 2 --mca plm_rsh_agent "$here/netns_agent.sh" \
    --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    "$roformer" train "${opts[@]}" --out "$work/hosts" > "$work/hosts.log" 2>&1 ||
    { cat "$work/hosts.log" >&2; exit 1; }
  echo "two network namespaces (10.77.0.1, 10.77.0.2), TCP over veth only"
else
  why="no ip command"
  [ -s "$work/netns.err" ] && why="$(head -1 "$work/netns.err")"
  echo "network namespaces unavailable ($why): TCP on loopback, shared memory off"
  "$mpiexec" "${root[@]}" --oversubscribe -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo "$roformer" train "${opts[@]}" --out "$work/hosts" > "$work/hosts.log" 2>&1 ||
    { cat "$work/hosts.log" >&2; exit 1; }
fi
grep -q "2 processes (mpi)" "$work/hosts.log"
python3 - "$work/one/metrics.jsonl" "$work/hosts/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 50, (len(a), len(b))
worst = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b) for k in ("loss", "val_loss") if k in x)
print(f"2 hosts vs 1 process: largest relative loss difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
