# lib.sh — helpers shared by /init and the scenario scripts (busybox ash).
#
# Console protocol (parsed by the Go harness; one marker per line):
#   INTEROP-STEP: <text>                progress
#   INTEROP-VAL <key>=<value>           a value for the host side
#   INTEROP-MD5 <offset> <len> <md5>    md5 of bytes [offset, offset+len) of the namespace
#   INTEROP-MARKER <offset> <len> <md5> <text>   the marker block written at offset
#   INTEROP-READY                       target side is serving (ours-to-linux)
#   INTEROP-RESULT: PASS | FAIL <reason>   printed once by /init

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
FAIL_FILE=/run/interop-fail
MIB=1048576

log() { echo "interop: $*"; }
step() { echo "INTEROP-STEP: $* (t=$(uptime_s)s)"; }
val() { echo "INTEROP-VAL $1=$2"; }

# fail REASON: record the reason for /init and stop the scenario.
fail() {
	echo "$*" >"$FAIL_FILE"
	log "FAIL: $*"
	exit 1
}

# must DESCRIPTION CMD...: run CMD, fail with DESCRIPTION if it fails.
must() {
	_desc=$1
	shift
	"$@" || fail "$_desc (exit $?)"
}

# param NAME DEFAULT: value of NAME=... on the kernel command line.
param() {
	for _w in $(cat /proc/cmdline); do
		case $_w in
		"$1"=*)
			echo "${_w#*=}"
			return
			;;
		esac
	done
	echo "$2"
}

uptime_s() { cut -d' ' -f1 /proc/uptime; }

# md5_of FILE OFFSET LEN [iflag]: md5 of a byte range (GNU dd; direct if iflag=direct).
md5_of() {
	_flags=skip_bytes,count_bytes
	[ -n "${4:-}" ] && _flags="$_flags,$4"
	dd if="$1" bs=$MIB skip="$2" count="$3" iflag="$_flags" status=none | md5sum | cut -d' ' -f1
}

# --- Linux kernel target (nvmet) ------------------------------------------------

# nvmet_setup NQN FILE SIZE_MIB ADDR PORT: export FILE (created sparse, on
# tmpfs, so buffered_io=1) as namespace 1 of subsystem NQN on tcp ADDR:PORT.
nvmet_setup() {
	_nqn=$1 _file=$2 _size=$3 _addr=$4 _port=$5
	_cfs=/sys/kernel/config/nvmet
	[ -d $_cfs ] || fail "nvmet configfs missing (nvmet module not loaded?)"
	must "create backing file" truncate -s "${_size}M" "$_file"
	_s=$_cfs/subsystems/$_nqn
	must "mkdir subsystem $_nqn" mkdir "$_s"
	echo 1 >"$_s/attr_allow_any_host" || fail "attr_allow_any_host"
	echo "NEARSTORE-IOP" >"$_s/attr_serial" 2>/dev/null || true
	must "mkdir namespace" mkdir "$_s/namespaces/1"
	printf '%s' "$_file" >"$_s/namespaces/1/device_path" || fail "device_path"
	echo 1 >"$_s/namespaces/1/buffered_io" || fail "buffered_io"
	echo 1 >"$_s/namespaces/1/enable" || fail "enable namespace"
	_p=$_cfs/ports/1
	must "mkdir port" mkdir "$_p"
	echo "$_addr" >"$_p/addr_traddr" || fail "addr_traddr"
	echo tcp >"$_p/addr_trtype" || fail "addr_trtype"
	echo ipv4 >"$_p/addr_adrfam" || fail "addr_adrfam"
	echo "$_port" >"$_p/addr_trsvcid" || fail "addr_trsvcid"
	must "link subsystem to port" ln -s "$_s" "$_p/subsystems/$_nqn"
	log "nvmet: $_nqn ns 1 = $_file (${_size} MiB, buffered) on tcp $_addr:$_port"
}

# nvmet_auth_host NQN HOSTNQN: admit only HOSTNQN to subsystem NQN (turns
# attr_allow_any_host off) and give it an empty DH-HMAC-CHAP configuration;
# nvmet_auth_set fills it in.
nvmet_auth_host() {
	_nqn=$1 _host=$2
	_cfs=/sys/kernel/config/nvmet
	_h=$_cfs/hosts/$_host
	[ -d "$_h" ] || must "mkdir host $_host" mkdir "$_h"
	[ -e "$_h/dhchap_key" ] || fail "nvmet has no dhchap_key (kernel $(uname -r) built without NVME_TARGET_AUTH?)"
	echo 0 >"$_cfs/subsystems/$_nqn/attr_allow_any_host" || fail "attr_allow_any_host=0"
	[ -e "$_cfs/subsystems/$_nqn/allowed_hosts/$_host" ] ||
		must "allow host $_host" ln -s "$_h" "$_cfs/subsystems/$_nqn/allowed_hosts/$_host"
}

# nvmet_auth_set HOSTNQN HASH DHGROUP KEY [CTRLKEY]: the DH-HMAC-CHAP
# configuration nvmet uses for HOSTNQN's next connections: HASH as in
# dhchap_hash (hmac(sha256), hmac(sha384), hmac(sha512)), DHGROUP as in
# dhchap_dhgroup (null, ffdhe2048 ... ffdhe8192), the DHHC-1 host secret,
# and the controller secret (empty: unidirectional).
nvmet_auth_set() {
	_h=/sys/kernel/config/nvmet/hosts/$1
	printf '%s' "$2" >"$_h/dhchap_hash" || fail "dhchap_hash=$2"
	printf '%s' "$3" >"$_h/dhchap_dhgroup" || fail "dhchap_dhgroup=$3"
	printf '%s' "$4" >"$_h/dhchap_key" || fail "dhchap_key"
	# An empty write clears the controller key (nvmet_auth_set_key).
	printf '%s' "${5:-}" >"$_h/dhchap_ctrl_key" || fail "dhchap_ctrl_key"
	log "nvmet: host $1: $2 $3 host key${5:+ + controller key}"
}

# auth_debug: put the kernel's NVMe authentication debug messages (selected
# hash and DH group, each step of the exchange) into dmesg. They stay off the
# console (printk level 4); auth_dmesg prints them.
auth_debug() {
	_c=/proc/dynamic_debug/control
	[ -w $_c ] || { mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null; _c=/sys/kernel/debug/dynamic_debug/control; }
	for _m in nvme_core nvme_auth nvmet nvme_fabrics; do
		echo "module $_m +p" >$_c 2>/dev/null || log "no dynamic debug for $_m"
	done
}

# auth_dmesg_mark / auth_dmesg: print (prefixed) the kernel messages about
# NVMe since the last mark. Both read and clear the kernel's ring buffer
# (dmesg -c), so debug output that wraps it cannot shift what is printed.
auth_dmesg_mark() { dmesg -c >/dev/null; }
auth_dmesg() { dmesg -c | grep -iE 'nvme|auth|dhchap' | sed 's/^/INTEROP-DMESG /'; }

# auth_roundtrip DEV [OFFSET]: write 1 MiB of fresh random data with O_DIRECT
# at OFFSET (default 1 MiB), read it back and compare; print its INTEROP-MD5.
auth_roundtrip() {
	_o=${2:-$MIB}
	must "make pattern" dd if=/dev/urandom of=/tmp/pattern bs=$MIB count=1 status=none
	raw_write "$1" "$_o" $MIB $MIB 0
	raw_check "$1" "$_o" $MIB $MIB 0
	echo "INTEROP-MD5 $_o $MIB $(md5_of /tmp/pattern 0 $MIB)"
}

# auth_connect ADDR PORT NQN SECRET [CTRLSECRET]: nvme connect with
# DH-HMAC-CHAP; prints nvme-cli's output, leaves its status in _rc and
# returns it. The keep-alive timeout is kato= (default 30 s): the kernel host
# sends no command while it computes its DH values, which under TCG takes
# seconds (ffdhe4096: about 5 s, the kernel's default KATO), and a target
# may end the association when KATO passes without a command.
auth_connect() {
	_out=$(timeout 120 nvme connect -t tcp -a "$1" -s "$2" -n "$3" --ctrl-loss-tmo=5 \
		--keep-alive-tmo="$(param kato 30)" --dhchap-secret="$4" ${5:+--dhchap-ctrl-secret="$5"} 2>&1)
	_rc=$?
	echo "$_out" | sed 's/^/nvme-cli: /'
	return $_rc
}

# auth_no_controller NQN WHAT: fail unless no controller of NQN is left.
auth_no_controller() {
	for _c in /sys/class/nvme/nvme*; do
		[ -e "$_c/subsysnqn" ] || continue
		[ "$(cat "$_c/subsysnqn")" != "$1" ] || fail "$2: a controller of $1 exists after a refused connect"
	done
}

# auth_attempts WHAT ADDR PORT NQN OFFSET HOSTKEY [CTRLKEY]: the checks of
# one authenticating target, each attempt's kernel messages printed by
# auth_dmesg:
#   1. the right host secret connects, namespace 1 appears, 1 MiB
#      round-trips at OFFSET (auth_roundtrip), disconnect;
#   2. with CTRLKEY: the same, bidirectional, at OFFSET + 1 MiB;
#   3. a wrong host secret (same form) is refused and leaves no controller;
#   4. with CTRLKEY: the right host secret with a wrong controller secret
#      is refused (the kernel host rejects the target's response) likewise.
# Prints INTEROP-VAL auth_WHAT=connected[,bi-connected],refused[,ctrl-refused]
# and nvme-cli's exit status of each refusal (auth_WHAT_refused_exit,
# auth_WHAT_ctrl_refused_exit).
auth_attempts() {
	_aa_w=$1 _aa_a=$2 _aa_p=$3 _aa_n=$4 _aa_o=$5 _aa_hk=$6 _aa_ck=${7:-}
	_aa_wrong=$(nvme gen-dhchap-key -n "$(cat /etc/nvme/hostnqn)" -m 1) || fail "nvme gen-dhchap-key"
	_aa_wrongc=$(nvme gen-dhchap-key -n "$_aa_n" -m 2 -l 48) || fail "nvme gen-dhchap-key (controller)"

	step "$_aa_w: the right secret"
	auth_connect "$_aa_a" "$_aa_p" "$_aa_n" "$_aa_hk" || { auth_dmesg; fail "$_aa_w: nvme connect with the right secret failed (exit $_rc)"; }
	_aa_dev=$(nvme_ns_dev "$_aa_n" 30) || { auth_dmesg; fail "$_aa_w: namespace of $_aa_n did not appear"; }
	auth_roundtrip "$_aa_dev" "$_aa_o"
	must "$_aa_w: nvme disconnect" nvme disconnect -n "$_aa_n" >/dev/null
	auth_dmesg
	_aa_res=connected

	if [ -n "$_aa_ck" ]; then
		step "$_aa_w: the right secrets, bidirectional"
		auth_connect "$_aa_a" "$_aa_p" "$_aa_n" "$_aa_hk" "$_aa_ck" || { auth_dmesg; fail "$_aa_w: bidirectional nvme connect with the right secrets failed (exit $_rc)"; }
		_aa_dev=$(nvme_ns_dev "$_aa_n" 30) || { auth_dmesg; fail "$_aa_w: namespace of $_aa_n did not appear (bidirectional)"; }
		auth_roundtrip "$_aa_dev" $((_aa_o + MIB))
		must "$_aa_w: nvme disconnect" nvme disconnect -n "$_aa_n" >/dev/null
		auth_dmesg
		_aa_res=$_aa_res,bi-connected
	fi

	step "$_aa_w: a wrong host secret"
	if auth_connect "$_aa_a" "$_aa_p" "$_aa_n" "$_aa_wrong"; then
		nvme disconnect -n "$_aa_n" >/dev/null
		auth_dmesg
		fail "$_aa_w: nvme connect with a wrong host secret succeeded"
	fi
	val "auth_${_aa_w}_refused_exit" "$_rc"
	auth_dmesg
	auth_no_controller "$_aa_n" "$_aa_w: wrong host secret"
	_aa_res=$_aa_res,refused

	if [ -n "$_aa_ck" ]; then
		step "$_aa_w: a wrong controller secret"
		if auth_connect "$_aa_a" "$_aa_p" "$_aa_n" "$_aa_hk" "$_aa_wrongc"; then
			nvme disconnect -n "$_aa_n" >/dev/null
			auth_dmesg
			fail "$_aa_w: nvme connect expecting a wrong controller secret succeeded"
		fi
		val "auth_${_aa_w}_ctrl_refused_exit" "$_rc"
		auth_dmesg
		auth_no_controller "$_aa_n" "$_aa_w: wrong controller secret"
		_aa_res=$_aa_res,ctrl-refused
	fi
	val "auth_$_aa_w" "$_aa_res"
}

nvmet_teardown() {
	_nqn=$1
	_cfs=/sys/kernel/config/nvmet
	rm -f "$_cfs/subsystems/$_nqn/allowed_hosts/"* 2>/dev/null
	for _h in "$_cfs/hosts/"*; do [ -d "$_h" ] && rmdir "$_h" 2>/dev/null; done
	rm -f "$_cfs/ports/1/subsystems/$_nqn"
	rmdir "$_cfs/ports/1" 2>/dev/null
	echo 0 >"$_cfs/subsystems/$_nqn/namespaces/1/enable" 2>/dev/null
	rmdir "$_cfs/subsystems/$_nqn/namespaces/1" "$_cfs/subsystems/$_nqn" 2>/dev/null
	true
}

# --- Linux kernel host (nvme-tcp + nvme-cli) ------------------------------------

# nvme_discover_connect ADDR PORT NQN: discover, check NQN is offered, connect.
nvme_discover_connect() {
	_addr=$1 _port=$2 _nqn=$3
	step "nvme discover -t tcp -a $_addr -s $_port"
	_out=$(nvme discover -t tcp -a "$_addr" -s "$_port" 2>&1)
	_rc=$?
	echo "$_out"
	[ $_rc -eq 0 ] || fail "nvme discover failed (exit $_rc)"
	case $_out in
	*"$_nqn"*) ;;
	*) fail "discovery log does not list $_nqn" ;;
	esac
	step "nvme connect -t tcp -a $_addr -s $_port -n $_nqn"
	# A short controller-loss timeout makes I/O fail (and the scenario
	# report it) soon after the target goes away, instead of retrying for
	# the default 10 minutes.
	must "nvme connect" nvme connect -t tcp -a "$_addr" -s "$_port" -n "$_nqn" \
		--ctrl-loss-tmo="$(param ctrl_loss_tmo 15)"
}

# nvme_ns_dev NQN TIMEOUT_S: print /dev/nvmeXnY of namespace 1 of subsystem NQN.
nvme_ns_dev() {
	_nqn=$1 _t=$2 _i=0
	while [ $_i -lt $((_t * 10)) ]; do
		for _sub in /sys/class/nvme-subsystem/*; do
			[ -f "$_sub/subsysnqn" ] || continue
			[ "$(cat "$_sub/subsysnqn")" = "$_nqn" ] || continue
			for _ns in "$_sub"/nvme*n1 /sys/class/nvme/*/nvme*n1; do
				[ -e "$_ns" ] || continue
				case $_ns in /sys/class/nvme/*)
					# non-multipath kernels: namespace under the controller
					[ "$(cat "${_ns%/*}/subsysnqn" 2>/dev/null)" = "$_nqn" ] || continue ;;
				esac
				_dev=/dev/${_ns##*/}
				if [ -b "$_dev" ] && [ "$(cat "$_ns/size")" != 0 ]; then
					echo "$_dev"
					return 0
				fi
			done
		done
		sleep 0.1
		_i=$((_i + 1))
	done
	return 1
}

# --- the host-side workload --------------------------------------------------------

# raw_write/raw_check DEV DEVOFF LEN BS SRCOFF: write LEN bytes of /tmp/pattern (from
# SRCOFF) at DEVOFF with O_DIRECT in BS-sized transfers, then read back with
# O_DIRECT and compare.
raw_write() {
	_dev=$1 _off=$2 _len=$3 _bs=$4 _src=$5
	dd if=/tmp/pattern of="$_dev" bs="$_bs" skip="$_src" seek="$_off" count="$_len" \
		iflag=skip_bytes,count_bytes oflag=seek_bytes,direct conv=notrunc status=none ||
		fail "write $_len bytes at $_off (bs $_bs)"
}
raw_check() {
	_dev=$1 _off=$2 _len=$3 _bs=$4 _src=$5
	_want=$(md5_of /tmp/pattern "$_src" "$_len")
	_got=$(dd if="$_dev" bs="$_bs" skip="$_off" count="$_len" iflag=skip_bytes,count_bytes,direct status=none | md5sum | cut -d' ' -f1)
	[ "$_want" = "$_got" ] || fail "readback mismatch: $_len bytes at $_off (bs $_bs): want $_want got $_got"
}

# host_workload DEV: the Linux-host side of the interop check. Raw O_DIRECT
# writes/reads at several offsets and sizes, then ext4 (mkfs, mount, files,
# remount + verify, umount, e2fsck -fn), then a marker block in the tail MiB
# that the file system does not cover, then INTEROP-MD5 lines for the host.
host_workload() {
	dev=$1
	name=${dev#/dev/}
	lbs=$(cat /sys/block/"$name"/queue/logical_block_size)
	size=$(($(cat /sys/block/"$name"/size) * 512))
	val dev "$dev"
	val dev_size "$size"
	val lbs "$lbs"
	val max_hw_kb "$(cat /sys/block/"$name"/queue/max_hw_sectors_kb)"
	[ "$size" -ge $((32 * MIB)) ] || fail "namespace too small: $size bytes (need >= 32 MiB)"

	step "raw O_DIRECT I/O on $dev ($size bytes, lbs $lbs)"
	must "make pattern" dd if=/dev/urandom of=/tmp/pattern bs=$MIB count=8 status=none
	tail=$((size - MIB))
	# devoff len bs srcoff — disjoint ranges, small to multi-MiB transfers
	cases="0 4096 4096 0
12288 8192 4096 4096
65536 61440 61440 8192
$MIB $MIB $MIB 65536
$((2 * MIB + 4096)) $((2 * MIB)) 131072 $((3 * MIB))
$((8 * MIB)) $((8 * MIB)) $((4 * MIB)) 0
$((16 * MIB)) $((3 * MIB)) $((3 * MIB)) $((5 * MIB))
$tail $MIB 262144 $((7 * MIB))"
	echo "$cases" | while read -r o l b s; do raw_write "$dev" "$o" "$l" "$b" "$s"; done || exit 1
	# read back only after all writes, so a misdirected write shows up too
	echo "$cases" | while read -r o l b s; do raw_check "$dev" "$o" "$l" "$b" "$s"; done || exit 1
	log "raw I/O ok ($(echo "$cases" | wc -l) ranges)"

	step "mkfs.ext4 on $dev (all but the last MiB)"
	fs_kib=$(((size - MIB) / 1024))
	must "mkfs.ext4" mkfs.ext4 -F -q -L nsinterop "$dev" "${fs_kib}k"
	must "mount" mount -t ext4 "$dev" /mnt
	step "write files"
	must "write hello" sh -c 'echo "hello from the interop guest" >/mnt/hello.txt'
	must "copy big file" cp /tmp/pattern /mnt/big.bin
	must "mkdir" mkdir /mnt/many
	i=0
	while [ $i -lt 64 ]; do
		echo "file $i $(date +%s)" >/mnt/many/f$i || fail "write many/f$i"
		i=$((i + 1))
	done
	(cd /mnt && md5sum hello.txt big.bin many/*) >/tmp/files.md5
	must "sync" sync
	must "umount" umount /mnt

	step "remount and verify files"
	must "remount" mount -t ext4 -o ro "$dev" /mnt
	(cd /mnt && md5sum -c -s /tmp/files.md5) || { umount /mnt; fail "file contents differ after remount"; }
	must "umount (ro)" umount /mnt

	step "e2fsck -fn $dev"
	e2fsck -fn "$dev"
	rc=$?
	[ $rc -eq 0 ] || fail "e2fsck -fn exit $rc"

	step "marker block"
	moff=$((size - 512 * 1024))
	mtext=NSIOP-MARKER-$moff-
	m=$mtext
	while [ ${#m} -lt 4096 ]; do m=$m$m; done
	printf '%s' "$m" | head -c 4096 >/tmp/marker
	dd if=/tmp/marker of="$dev" bs=4096 seek="$moff" oflag=seek_bytes,direct conv=notrunc status=none ||
		fail "write marker"
	msum=$(md5sum </tmp/marker | cut -d' ' -f1)
	got=$(md5_of "$dev" "$moff" 4096 direct)
	[ "$msum" = "$got" ] || fail "marker readback mismatch"
	echo "INTEROP-MARKER $moff 4096 $msum $mtext"

	step "checksums for the host side"
	echo "INTEROP-MD5 0 $((4 * MIB)) $(md5_of "$dev" 0 $((4 * MIB)) direct)"
	echo "INTEROP-MD5 $tail $MIB $(md5_of "$dev" "$tail" $MIB direct)"
	# The whole namespace too, if asked (full_md5=1) or small (the default,
	# full_md5=auto: <= 128 MiB). Reading through QEMU user-net under TCG
	# runs at a few MB/s.
	full_md5=
	want_full=$(param full_md5 auto)
	[ "$want_full" = auto ] && [ "$size" -le $((128 * MIB)) ] && want_full=1
	if [ "$want_full" = 1 ]; then
		full_md5=$(md5_of "$dev" 0 "$size" direct)
		echo "INTEROP-MD5 0 $size $full_md5"
	fi
	step "workload done"
}
