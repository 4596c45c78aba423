#!/bin/sh
# auth-host: the guest's kernel NVMe/TCP host authenticates with DH-HMAC-CHAP
# to targets on the host machine (nearstore's), reached at 10.0.2.2. Needs
# a kernel with NVME_AUTH (the trixie guest). The hash and DH group are the
# target's choice: give several ports, one target configured per choice.
#
# For each port in ports=, in this order:
#   1. nvme connect --dhchap-secret=host_key: the namespace appears; 1 MiB
#      written with O_DIRECT at 1 MiB + 2 MiB*(i-1) reads back the same
#      (INTEROP-MD5 of it); disconnect;
#   2. with ctrl_key=: the same, bidirectional (--dhchap-ctrl-secret), at
#      2 MiB + 2 MiB*(i-1);
#   3. a wrong host secret is refused, and no controller is left;
#   4. with ctrl_key=: the right host secret but a wrong controller secret is
#      refused (the kernel host rejects the target's response).
# Prints INTEROP-VAL authhost_PORT=connected[,bi-connected],refused[,ctrl-refused],
# the exit status of each refused nvme connect, and the kernel's NVMe
# messages of each attempt as INTEROP-DMESG lines (dynamic debug on: the
# hash and DH group the target selected, each step).
#
# Parameters: nqn= (required) ports= (required, comma-separated)
#             target_addr= (default 10.0.2.2) host_key= (required)
#             ctrl_key= (optional) hostnqn= (see /init: the NQN the targets admit)
#             kato= (nvme connect --keep-alive-tmo, default 30; see below)
#
# The kernel host sends no command while it computes its DH values, and
# under TCG that takes seconds (ffdhe4096: about 5 s, when the kernel's
# default KATO is 5 s): a longer KATO keeps a target's keep-alive timer
# from ending the association in the middle of an authentication.
. /usr/lib/interop/lib.sh

addr=$(param target_addr 10.0.2.2)
ports=$(param ports "")
nqn=$(param nqn "")
host_key=$(param host_key "")
ctrl_key=$(param ctrl_key "")
hostnqn=$(cat /etc/nvme/hostnqn)
[ -n "$nqn" ] && [ -n "$ports" ] && [ -n "$host_key" ] || fail "auth-host needs nqn=, ports= and host_key="
[ -d /sys/module/nvme_auth ] || fail "kernel $(uname -r) has no nvme_auth module loaded (NVME_AUTH; boot the trixie kernel)"
# Wrong secrets of the same form as the right ones.
wrong_key=$(nvme gen-dhchap-key -n "$hostnqn" -m 1) || fail "nvme gen-dhchap-key"
wrong_ctrl=$(nvme gen-dhchap-key -n "$nqn" -m 1) || fail "nvme gen-dhchap-key (controller)"
auth_debug
auth_dmesg_mark

# connect_auth PORT SECRET [CTRLSECRET]: nvme connect with DH-HMAC-CHAP;
# prints nvme-cli's output, returns its status in $_rc.
connect_auth() {
	_out=$(timeout 120 nvme connect -t tcp -a "$addr" -s "$1" -n "$nqn" --ctrl-loss-tmo=5 \
		--keep-alive-tmo="$(param kato 30)" \
		--dhchap-secret="$2" ${3:+--dhchap-ctrl-secret="$3"} 2>&1)
	_rc=$?
	echo "$_out" | sed 's/^/nvme-cli: /'
	return $_rc
}

no_controller() {
	for _c in /sys/class/nvme/nvme*; do
		[ -e "$_c/subsysnqn" ] || continue
		[ "$(cat "$_c/subsysnqn")" != "$nqn" ] || fail "$1: a controller of $nqn exists after a refused connect"
	done
}

# connected_roundtrip WHAT OFFSET: the namespace appears, 1 MiB round-trips, disconnect.
connected_roundtrip() {
	dev=$(nvme_ns_dev "$nqn" 30) || { auth_dmesg; fail "$1: namespace of $nqn did not appear"; }
	auth_roundtrip "$dev" "$2"
	must "$1: nvme disconnect" nvme disconnect -n "$nqn" >/dev/null
	auth_dmesg
}

i=0
for port in $(echo "$ports" | tr ',' ' '); do
	base=$((i * 2 * MIB + MIB))
	i=$((i + 1))
	step "port $port: nvme connect --dhchap-secret"
	connect_auth "$port" "$host_key" || { auth_dmesg; fail "port $port: nvme connect with the right secret failed (exit $_rc)"; }
	connected_roundtrip "port $port" "$base"
	result=connected

	if [ -n "$ctrl_key" ]; then
		step "port $port: nvme connect --dhchap-secret --dhchap-ctrl-secret"
		connect_auth "$port" "$host_key" "$ctrl_key" || { auth_dmesg; fail "port $port: bidirectional nvme connect with the right secrets failed (exit $_rc)"; }
		connected_roundtrip "port $port (bidirectional)" $((base + MIB))
		result=$result,bi-connected
	fi

	step "port $port: wrong host secret"
	if connect_auth "$port" "$wrong_key"; then
		nvme disconnect -n "$nqn" >/dev/null
		auth_dmesg
		fail "port $port: nvme connect with a wrong host secret succeeded"
	fi
	val "authhost_${port}_refused_exit" "$_rc"
	auth_dmesg
	no_controller "port $port wrong host secret"
	result=$result,refused

	if [ -n "$ctrl_key" ]; then
		step "port $port: wrong controller secret"
		if connect_auth "$port" "$host_key" "$wrong_ctrl"; then
			nvme disconnect -n "$nqn" >/dev/null
			auth_dmesg
			fail "port $port: nvme connect expecting a wrong controller secret succeeded"
		fi
		val "authhost_${port}_ctrl_refused_exit" "$_rc"
		auth_dmesg
		no_controller "port $port wrong controller secret"
		result=$result,ctrl-refused
	fi
	val "authhost_$port" "$result"
done
