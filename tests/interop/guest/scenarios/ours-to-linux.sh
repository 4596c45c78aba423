#!/bin/sh
# ours-to-linux: the guest serves as a Linux kernel NVMe/TCP target (nvmet-tcp,
# file-backed namespace on tmpfs with buffered_io=1) for a host on the host
# machine, which reaches it through a QEMU hostfwd port to guest port 4420.
#
# Prints INTEROP-READY once serving, then waits. The host ends the run either
# by killing QEMU or, to get a verdict, through the control port (4421):
# one command line per connection, answered with one line:
#   ping             -> OK pong
#   md5 OFFSET LEN   -> OK <md5 of the backing file's bytes>   (also logged)
#   stop             -> OK stopping       (guest prints PASS and powers off)
#   auth HASH GROUP  -> OK ...  with auth_host=: nvmet's dhchap_hash (sha256,
#                       sha384, sha512) and dhchap_dhgroup (null, ffdhe2048
#                       ... ffdhe8192) for that host's next connections
#   dmesg            -> OK N  the kernel's NVMe messages since the last
#                       dmesg command, as N INTEROP-DMESG console lines
#
# Parameters: nqn= (default nqn.2024-01.io.nearstore:interop-linux-target)
#             ns_size_mb= (default 256) target_port= (default 4420)
#             ctl_port= (default 4421) hold_s= (max seconds to wait; 3600)
#             auth_host= (a host NQN: admit only it, with DH-HMAC-CHAP; needs
#                 the trixie kernel) dhchap_key= dhchap_ctrl_key= (DHHC-1
#                 secrets; the controller secret allows bidirectional)
#                 dhchap_hash= (default sha256) dhchap_dhgroup= (default null)
. /usr/lib/interop/lib.sh

nqn=$(param nqn nqn.2024-01.io.nearstore:interop-linux-target)
size_mb=$(param ns_size_mb 256)
port=$(param target_port 4420)
ctl_port=$(param ctl_port 4421)
hold=$(param hold_s 3600)
backing=/tmp/nvmet-ns1.img

nvmet_setup "$nqn" "$backing" "$size_mb" 0.0.0.0 "$port"
echo "$backing" >/run/interop-backing
auth_host=$(param auth_host "")
if [ -n "$auth_host" ]; then
	nvmet_auth_host "$nqn" "$auth_host"
	nvmet_auth_set "$auth_host" "hmac($(param dhchap_hash sha256))" "$(param dhchap_dhgroup null)" \
		"$(param dhchap_key "")" "$(param dhchap_ctrl_key "")"
	echo "$auth_host" >/run/interop-auth-host
	auth_debug
fi

nc -ll -p "$ctl_port" -e /usr/bin/interop-ctl &
val nqn "$nqn"
val port "$port"
val ns_size "$((size_mb * MIB))"
val ctl_port "$ctl_port"
echo "INTEROP-READY"

t=0
while [ ! -e /run/interop-stop ]; do
	[ $t -lt $((hold * 10)) ] || fail "no stop command within hold_s=$hold seconds"
	sleep 0.1
	t=$((t + 1))
done
log "stop requested by the host"
nvmet_teardown "$nqn"
