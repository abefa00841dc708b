#!/usr/bin/env bash
# The measurements behind docs/distributed.md, on this machine: allreduce time by message size over
# shared memory, TCP on loopback and (as root) TCP between two network namespaces; data-parallel
# training steps with and without gradient buckets; and single-process training speed of this build
# beside an older binary (OLD, optional), interleaved.
# Usage: bench/distributed.sh MPI_BUILD_ROFORMER [OLD_ROFORMER]
set -euo pipefail
roformer="$1"
old="${2:-}"
here="$(cd "$(dirname "$0")/.." && pwd)"
mpirun=(mpirun --oversubscribe --mca oob_tcp_if_include lo)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
shm=(--mca btl self,vader)
tcp=(--mca btl self,tcp --mca btl_tcp_if_include lo)
lscpu | grep -E "Model name|^CPU\(s\)" | tr -s ' '

echo "## allreduce, 2 processes, shared memory"
"${mpirun[@]}" "${shm[@]}" -np 2 "$roformer" bench comm
echo "## allreduce, 2 processes, TCP on loopback"
"${mpirun[@]}" "${tcp[@]}" -np 2 "$roformer" bench comm
if [ "$(id -u)" = 0 ] && ip netns add rfbench1 2> /dev/null; then
  ip netns add rfbench2
  trap 'ip netns del rfbench1; ip netns del rfbench2' EXIT
  ip link add rfb1 type veth peer name rfb2
  ip link set rfb1 netns rfbench1 && ip link set rfb2 netns rfbench2
  ip -n rfbench1 addr add 10.78.0.1/24 dev rfb1 && ip -n rfbench2 addr add 10.78.0.2/24 dev rfb2
  for n in 1 2; do ip -n rfbench$n link set lo up; ip -n rfbench$n link set rfb$n up; done
  printf "10.78.0.1 slots=1\n10.78.0.2 slots=1\n" > /tmp/rfbench.hosts
  echo "## plain TCP round trip between the namespaces (16 bytes, TCP_NODELAY), for comparison"
  ip netns exec rfbench2 python3 -c '
import socket
s = socket.socket(); s.bind(("10.78.0.2", 7777)); s.listen(1); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (d := c.recv(64)): c.sendall(d)' &
  sleep 0.5
  ip netns exec rfbench1 python3 -c '
import socket, time
c = socket.create_connection(("10.78.0.2", 7777)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t = time.perf_counter()
for _ in range(2000): c.sendall(b"x" * 16); c.recv(64)
print(f"round trip {1e6 * (time.perf_counter() - t) / 2000:.1f} us")'
  wait
  echo "## allreduce, 2 network namespaces, TCP over veth"
  ROFORMER_NETNS_MAP="10.78.0.1=rfbench1 10.78.0.2=rfbench2" ip netns exec rfbench1 mpirun --allow-run-as-root \
    --hostfile /tmp/rfbench.hosts -np 2 --mca plm_rsh_agent "$here/tests/cli/netns_agent.sh" --mca btl self,tcp \
    --mca btl_tcp_if_include 10.78.0.0/24 --mca oob_tcp_if_include 10.78.0.0/24 "$roformer" bench comm
fi

step=(bench train --preset small --task clm --batch 16 --seq 128 --steps 10 --warmup 2 --no-sgemm)
echo "## training steps (small preset, batch 16 × 128), median of 3 interleaved rounds each"
for round in 1 2 3; do
  echo "# round $round"
  "$roformer" "${step[@]}" --threads 1
  "$roformer" "${step[@]}" --threads 2
  for b in 0 4 1; do
    "${mpirun[@]}" "${shm[@]}" -np 2 "$roformer" "${step[@]}" --threads 1 --bucket-mb "$b"
  done
  "${mpirun[@]}" "${tcp[@]}" -np 2 "$roformer" "${step[@]}" --threads 1 --bucket-mb 4
  if [ -n "$old" ]; then
    echo "old: $("$old" "${step[@]}" --threads 2)"
    echo "new: $("$roformer" "${step[@]}" --threads 2)"
  fi
done
