#!/bin/sh
# linux-selftest: proves the harness with Linux on both sides, inside one guest.
# nvmet-tcp exports a file-backed namespace on 0.0.0.0:4420; the kernel NVMe/TCP
# host connects to it over the guest's loopback and runs the same workload as
# host-to-ours; finally the target's backing file must match what the host
# read through the device.
#
# Parameters: nqn= ns_size_mb= (default 64) target_port= (default 4420)
. /usr/lib/interop/lib.sh

nqn=$(param nqn nqn.2024-01.io.nearstore:interop-selftest)
size_mb=$(param ns_size_mb 64)
port=$(param target_port 4420)
backing=/tmp/nvmet-ns1.img

step "nvmet target: $nqn on 0.0.0.0:$port"
nvmet_setup "$nqn" "$backing" "$size_mb" 0.0.0.0 "$port"

nvme_discover_connect 127.0.0.1 "$port" "$nqn"
dev=$(nvme_ns_dev "$nqn" 20) || fail "namespace of $nqn did not appear"
log "namespace is $dev"

host_workload "$dev"

step "compare the target's backing file with the device"
size=$(($(cat /sys/block/"${dev#/dev/}"/size) * 512))
a=${full_md5:-$(md5_of "$dev" 0 "$size" direct)}
step "nvme disconnect -n $nqn"
must "nvme disconnect" nvme disconnect -n "$nqn"
b=$(md5_of "$backing" 0 "$size")
[ "$a" = "$b" ] || fail "backing file md5 $b != device md5 $a"
log "backing file matches device ($b)"

nvmet_teardown "$nqn"
