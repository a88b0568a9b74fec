# SPDX-License-Identifier: Apache-2.0
# Two emulated nodes for the benchmarks (sourced, not run): network
# namespaces <tag>A and <tag>B joined by a veth pair <tag>vA-<tag>vB, both
# ends shaped to 1 Gbit/s with tbf (netem, hence added latency, is not
# available in this kernel). Node A is <net>.1, node B <net>.2.
#
#   . tests/bench/netns.sh
#   netns_up ddpb 10.250.9 "$work/node"   # root; iproute2
#   "$run" -n 4 --nodes 2 --master-addr 10.250.9.1 "$work/node" PROGRAM ...
#   netns_down ddpb                        # in the script's EXIT trap
#
# netns_up writes a wrapper that runs its command in node A's namespace when
# ddp-run's DDP_RUN_NODE is 0, else in node B's. Each script has its own tag
# and network, so two benchmarks never take each other's namespaces.

netns_up() { # netns_up TAG NET WRAPPER
    local tag=$1 net=$2 wrapper=$3 side
    [ "$(id -u)" = 0 ] && command -v ip > /dev/null ||
        { echo "$(basename "$0"): the emulated nodes need root and iproute2 (run as root; apt-get install iproute2)" >&2; return 1; }
    # a run killed before its trap leaves namespaces behind: start clean
    netns_down "$tag"
    ip netns add "${tag}A"
    ip netns add "${tag}B"
    ip link add "${tag}vA" type veth peer name "${tag}vB"
    ip link set "${tag}vA" netns "${tag}A"
    ip link set "${tag}vB" netns "${tag}B"
    ip -n "${tag}A" addr add "$net.1/24" dev "${tag}vA"
    ip -n "${tag}B" addr add "$net.2/24" dev "${tag}vB"
    for side in A B; do
        ip -n "$tag$side" link set lo up
        ip -n "$tag$side" link set "${tag}v$side" up
        ip netns exec "$tag$side" tc qdisc add dev "${tag}v$side" root tbf rate 1gbit burst 256kb latency 50ms
    done
    cat > "$wrapper" <<WRAP
#!/bin/bash
exec ip netns exec "$tag\$([ "\$DDP_RUN_NODE" = 0 ] && echo A || echo B)" "\$@"
WRAP
    chmod +x "$wrapper"
}

# deleting a namespace deletes the veth end inside it, and so the pair
netns_down() { # netns_down TAG
    ip netns del "${1}A" 2>/dev/null || true
    ip netns del "${1}B" 2>/dev/null || true
}
