#!/bin/sh
# auth-selftest: DH-HMAC-CHAP between the Linux kernel's own NVMe/TCP host and
# target over the guest's loopback; proves the guest kernel and nvme-cli can
# authenticate before nearstore is involved. Needs a kernel with NVME_AUTH and
# NVME_TARGET_AUTH (the trixie guest).
#
# nvmet exports a file-backed namespace and admits only this guest's host NQN.
# For each case (hash and DH group) it sets the host's dhchap_hash,
# dhchap_dhgroup, dhchap_key and dhchap_ctrl_key, then runs auth_attempts
# (lib.sh): the right secrets connect and move data, uni- and
# bidirectionally; a wrong host secret and a wrong controller secret are
# refused. Each case prints INTEROP-VAL auth_N=connected,bi-connected,refused,ctrl-refused
# and the kernel's NVMe messages of each attempt as INTEROP-DMESG lines
# (dynamic debug on: the secrets, the selected hash and DH group, each step).
#
# Parameters: nqn= ns_size_mb= (default 16) target_port= (default 4420)
#             host_key= ctrl_key= (DHHC-1 secrets; default: nvme gen-dhchap-key)
#             cases= (comma-separated HASH/DHGROUP; default
#                     sha256/null,sha512/ffdhe2048)
#             kato= (see auth_connect in lib.sh)
. /usr/lib/interop/lib.sh

nqn=$(param nqn nqn.2024-01.io.nearstore:interop-auth-selftest)
size_mb=$(param ns_size_mb 16)
port=$(param target_port 4420)
cases=$(param cases sha256/null,sha512/ffdhe2048)
backing=/tmp/nvmet-ns1.img
hostnqn=$(cat /etc/nvme/hostnqn)

[ -d /sys/module/nvme_auth ] || fail "kernel $(uname -r) has no nvme_auth module loaded (NVME_AUTH; boot the trixie kernel)"
host_key=$(param host_key "")
[ -n "$host_key" ] || host_key=$(nvme gen-dhchap-key -n "$hostnqn" -m 1) || fail "nvme gen-dhchap-key"
ctrl_key=$(param ctrl_key "")
[ -n "$ctrl_key" ] || ctrl_key=$(nvme gen-dhchap-key -n "$nqn" -m 2 -l 48) || fail "nvme gen-dhchap-key (controller)"
val host_nqn "$hostnqn"
val host_key "$host_key"
val ctrl_key "$ctrl_key"

step "nvmet target: $nqn on 127.0.0.1:$port, only $hostnqn, DH-HMAC-CHAP"
nvmet_setup "$nqn" "$backing" "$size_mb" 127.0.0.1 "$port"
nvmet_auth_host "$nqn" "$hostnqn"
auth_debug
auth_dmesg_mark

n=0
for c in $(echo "$cases" | tr ',' ' '); do
	n=$((n + 1))
	nvmet_auth_set "$hostnqn" "hmac(${c%%/*})" "${c#*/}" "$host_key" "$ctrl_key"
	step "case $n: $c"
	auth_attempts "$n" 127.0.0.1 "$port" "$nqn" $(((n - 1) * 2 * MIB)) "$host_key" "$ctrl_key"
done
val auth_cases "$n"
nvmet_teardown "$nqn"
