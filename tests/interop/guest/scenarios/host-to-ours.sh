#!/bin/sh
# host-to-ours: the guest's kernel NVMe/TCP host against a target on the host
# machine (nearstore's), reached at 10.0.2.2 — QEMU user-net's alias for the
# host's 127.0.0.1.
#
# Parameters: target_addr= (default 10.0.2.2) target_port= (default 4420)
#             nqn= (required) full_md5= (auto: md5 of the whole namespace
#             when it is at most 128 MiB; 1: always; 0: never)
#             ctrl_loss_tmo= (nvme connect --ctrl-loss-tmo, default 15)
#             strict_io= (1: fail if the kernel logged any NVMe I/O error; default 1)
#             resv= (1: take a reservation with nvme-cli after the workload; default 0)
#             digests= (1: connect again with header and data digests and move data; default 0)
#             MODULE.PARAM=VALUE for the modules, e.g. nvme_core.io_timeout=10
#
# Use a small namespace (64 MiB): TCG + user-net move a few MB/s.
. /usr/lib/interop/lib.sh

addr=$(param target_addr 10.0.2.2)
port=$(param target_port 4420)
nqn=$(param nqn "")
[ -n "$nqn" ] || fail "host-to-ours needs nqn= on the kernel command line"

nvme_discover_connect "$addr" "$port" "$nqn"
dev=$(nvme_ns_dev "$nqn" 30) || fail "namespace of $nqn did not appear"
log "namespace is $dev"
nvme list 2>&1 || true

host_workload "$dev"

# resv=1: register key 41394 (0xa1b2) and take a Write Exclusive
# reservation with nvme-cli, print the report, and leave both in place for
# the host side to find after the disconnect.
if [ "$(param resv 0)" = 1 ]; then
	step "nvme resv-register/resv-acquire/resv-report on $dev"
	must "nvme resv-register" nvme resv-register "$dev" -n 1 --nrkey=41394 --rrega=0
	must "nvme resv-acquire" nvme resv-acquire "$dev" -n 1 --crkey=41394 --rtype=1 --racqa=0
	must "nvme resv-report" nvme resv-report "$dev" -n 1 --eds
	# Holding the reservation, this host still writes (a block back onto
	# itself, so the checksums above stay true).
	must "read a block" dd if="$dev" of=/tmp/resvblk bs=4096 count=1 skip=2 iflag=direct status=none
	must "write under the reservation" dd if=/tmp/resvblk of="$dev" bs=4096 count=1 seek=2 oflag=direct conv=notrunc status=none
fi

step "nvme disconnect -n $nqn"
must "nvme disconnect" nvme disconnect -n "$nqn"

# digests=1: connect again with header and data digests (CRC32C on every
# PDU header and data) and move data both ways through them: read the
# checksummed regions back, and write the first MiB back onto itself.
if [ "$(param digests 0)" = 1 ]; then
	step "nvme connect with --hdr-digest --data-digest"
	must "nvme connect (digests)" nvme connect -t tcp -a "$addr" -s "$port" -n "$nqn" \
		--hdr-digest --data-digest --ctrl-loss-tmo="$(param ctrl_loss_tmo 15)"
	dev=$(nvme_ns_dev "$nqn" 30) || fail "namespace of $nqn did not appear (digests)"
	size=$(($(cat /sys/block/"${dev#/dev/}"/size) * 512))
	before=$(md5_of "$dev" 0 $((4 * MIB)) direct)
	must "read a MiB (digests)" dd if="$dev" of=/tmp/first bs=$MIB count=1 iflag=direct status=none
	must "write it back (digests)" dd if=/tmp/first of="$dev" bs=$MIB count=1 oflag=direct conv=notrunc status=none
	after=$(md5_of "$dev" 0 $((4 * MIB)) direct)
	[ "$before" = "$after" ] || fail "a write back through digests changed the data"
	echo "INTEROP-MD5 0 $((4 * MIB)) $after"
	echo "INTEROP-MD5 $((size - MIB)) $MIB $(md5_of "$dev" $((size - MIB)) $MIB direct)"
	step "nvme disconnect (digests)"
	must "nvme disconnect" nvme disconnect -n "$nqn"
fi

# Every command the kernel sent must have succeeded: a status the kernel
# logs as an I/O error (a discard refused, a write failed) is a target bug
# even when the workload above copes with it. strict_io=0 skips this for a
# target known to refuse optional commands (Linux's own, on tmpfs).
if [ "$(param strict_io 1)" = 1 ]; then
	step "kernel log check"
	errs=$(dmesg | grep -E "nvme.*(I/O Error|I/O error)|I/O error, dev nvme" || true)
	[ -z "$errs" ] || fail "the kernel logged NVMe I/O errors: $(echo "$errs" | head -3)"
fi
