#!/usr/bin/env bash
# setup.sh — prepare everything the QEMU interop guest needs. Idempotent.
#
#   1. apt-get installs QEMU, busybox-static, nvme-cli, e2fsprogs, ... (only
#      when something is missing; needs root then).
#   2. Fetches the Debian kernel (linux-image-amd64 → linux-image-VERSION)
#      with `apt-get download` and unpacks it with `dpkg-deb -x` into
#      .cache/kernel/VERSION/ — the host's /boot and /lib/modules are untouched.
#   3. Builds the initramfs with mkinitramfs.sh, cached under a name keyed by
#      the kernel version and a hash of the guest scripts and package versions.
#
# On success it prints KEY=VALUE lines on stdout (progress goes to stderr):
#   KERNEL_VERSION=...  KERNEL=/path/vmlinuz  INITRD=/path/initramfs.cpio.gz  QEMU=/path
# and writes the same lines to .cache/env.
#
# Environment:
#   INTEROP_CACHE           cache directory (default: tests/interop/.cache)
#   INTEROP_KERNEL_VERSION  pin a kernel ABI, e.g. 6.1.0-56-amd64 (default:
#                           whatever linux-image-amd64 depends on, else the
#                           newest one already cached)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${INTEROP_CACHE:-$HERE/.cache}
export DEBIAN_FRONTEND=noninteractive

log() { echo "setup.sh: $*" >&2; }
die() { echo "setup.sh: error: $*" >&2; exit 1; }

PACKAGES=(
	qemu-system-x86 # qemu-system-x86_64 (+ seabios, ipxe-qemu for the virtio-net ROM)
	busybox-static  # the guest's userland
	nvme-cli        # nvme discover/connect/disconnect in the guest
	e2fsprogs       # mkfs.ext4, e2fsck in the guest
	coreutils       # GNU dd (O_DIRECT, seek_bytes) in the guest
	cpio gzip       # to pack the initramfs
	kmod            # depmod/modprobe --show-depends at build time
	util-linux      # flock
	rsync           # tests/fuse: rsync -a keeps modification times (host side, not the guest)
)

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9 # one setup at a time (parallel `go test` processes)

# --- 1. packages ------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[[ $status == installed ]] || missing+=("$p")
done
if ((${#missing[@]})); then
	[[ $(id -u) == 0 ]] || die "missing packages (${missing[*]}) and not root: run 'sudo $0' once"
	log "installing: ${missing[*]}"
	apt-get update -q >&2
	apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null >&2
fi
QEMU=$(command -v qemu-system-x86_64) || die "qemu-system-x86_64 not found after install"

# --- 2. kernel ---------------------------------------------------------------
kernel_from_apt() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*-amd64\)$/\1/p' | head -n1
}
newest_cached_kernel() {
	local d
	d=$(ls -1d "$CACHE"/kernel/*/ 2>/dev/null | sort -V | tail -n1) || true
	[[ -n $d && -f $d/vmlinuz ]] && basename "$d"
}

KVER=${INTEROP_KERNEL_VERSION:-}
if [[ -z $KVER ]]; then
	KVER=$(kernel_from_apt || true)
	if [[ -z $KVER ]]; then
		KVER=$(newest_cached_kernel || true)
	fi
	if [[ -z $KVER && $(id -u) == 0 ]]; then
		log "apt lists know no linux-image-amd64; running apt-get update"
		apt-get update -q >&2
		KVER=$(kernel_from_apt || true)
	fi
	[[ -n $KVER ]] || die "cannot determine the Debian kernel version (apt-cache depends linux-image-amd64)"
fi

KDIR=$CACHE/kernel/$KVER
if [[ ! -f $KDIR/vmlinuz || ! -f $KDIR/root/lib/modules/$KVER/modules.dep ]]; then
	log "fetching linux-image-$KVER"
	tmp=$(mktemp -d "$CACHE/.kernel-tmp.XXXXXX")
	chmod 755 "$tmp"
	trap 'rm -rf "$tmp"' EXIT
	download() { (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "linux-image-$KVER" </dev/null >&2); }
	if ! download; then
		# Stale lists name a package the mirror has replaced: refresh, retry.
		[[ $(id -u) == 0 ]] || die "apt-get download linux-image-$KVER failed"
		apt-get update -q >&2
		KVER=$(kernel_from_apt) || die "no linux-image-amd64 after apt-get update"
		KDIR=$CACHE/kernel/$KVER
		download || die "apt-get download linux-image-$KVER failed"
	fi
	mkdir -p "$tmp/root"
	dpkg-deb -x "$tmp"/linux-image-"$KVER"_*.deb "$tmp/root"
	# Debian's package ships no modules.dep (postinst runs depmod); make it.
	depmod -b "$tmp/root" "$KVER"
	mv "$tmp/root/boot/vmlinuz-$KVER" "$tmp/vmlinuz"
	rm -f "$tmp"/*.deb
	rm -rf "$KDIR"
	mkdir -p "$CACHE/kernel"
	mv "$tmp" "$KDIR"
	trap - EXIT
	# Keep only this kernel (each unpacked tree is ~400 MB).
	find "$CACHE/kernel" -mindepth 1 -maxdepth 1 -type d ! -name "$KVER" -exec rm -rf {} +
	find "$CACHE" -maxdepth 1 -name 'initramfs-*.cpio.gz' ! -name "initramfs-$KVER-*" -delete
fi
KERNEL=$KDIR/vmlinuz
MODROOT=$KDIR/root

# --- 3. initramfs ------------------------------------------------------------
# Rebuild when the builder, the guest scripts, the kernel or the packages whose
# binaries we copy change.
hash=$(
	{
		echo "$KVER"
		dpkg-query -W -f='${Package} ${Version}\n' busybox-static nvme-cli libnvme1 e2fsprogs coreutils libc6 2>/dev/null || true
		cd "$HERE" && find mkinitramfs.sh guest -type f -print0 | sort -z | xargs -0 sha256sum
	} | sha256sum | cut -c1-16
)
INITRD=$CACHE/initramfs-$KVER-$hash.cpio.gz
if [[ ! -f $INITRD ]]; then
	log "building $(basename "$INITRD")"
	"$HERE/mkinitramfs.sh" "$MODROOT" "$KVER" "$INITRD.tmp" >&2
	mv "$INITRD.tmp" "$INITRD"
	# Drop stale images of the same kernel.
	find "$CACHE" -maxdepth 1 -name "initramfs-$KVER-*.cpio.gz" ! -name "$(basename "$INITRD")" -delete
fi

{
	echo "KERNEL_VERSION=$KVER"
	echo "KERNEL=$KERNEL"
	echo "INITRD=$INITRD"
	echo "QEMU=$QEMU"
} | tee "$CACHE/env"
