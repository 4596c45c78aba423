#!/bin/sh
# kv-host: the guest's kernel NVMe/TCP host and nvme-cli against a nearstore
# target with an NVM namespace (NSID 1) and a Key Value namespace (NSID 2,
# command set 01h), reached at 10.0.2.2.
#
# The kernel must connect, list and use namespace 1 as before, and take
# namespace 2 for what it is: a namespace of a command set it has no block
# driver for (Linux 6.1 and 6.12: a generic character device /dev/ngXnY
# only).
# nvme-cli's views of namespace 2 (descriptors, command set independent
# Identify, the KV Identify through admin-passthru, the KV page of the
# Commands Supported and Effects log, the I/O command set combinations)
# are printed as INTEROP-VAL lines for the host side to decode, and the KV
# commands run through io-passthru on the character device.
#
# Parameters: target_addr= (default 10.0.2.2) target_port= (default 4420)
#             nqn= (required)
#             key1=CDW2,CDW3,CDW14,CDW15,LEN  a key the host side stored;
#                  val1_len= the length of its value
#             key2=...  a key this guest stores (1000 random bytes)
#             key3=...  a key nobody stores
# Every key is given as the command dwords that carry it (nvme/kv.go).
#
# Values (INTEROP-VAL): ns1_nsze, list_ns1, kv_chardev, kv_idns_cns0_exit
# and _status, kv_idns_hex (CNS 05h CSI 01h, 96 bytes), kv_indep_json,
# kv_descs_json, iocs, kv_list_ns, nvm_list_ns, kv_effects_hex (2048 bytes),
# kv_retrieve1_md5, kv_retrieve1_result, kv_store2_md5, kv_list_hex (256
# bytes), and the exit status and NVMe status (0xNNNN, DNR included) of the
# commands that must fail: kv_exist_missing_*, kv_store2_again_*,
# kv_deleted_retrieve_*.
# Kernel messages about NVMe are printed as INTEROP-DMESG lines.
. /usr/lib/interop/lib.sh

addr=$(param target_addr 10.0.2.2)
port=$(param target_port 4420)
nqn=$(param nqn "")
[ -n "$nqn" ] || fail "kv-host needs nqn= on the kernel command line"

# hexof FILE LEN: the first LEN bytes of FILE as one line of hex.
hexof() { head -c "$2" "$1" | od -An -v -tx1 | tr -d ' \n'; }

# oneline: a command's output on one line without spaces (INTEROP-VAL takes
# one word).
oneline() { tr -d ' \t\n'; }

# kv_cmd KEY OPCODE CDW11HI [nvme io-passthru options...]: a KV command on
# namespace 2 through the character device, the key put in CDW2-3 and
# CDW14-15 and its length in CDW11 bits 7:0 (options in bits 15:8).
# nvme-cli's stderr goes to /tmp/kv.err; the exit status is returned.
kv_cmd() {
	_k=$1 _op=$2 _opt=$3
	shift 3
	_c2=$(echo "$_k" | cut -d, -f1) _c3=$(echo "$_k" | cut -d, -f2)
	_c14=$(echo "$_k" | cut -d, -f3) _c15=$(echo "$_k" | cut -d, -f4) _kl=$(echo "$_k" | cut -d, -f5)
	nvme io-passthru "$kvdev" --namespace-id=2 --opcode="$_op" --cdw2="$_c2" --cdw3="$_c3" \
		--cdw14="$_c14" --cdw15="$_c15" --cdw11=$((_kl | _opt << 8)) "$@" 2>/tmp/kv.err
}

# ns_block_dev NQN NSID TIMEOUT_S: print /dev/nvmeXnY of namespace NSID of
# subsystem NQN. The kernel numbers block devices in the order it sets
# namespaces up, not by NSID: Linux 6.12 scans them in parallel, so NSID 1
# may be nvme0n2 when the KV namespace took instance 1 (lib.sh's nvme_ns_dev
# takes n1 for NSID 1).
ns_block_dev() {
	_i=0
	while [ $_i -lt $(($3 * 10)) ]; do
		for _b in /sys/block/nvme*; do
			_n=${_b##*/}
			case $_n in *c*) continue ;; esac # one path of a multipath namespace
			[ "$(cat "$_b/nsid" 2>/dev/null)" = "$2" ] || continue
			[ "$(cat "$_b/device/subsysnqn" 2>/dev/null)" = "$1" ] || continue
			if [ -b "/dev/$_n" ] && [ "$(cat "$_b/size")" != 0 ]; then
				echo "/dev/$_n"
				return 0
			fi
		done
		sleep 0.1
		_i=$((_i + 1))
	done
	return 1
}

# kv_status: the status nvme-cli reported for the last kv_cmd (e.g. 0x4187),
# or none.
kv_status() { sed -n 's/^NVMe status:.*(\(0x[0-9a-fA-F]*\)).*/\1/p' /tmp/kv.err | grep . || echo none; }

dmesg -c >/dev/null
nvme_discover_connect "$addr" "$port" "$nqn"
# block_devs: the NVMe block devices (paths included) with their NSIDs.
block_devs() {
	for _b in /sys/block/nvme*; do
		[ -e "$_b" ] && echo "${_b##*/} nsid=$(cat "$_b/nsid" 2>/dev/null) size=$(cat "$_b/size") dev=$([ -b "/dev/${_b##*/}" ] && echo yes || echo no)"
	done | tr '\n' ' '
}
dev=$(ns_block_dev "$nqn" 1 30) || fail "namespace 1 of $nqn did not appear; block devices: $(block_devs)"
log "block devices: $(block_devs)"
ctrl=
for c in /sys/class/nvme/nvme*; do
	[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$nqn" ] && ctrl=/dev/${c##*/}
done
[ -n "$ctrl" ] || fail "no controller of $nqn"
log "namespace 1 is $dev, controller $ctrl"

step "nvme list"
out=$(nvme list 2>&1) || fail "nvme list failed: $out"
echo "$out"
case $out in *"$dev"*) val list_ns1 1 ;; *) fail "nvme list does not show $dev" ;; esac

step "nvme id-ns $dev (namespace 1)"
out=$(nvme id-ns "$dev" 2>&1) || fail "nvme id-ns $dev failed: $out"
val ns1_nsze "$(echo "$out" | sed -n 's/^nsze *: *//p')"

# The kernel's scan of namespace 2 logs at info level, off the console.
step "the kernel's view of namespace 2"
sleep 1
auth_dmesg

kvdev=
i=0
while [ -z "$kvdev" ] && [ $i -lt 100 ]; do
	for g in /dev/ng*; do
		[ -c "$g" ] || continue
		id=$(nvme get-ns-id "$g" 2>/dev/null | sed -n 's/.*[^0-9]\([0-9][0-9]*\)$/\1/p')
		[ "$id" = 2 ] && kvdev=$g
	done
	[ -n "$kvdev" ] || sleep 0.1
	i=$((i + 1))
done
val kv_chardev "${kvdev:-none}"
ls -l /dev/ng* /dev/nvme* 2>&1
[ -n "$kvdev" ] || fail "no character device for namespace 2"

step "nvme-cli on namespace 2"
out=$(nvme id-ns "$kvdev" -n 2 2>&1)
val kv_idns_cns0_exit $?
echo "$out"
val kv_idns_cns0_status "$(echo "$out" | sed -n 's/^NVMe status:.*(\(0x[0-9a-fA-F]*\)).*/\1/p')"
must "nvme admin-passthru identify CNS 05h CSI 01h" nvme admin-passthru "$ctrl" --opcode=0x06 --namespace-id=2 \
	--cdw10=5 --cdw11=0x01000000 --data-len=4096 --read --raw-binary >/tmp/idkv 2>/tmp/idkv.err
[ "$(wc -c </tmp/idkv)" = 4096 ] || fail "identify CNS 05h: $(wc -c </tmp/idkv) bytes"
val kv_idns_hex "$(hexof /tmp/idkv 96)"
out=$(nvme cmdset-ind-id-ns "$ctrl" -n 2 -o json 2>&1) || fail "nvme cmdset-ind-id-ns failed: $out"
val kv_indep_json "$(echo "$out" | oneline)"
out=$(nvme ns-descs "$ctrl" -n 2 -o json 2>&1) || fail "nvme ns-descs failed: $out"
val kv_descs_json "$(echo "$out" | oneline)"
out=$(nvme id-iocs "$ctrl" 2>&1) || fail "nvme id-iocs failed: $out"
val iocs "$(echo "$out" | oneline)"
out=$(nvme list-ns "$ctrl" --csi=1 2>&1) || fail "nvme list-ns --csi=1 failed: $out"
val kv_list_ns "$(echo "$out" | oneline)"
out=$(nvme list-ns "$ctrl" --csi=0 2>&1) || fail "nvme list-ns --csi=0 failed: $out"
val nvm_list_ns "$(echo "$out" | oneline)"
must "nvme effects-log --csi=1" nvme effects-log "$ctrl" --csi=1 --raw-binary >/tmp/effects 2>/tmp/effects.err
[ "$(wc -c </tmp/effects)" -ge 2048 ] || fail "effects log: $(wc -c </tmp/effects) bytes"
val kv_effects_hex "$(hexof /tmp/effects 2048)"

step "KV commands through nvme io-passthru on $kvdev"
key1=$(param key1 "") key2=$(param key2 "") key3=$(param key3 "")
[ -n "$key1" ] && [ -n "$key2" ] && [ -n "$key3" ] || fail "kv-host needs key1=, key2= and key3="
# Retrieve (02h) what the host side stored: DW0 is the value's length.
kv_cmd "$key1" 0x02 0 --read --data-len=4096 --cdw10=4096 --raw-binary >/tmp/r1 ||
	fail "retrieve key1: $(cat /tmp/kv.err)"
cat /tmp/kv.err
val kv_retrieve1_result "$(sed -n 's/.*result: *\(0x[0-9a-fA-F]*\).*/\1/p' /tmp/kv.err)"
val kv_retrieve1_md5 "$(head -c "$(param val1_len 0)" /tmp/r1 | md5sum | cut -d' ' -f1)"
# Store (01h) 1000 random bytes under key2, read them back.
must "make value" dd if=/dev/urandom of=/tmp/v2 bs=1000 count=1 status=none
kv_cmd "$key2" 0x01 0 --write --data-len=1000 --cdw10=1000 --input-file=/tmp/v2 || fail "store key2: $(cat /tmp/kv.err)"
val kv_store2_md5 "$(md5sum </tmp/v2 | cut -d' ' -f1)"
kv_cmd "$key2" 0x14 0 || fail "exist key2: $(cat /tmp/kv.err)"
kv_cmd "$key3" 0x14 0
val kv_exist_missing_exit $?
val kv_exist_missing_status "$(kv_status)"
kv_cmd "$key2" 0x02 0 --read --data-len=4096 --cdw10=4096 --raw-binary >/tmp/r2 || fail "retrieve key2: $(cat /tmp/kv.err)"
[ "$(head -c 1000 /tmp/r2 | md5sum)" = "$(md5sum </tmp/v2)" ] || fail "key2 read back differs"
# Store with "must not exist" (option bit 1) of a key that exists: Key Exists.
kv_cmd "$key2" 0x01 2 --write --data-len=1000 --cdw10=1000 --input-file=/tmp/v2
val kv_store2_again_exit $?
val kv_store2_again_status "$(kv_status)"
# List (06h) from the first key.
must "list" sh -c "nvme io-passthru $kvdev --namespace-id=2 --opcode=0x06 --read --data-len=4096 --cdw10=4096 --raw-binary >/tmp/list 2>/tmp/kv.err"
val kv_list_hex "$(hexof /tmp/list 256)"
# Delete (10h) key1; a Retrieve of it then fails.
kv_cmd "$key1" 0x10 0 || fail "delete key1: $(cat /tmp/kv.err)"
kv_cmd "$key1" 0x02 0 --read --data-len=4096 --cdw10=4096 --raw-binary >/dev/null
val kv_deleted_retrieve_exit $?
val kv_deleted_retrieve_status "$(kv_status)"

step "block I/O on namespace 1 still works"
auth_roundtrip "$dev" "$MIB"
auth_roundtrip "$dev" $((8 * MIB))
out=$(nvme list 2>&1) || fail "nvme list after the KV commands failed: $out"
must "nvme id-ns $dev again" nvme id-ns "$dev" >/dev/null

step "kernel log"
msgs=$(dmesg -c)
echo "$msgs" | grep -iE 'nvme' | sed 's/^/INTEROP-DMESG /'
errs=$(echo "$msgs" | grep -E "nvme.*(I/O Error|I/O error)|I/O error, dev nvme" || true)
[ -z "$errs" ] || fail "the kernel logged NVMe I/O errors: $(echo "$errs" | head -3)"

step "nvme disconnect -n $nqn"
must "nvme disconnect" nvme disconnect -n "$nqn"
