#!/usr/bin/env bash
# run-guest.sh — boot the interop guest once, by hand or from CI scripts.
#
#   run-guest.sh [-t TIMEOUT_S] [-l LOG] [-k SUITE] [-f HOSTPORT:GUESTPORT]... SCENARIO [key=value]...
#
# Runs setup.sh (cached after the first time), boots the guest under QEMU TCG
# with the console on stdout and in LOG, and exits 0 only if the console shows
# "INTEROP-RESULT: PASS". key=value pairs go on the kernel command line for
# the scenario (e.g. nqn=..., target_port=...). Each -f forwards
# 127.0.0.1:HOSTPORT on this machine to the guest's GUESTPORT; from inside
# the guest, 10.0.2.2 is this machine's 127.0.0.1. -k boots SUITE's kernel
# (setup.sh SUITE), e.g. -k trixie for the auth-* scenarios.
#
# Examples:
#   tests/interop/run-guest.sh linux-selftest
#   tests/interop/run-guest.sh -k trixie auth-selftest
#   tests/interop/run-guest.sh host-to-ours nqn=nqn.2024-01.io.nearstore:vol0 target_port=4420
#   tests/interop/run-guest.sh -f 14420:4420 -f 14421:4421 ours-to-linux   # stop: echo stop | nc 127.0.0.1 14421
#
# The Go package in this directory (Boot, Guest.WaitFor, ...) builds the same
# QEMU command line; keep the two in step.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
timeout_s=480
logfile=
fwds=()
suite=
while getopts "t:l:f:k:h" opt; do
	case $opt in
	t) timeout_s=$OPTARG ;;
	k) suite=$OPTARG ;;
	l) logfile=$OPTARG ;;
	f) fwds+=("$OPTARG") ;;
	*) sed -n '2,20p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n '2,20p' "$0" >&2; exit 2; }
scenario=$1
shift

"$HERE/setup.sh" ${suite:+"$suite"} >/dev/null
KERNEL='' INITRD='' QEMU='' KERNEL_VERSION=''
while IFS='=' read -r k v; do
	case $k in KERNEL | INITRD | QEMU | KERNEL_VERSION) printf -v "$k" '%s' "$v" ;; esac
done <"${INTEROP_CACHE:-$HERE/.cache}/${suite:+$suite/}env"
: "${logfile:=$HERE/.cache/logs/$scenario-$(date +%Y%m%d-%H%M%S).log}"
mkdir -p "$(dirname "$logfile")"

netdev=user,id=n0
for f in "${fwds[@]}"; do
	netdev+=",hostfwd=tcp:127.0.0.1:${f%%:*}-:${f##*:}"
done

append="console=ttyS0 panic=-1 scenario=$scenario $*"
echo "run-guest.sh: kernel $KERNEL_VERSION, log $logfile" >&2
echo "run-guest.sh: append: $append" >&2

set +e
timeout --foreground -k 10 "$timeout_s" \
	"$QEMU" -accel tcg -cpu max -m 1024 -smp 2 \
	-nographic -monitor none -no-reboot \
	-kernel "$KERNEL" -initrd "$INITRD" -append "$append" \
	-netdev "$netdev" -device virtio-net-pci,netdev=n0 \
	</dev/null 2>&1 | tee "$logfile"
rc=${PIPESTATUS[0]}
set -e

if grep -q 'INTEROP-RESULT: PASS' "$logfile"; then
	echo "run-guest.sh: PASS ($scenario)" >&2
	exit 0
fi
reason=$(grep -ao 'INTEROP-RESULT: FAIL.*' "$logfile" | head -n1 | tr -d '\r' | sed 's/^INTEROP-RESULT: FAIL //')
[[ -n $reason ]] || reason="no result marker (qemu exit $rc$([[ $rc == 124 ]] && echo ", timed out after ${timeout_s}s"))"
echo "run-guest.sh: FAIL ($scenario): $reason" >&2
exit 1
