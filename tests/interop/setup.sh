#!/usr/bin/env bash
# setup.sh [SUITE] — prepare everything the QEMU interop guest needs. Idempotent.
#
#   1. apt-get installs QEMU, busybox-static, nvme-cli, e2fsprogs, ... (only
#      when something is missing; needs root then).
#   2. Fetches the Debian kernel (linux-image-amd64 → linux-image-VERSION)
#      with `apt-get download` and unpacks it with `dpkg-deb -x` into
#      .cache/kernel/VERSION/ — the host's /boot and /lib/modules are untouched.
#   3. Builds the initramfs with mkinitramfs.sh, cached under a name keyed by
#      the kernel version and a hash of the guest scripts and package versions.
#
# Without SUITE the kernel is the one the system's own apt sources offer
# (Debian 12: 6.1). With SUITE (e.g. trixie, Debian 13: 6.12, which has
# NVME_AUTH and NVME_TARGET_AUTH) the kernel comes from that suite of the same
# archive: a private apt configuration under .cache/SUITE/apt/ lists the URI
# of the system's own Debian source with Suites: SUITE, so the system's apt
# lists and sources stay untouched; everything of that kernel lives in
# .cache/SUITE/. The guest's userland (busybox, nvme-cli, ...) is the
# system's in both cases.
#
# On success it prints KEY=VALUE lines on stdout (progress goes to stderr):
#   KERNEL_VERSION=...  KERNEL=/path/vmlinuz  INITRD=/path/initramfs.cpio.gz  QEMU=/path
# and writes the same lines to .cache/env (.cache/SUITE/env with SUITE).
#
# Environment:
#   INTEROP_CACHE           cache directory (default: tests/interop/.cache)
#   INTEROP_KERNEL_VERSION  without SUITE, pin a kernel ABI, e.g. 6.1.0-56-amd64 (default:
#                           whatever linux-image-amd64 depends on, else the
#                           newest one already cached)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${INTEROP_CACHE:-$HERE/.cache}
SUITE=${1:-}
export DEBIAN_FRONTEND=noninteractive

log() { echo "setup.sh${SUITE:+ $SUITE}: $*" >&2; }
die() { echo "setup.sh${SUITE:+ $SUITE}: error: $*" >&2; exit 1; }

[[ $# -le 1 ]] || die "usage: $0 [SUITE]"
[[ -z $SUITE || $SUITE =~ ^[a-z][a-z0-9-]*$ ]] || die "bad suite name '$SUITE'"

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
flock 9 # one setup at a time (parallel `go test` processes, any suite)

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
# APT holds the options that point apt-get/apt-cache at SUITE's private
# configuration; empty for the system's own.
APT=()
apt_update() { apt-get "${APT[@]}" update -q >&2; }
if [[ -n $SUITE ]]; then
	CACHE=$CACHE/$SUITE
	aptdir=$CACHE/apt
	mkdir -p "$aptdir"/sources.list.d "$aptdir"/lists/partial "$aptdir"/cache/archives/partial
	# The system's Debian archive: the site serving the system's own release
	# (not -updates or -security), whichever source file format names it.
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	[[ -n $codename ]] || die "no VERSION_CODENAME in /etc/os-release"
	uri=$(apt-get indextargets --format '$(SITE) $(RELEASE)' 'Created-By: Packages' 2>/dev/null |
		awk -v r="$codename" '$2 == r { print $1; exit }')
	[[ -n $uri ]] || die "no apt source of the system serves '$codename' (apt-get indextargets)"
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	{
		echo "Types: deb"
		echo "URIs: $uri"
		echo "Suites: $SUITE"
		echo "Components: main"
		[[ -f $keyring ]] && echo "Signed-By: $keyring"
	} >"$aptdir/sources.list.d/$SUITE.sources.new"
	mv "$aptdir/sources.list.d/$SUITE.sources.new" "$aptdir/sources.list.d/$SUITE.sources"
	APT=(
		-o "Dir::Etc::SourceList=/dev/null"
		-o "Dir::Etc::SourceParts=$aptdir/sources.list.d"
		-o "Dir::State::Lists=$aptdir/lists"
		-o "Dir::Cache=$aptdir/cache"
		-o "Dir::State::status=/dev/null"
		-o "Acquire::Languages=none"
		-o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
		-o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
		-o "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false"
		-o "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false"
	)
	# Lists are private and only this script reads them: fetch them when
	# missing (no root needed), refresh them on a failed download below.
	if ! compgen -G "$aptdir/lists/*_Packages*" >/dev/null; then
		log "apt-get update of $SUITE from $uri (private lists in $aptdir)"
		apt_update || die "apt-get update of suite $SUITE from $uri failed"
	fi
fi
CAN_UPDATE=0
[[ -n $SUITE || $(id -u) == 0 ]] && CAN_UPDATE=1

kernel_from_apt() {
	apt-cache "${APT[@]}" depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*-amd64\)$/\1/p' | head -n1
}
newest_cached_kernel() {
	local d
	d=$(ls -1d "$CACHE"/kernel/*/ 2>/dev/null | sort -V | tail -n1) || true
	[[ -n $d && -f $d/vmlinuz ]] && basename "$d"
}

KVER=
[[ -n $SUITE ]] || KVER=${INTEROP_KERNEL_VERSION:-}
if [[ -z $KVER ]]; then
	KVER=$(kernel_from_apt || true)
	if [[ -z $KVER ]]; then
		KVER=$(newest_cached_kernel || true)
	fi
	if [[ -z $KVER && $CAN_UPDATE == 1 ]]; then
		log "apt lists know no linux-image-amd64; running apt-get update"
		apt_update
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
	download() { (cd "$tmp" && apt-get "${APT[@]}" download -q -o APT::Sandbox::User=root "linux-image-$KVER" </dev/null >&2); }
	if ! download; then
		# Stale lists name a package the mirror has replaced: refresh, retry.
		[[ $CAN_UPDATE == 1 ]] || die "apt-get download linux-image-$KVER failed"
		apt_update
		KVER=$(kernel_from_apt) || die "no linux-image-amd64 after apt-get update"
		KDIR=$CACHE/kernel/$KVER
		download || die "apt-get download linux-image-$KVER failed"
	fi
	mkdir -p "$tmp/root"
	dpkg-deb -x "$tmp"/linux-image-"$KVER"_*.deb "$tmp/root"
	# Debian 13 ships modules in /usr/lib/modules (merged /usr); depmod and
	# modprobe -d of the build host's kmod look in lib/modules.
	if [[ -d $tmp/root/usr/lib/modules/$KVER && ! -e $tmp/root/lib/modules ]]; then
		mkdir -p "$tmp/root/lib"
		mv "$tmp/root/usr/lib/modules" "$tmp/root/lib/modules"
	fi
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
