#!/usr/bin/env bash
# mkinitramfs.sh MODROOT KVER OUT — build the interop guest's initramfs.
#
# MODROOT is a directory holding lib/modules/KVER (with modules.dep), such as
# the unpacked Debian kernel package setup.sh leaves in .cache/kernel/KVER/root.
# OUT is written as a gzip-compressed newc cpio archive.
#
# The image holds: busybox-static (+ applet links), nvme-cli, mke2fs/e2fsck,
# GNU dd and md5sum, and the shared libraries they need (found with ldd), the kernel
# modules listed in MODULES below plus all their dependencies and softdeps in
# load order (resolved with `modprobe --show-depends`, decompressed so busybox
# insmod can load them), /init, and the scenario scripts from guest/.
set -euo pipefail

[[ $# == 3 ]] || { echo "usage: $0 MODROOT KVER OUT" >&2; exit 2; }
MODROOT=$(cd "$1" && pwd)
KVER=$2
OUT=$3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Modules the guest loads, in this order; dependencies are added before each.
# crc32c is what ext4 metadata_csum and NVMe/TCP digests use; the -intel
# variant is a softdep that may refuse to load on a CPU without SSE4.2.
MODULES=(
	crc32c_generic
	virtio_pci virtio_net
	configfs
	nvme_core nvme_fabrics nvme_tcp
	nvmet nvmet_tcp
	ext4
)

# Userland binaries besides busybox (their libraries come along via ldd).
BINARIES=(
	/usr/sbin/nvme
	/sbin/mke2fs
	/sbin/e2fsck
	/bin/dd     # GNU: O_DIRECT with aligned buffers, skip_bytes/seek_bytes
	/bin/md5sum # GNU: faster than busybox's under TCG
)

log() { echo "mkinitramfs: $*" >&2; }

[[ -f $MODROOT/lib/modules/$KVER/modules.dep ]] || { echo "no modules.dep under $MODROOT/lib/modules/$KVER" >&2; exit 1; }

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT

# Layout follows Debian's merged /usr so ldd's paths and busybox's applet paths
# all resolve.
mkdir -p "$STAGE"/usr/{bin,sbin,lib,lib64} "$STAGE"/{proc,sys,dev,tmp,run,mnt,etc/nvme,scenarios}
ln -s usr/bin "$STAGE/bin"
ln -s usr/sbin "$STAGE/sbin"
ln -s usr/lib "$STAGE/lib"
ln -s usr/lib64 "$STAGE/lib64"

# --- busybox ---------------------------------------------------------------
BUSYBOX=/bin/busybox
if ldd "$BUSYBOX" >/dev/null 2>&1; then
	echo "$BUSYBOX is dynamically linked: install busybox-static" >&2
	exit 1
fi
cp "$BUSYBOX" "$STAGE/usr/bin/busybox"
"$BUSYBOX" --list-full | while read -r applet; do
	dst=$STAGE/$applet
	[[ -e $dst || -L $dst ]] && continue
	mkdir -p "$(dirname "$dst")"
	ln -s /usr/bin/busybox "$dst"
done

# --- binaries and their libraries -----------------------------------------
copy_file() { # copy_file SRC (dereferenced) to the same path in the image
	local src=$1 dst=$STAGE$1
	mkdir -p "$(dirname "$dst")"
	rm -f "$dst"
	cp -L "$src" "$dst"
}
for bin in "${BINARIES[@]}"; do
	[[ -x $bin ]] || { echo "missing $bin" >&2; exit 1; }
	copy_file "$bin"
	# "libx.so.1 => /lib/.../libx.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
	ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
		while read -r lib; do
			[[ -e $STAGE$lib ]] || copy_file "$lib"
		done
done
ln -sf mke2fs "$STAGE/usr/sbin/mkfs.ext4"
cp /etc/mke2fs.conf "$STAGE/etc/mke2fs.conf"

# --- kernel modules ----------------------------------------------------------
MODDIR=$MODROOT/lib/modules/$KVER
declare -A seen=()
order=()
for m in "${MODULES[@]}"; do
	# -C /dev/null: ignore the build host's modprobe.d; softdeps still come
	# from modules.softdep in MODDIR.
	while read -r verb path _; do
		case $verb in
		insmod)
			rel=${path#"$MODDIR"/}
			if [[ -z ${seen[$rel]:-} ]]; then
				seen[$rel]=1
				order+=("$rel")
			fi
			;;
		builtin) ;;
		*) echo "unexpected modprobe output: $verb $path" >&2; exit 1 ;;
		esac
	done < <(modprobe -C /dev/null -d "$MODROOT" -S "$KVER" --show-depends "$m")
done

: >"$STAGE/etc/modules.order"
for rel in "${order[@]}"; do
	src=$MODDIR/$rel
	case $rel in
	*.ko.xz) out=${rel%.xz}; dec=(xz -dc) ;;
	*.ko.zst) out=${rel%.zst}; dec=(zstd -dcq) ;;
	*.ko.gz) out=${rel%.gz}; dec=(gzip -dc) ;;
	*.ko) out=$rel; dec=(cat) ;;
	*) echo "unknown module file $rel" >&2; exit 1 ;;
	esac
	mkdir -p "$(dirname "$STAGE/lib/modules/$KVER/$out")"
	"${dec[@]}" "$src" >"$STAGE/lib/modules/$KVER/$out"
	echo "$out" >>"$STAGE/etc/modules.order"
done
cp "$MODDIR"/modules.builtin "$MODDIR"/modules.builtin.modinfo "$MODDIR"/modules.order "$STAGE/lib/modules/$KVER/" 2>/dev/null || true
# modules.dep for the subset, so busybox modprobe can serve kernel requests.
depmod -b "$STAGE" "$KVER"
log "${#order[@]} modules: $(sed 's#.*/##; s#\.ko$##' "$STAGE/etc/modules.order" | tr '\n' ' ')"

# --- init and scenarios ------------------------------------------------------
install -m 0755 "$HERE/guest/init" "$STAGE/init"
mkdir -p "$STAGE/usr/lib/interop"
install -m 0644 "$HERE/guest/lib.sh" "$STAGE/usr/lib/interop/lib.sh"
install -m 0755 "$HERE/guest/interop-ctl" "$STAGE/usr/bin/interop-ctl"
for s in "$HERE"/guest/scenarios/*.sh; do
	install -m 0755 "$s" "$STAGE/scenarios/"
done
echo "$KVER" >"$STAGE/etc/interop-kernel"
echo "root:x:0:0:root:/root:/bin/sh" >"$STAGE/etc/passwd"
echo "root:x:0:" >"$STAGE/etc/group"

# --- pack --------------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
(cd "$STAGE" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$OUT"
log "wrote $OUT ($(du -h "$OUT" | cut -f1))"
