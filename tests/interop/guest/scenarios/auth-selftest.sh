#!/bin/sh
# auth-selftest: DH-HMAC-CHAP between the Linux kernel's own NVMe/TCP host and
# target over the guest's loopback; proves the guest kernel and nvme-cli can
# authenticate before nearstore is involved. Needs a kernel with NVME_AUTH and
# NVME_TARGET_AUTH (the trixie guest).
#
# nvmet exports a file-backed namespace and admits only this guest's host NQN.
# For each case (hash, DH group, uni- or bidirectional) it sets the host's
# dhchap_hash, dhchap_dhgroup, dhchap_key (and dhchap_ctrl_key), then:
#   - nvme connect --dhchap-secret (--dhchap-ctrl-secret) with the right
#     secrets connects, the namespace appears, 1 MiB written with O_DIRECT
#     reads back the same, disconnect;
#   - a wrong host secret is refused;
#   - bidirectional: the right host secret but a wrong controller secret is
#     refused (the host rejects the controller).
# Each case prints INTEROP-VAL auth_N=HASH/DHGROUP/uni|bi:connected,refused[,ctrl-refused]
# and the kernel's NVMe messages of each attempt as INTEROP-DMESG lines
# (dynamic debug on: the selected hash and DH group, each step).
#
# Parameters: nqn= ns_size_mb= (default 16) target_port= (default 4420)
#             host_key= ctrl_key= (DHHC-1 secrets; default: nvme gen-dhchap-key)
#             kato= (nvme connect --keep-alive-tmo, default 30: under TCG the
#                    kernel's DH computations take seconds with no command sent)
#             cases= (comma-separated HASH/DHGROUP/uni|bi; default
#                     sha256/null/uni,sha256/null/bi,sha256/ffdhe2048/uni,sha512/ffdhe2048/bi)
. /usr/lib/interop/lib.sh

nqn=$(param nqn nqn.2024-01.io.nearstore:interop-auth-selftest)
size_mb=$(param ns_size_mb 16)
port=$(param target_port 4420)
cases=$(param cases sha256/null/uni,sha256/null/bi,sha256/ffdhe2048/uni,sha512/ffdhe2048/bi)
backing=/tmp/nvmet-ns1.img
hostnqn=$(cat /etc/nvme/hostnqn)

[ -d /sys/module/nvme_auth ] || fail "kernel $(uname -r) has no nvme_auth module loaded (NVME_AUTH; boot the trixie kernel)"
host_key=$(param host_key "")
[ -n "$host_key" ] || host_key=$(nvme gen-dhchap-key -n "$hostnqn" -m 1) || fail "nvme gen-dhchap-key"
ctrl_key=$(param ctrl_key "")
[ -n "$ctrl_key" ] || ctrl_key=$(nvme gen-dhchap-key -n "$nqn" -m 2 -l 48) || fail "nvme gen-dhchap-key (controller)"
# Wrong secrets of the same form and length.
wrong_key=$(nvme gen-dhchap-key -n "$hostnqn" -m 1) || fail "nvme gen-dhchap-key (wrong)"
wrong_ctrl=$(nvme gen-dhchap-key -n "$nqn" -m 2 -l 48) || fail "nvme gen-dhchap-key (wrong controller)"
val host_nqn "$hostnqn"
val host_key "$host_key"
val ctrl_key "$ctrl_key"

step "nvmet target: $nqn on 127.0.0.1:$port, only $hostnqn, DH-HMAC-CHAP"
nvmet_setup "$nqn" "$backing" "$size_mb" 127.0.0.1 "$port"
nvmet_auth_host "$nqn" "$hostnqn"
auth_debug
auth_dmesg_mark

# connect_auth SECRET [CTRLSECRET]: nvme connect with DH-HMAC-CHAP; prints
# nvme-cli's output, returns its status.
connect_auth() {
	_out=$(timeout 120 nvme connect -t tcp -a 127.0.0.1 -s "$port" -n "$nqn" \
		--keep-alive-tmo="$(param kato 30)" \
		--dhchap-secret="$1" ${2:+--dhchap-ctrl-secret="$2"} 2>&1)
	_rc=$?
	echo "$_out" | sed 's/^/nvme-cli: /'
	return $_rc
}

# no_controller: fail unless no controller of $nqn is left.
no_controller() {
	for _c in /sys/class/nvme/nvme*; do
		[ -e "$_c/subsysnqn" ] || continue
		[ "$(cat "$_c/subsysnqn")" != "$nqn" ] || fail "$1: a controller of $nqn exists after a refused connect"
	done
}

n=0
for c in $(echo "$cases" | tr ',' ' '); do
	n=$((n + 1))
	hash=${c%%/*}
	rest=${c#*/}
	group=${rest%%/*}
	dir=${rest#*/}
	ck=
	[ "$dir" = bi ] && ck=$ctrl_key
	nvmet_auth_set "$hostnqn" "hmac($hash)" "$group" "$host_key" "$ck"
	result=

	step "case $n ($c): right secret${ck:+s}"
	connect_auth "$host_key" "$ck" || { auth_dmesg; fail "case $n ($c): nvme connect with the right secret failed (exit $_rc)"; }
	dev=$(nvme_ns_dev "$nqn" 30) || { auth_dmesg; fail "case $n ($c): namespace did not appear"; }
	auth_roundtrip "$dev"
	must "nvme disconnect" nvme disconnect -n "$nqn" >/dev/null
	auth_dmesg
	result=connected

	step "case $n ($c): wrong host secret"
	if connect_auth "$wrong_key" "$ck"; then
		nvme disconnect -n "$nqn" >/dev/null
		auth_dmesg
		fail "case $n ($c): nvme connect with a wrong host secret succeeded"
	fi
	val "auth_${n}_refused_exit" "$_rc"
	auth_dmesg
	no_controller "case $n ($c) wrong host secret"
	result=$result,refused

	if [ -n "$ck" ]; then
		step "case $n ($c): wrong controller secret"
		if connect_auth "$host_key" "$wrong_ctrl"; then
			nvme disconnect -n "$nqn" >/dev/null
			auth_dmesg
			fail "case $n ($c): nvme connect expecting a wrong controller secret succeeded"
		fi
		val "auth_${n}_ctrl_refused_exit" "$_rc"
		auth_dmesg
		no_controller "case $n ($c) wrong controller secret"
		result=$result,ctrl-refused
	fi
	val "auth_$n" "$hash/$group/$dir:$result"
done
val auth_cases "$n"
nvmet_teardown "$nqn"
