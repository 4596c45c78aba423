#!/bin/sh
# auth-host: the guest's kernel NVMe/TCP host authenticates with DH-HMAC-CHAP
# to targets on the host machine (nearstore's), reached at 10.0.2.2. Needs
# a kernel with NVME_AUTH (the trixie guest). The hash and DH group are the
# target's choice: give several ports, one target configured per choice.
#
# For the i-th port (from 0) of ports=, auth_attempts (lib.sh) with the
# round-trips at 1 MiB + 2 MiB*i (INTEROP-MD5 of each): the right secret
# connects and moves data, and with ctrl_key= bidirectionally too; a wrong
# host secret, and with ctrl_key= a wrong controller secret, are refused.
# Prints INTEROP-VAL auth_PORT=connected[,bi-connected],refused[,ctrl-refused],
# the exit status of each refused nvme connect, and the kernel's NVMe
# messages of each attempt as INTEROP-DMESG lines (dynamic debug on: the
# hash and DH group the target selected, each step).
#
# Parameters: nqn= (required) ports= (required, comma-separated)
#             target_addr= (default 10.0.2.2) host_key= (required)
#             ctrl_key= (optional) hostnqn= (see /init: the NQN the targets admit)
#             kato= (see auth_connect in lib.sh)
. /usr/lib/interop/lib.sh

addr=$(param target_addr 10.0.2.2)
ports=$(param ports "")
nqn=$(param nqn "")
host_key=$(param host_key "")
ctrl_key=$(param ctrl_key "")
[ -n "$nqn" ] && [ -n "$ports" ] && [ -n "$host_key" ] || fail "auth-host needs nqn=, ports= and host_key="
[ -d /sys/module/nvme_auth ] || fail "kernel $(uname -r) has no nvme_auth module loaded (NVME_AUTH; boot the trixie kernel)"
auth_debug
auth_dmesg_mark

i=0
for port in $(echo "$ports" | tr ',' ' '); do
	step "target on port $port"
	auth_attempts "$port" "$addr" "$port" "$nqn" $((i * 2 * MIB + MIB)) "$host_key" "$ctrl_key"
	i=$((i + 1))
done
