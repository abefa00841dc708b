#!/bin/sh
# A launch agent for mpirun (--mca plm_rsh_agent) in place of ssh, for train_mpi_hosts.sh: mpirun
# calls it as `agent HOST COMMAND...` to start its daemon on HOST; HOST is an address, which
# ROFORMER_NETNS_MAP ("ADDRESS=NAMESPACE ...") maps to the network namespace standing for that host.
host="$1"
shift
for pair in $ROFORMER_NETNS_MAP; do
  if [ "${pair%%=*}" = "$host" ]; then
    exec ip netns exec "${pair#*=}" sh -c "$*"
  fi
done
echo "netns_agent: no namespace for host $host" >&2
exit 1
