#!/usr/bin/env bash
# ci/softroce.sh [NETDEV]: create a soft-RoCE (rdma_rxe) device on NETDEV
# (default: the interface of the default route) and print its name.
# Exit 2, saying why, where the kernel cannot: no InfiniBand support, no
# rdma_rxe module, or no `rdma` tool.
set -euo pipefail
netdev=${1:-$(ip route show default 2>/dev/null | awk '{for (i=1;i<NF;i++) if ($i=="dev") {print $(i+1); exit}}')}
unavailable() { echo "softroce: unavailable: $*" >&2; exit 2; }

[ -n "$netdev" ] || unavailable "no network device given and no default route"
kconfig=/boot/config-$(uname -r)
if [ -r "$kconfig" ] && ! grep -q '^CONFIG_INFINIBAND=[ym]' "$kconfig"; then
	unavailable "kernel $(uname -r) is built without InfiniBand support (CONFIG_INFINIBAND is not set in $kconfig), so rdma_rxe cannot exist"
fi
if ! [ -d /sys/module/rdma_rxe ] && ! modprobe rdma_rxe 2>/dev/null; then
	unavailable "kernel $(uname -r) has no rdma_rxe module (modprobe rdma_rxe failed)"
fi
command -v rdma >/dev/null || unavailable "the rdma tool (iproute2) is missing"
name=rxe_${netdev}
if ! rdma link show "$name/1" >/dev/null 2>&1; then
	rdma link add "$name" type rxe netdev "$netdev" || unavailable "rdma link add $name type rxe netdev $netdev failed"
fi
echo "$name"
