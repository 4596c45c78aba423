#!/usr/bin/env bash
# Builds the standard functions (functions/src/*.c) into wasm modules
# (functions/wasm/NAME.wasm) and eBPF objects (functions/ebpf/NAME.o) with
# Debian's clang and lld. The outputs are committed, so the build is
# deterministic: no debug info, no build ids, no paths, no producers section.
#
#   scripts/build-functions.sh            build into functions/
#   scripts/build-functions.sh -o DIR     build into DIR/wasm and DIR/ebpf
#   scripts/build-functions.sh --check    rebuild into a temp dir and cmp
#                                         against the committed modules
#
# Installs clang, lld and llvm with apt-get if they are missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/functions/src
inc=$root/functions/include
out=$root/functions
check=0
while [ $# -gt 0 ]; do
	case $1 in
	-o) out=$2; shift 2 ;;
	--check) check=1; shift ;;
	*) echo "usage: $0 [-o DIR] [--check]" >&2; exit 2 ;;
	esac
done

# Per-function wasm flags. SIMD (-msimd128) only where the source is
# written for it (#ifdef __wasm_simd128__): the flag also lets clang
# auto-vectorize, which would change the other modules for nothing.
wasm_flags() {
	case $1 in
	grep | stats64) echo -msimd128 ;;
	lsm_get) echo -mbulk-memory ;;
	esac
}

# Functions whose C does not fit eBPF's limits (none today). List names
# separated by spaces, with the reason in functions/README.md.
NO_EBPF=""

need=()
command -v clang >/dev/null || need+=(clang)
command -v wasm-ld >/dev/null || need+=(lld)
command -v llvm-objcopy >/dev/null || need+=(llvm)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ $check = 1 ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	"$0" -o "$tmp"
	bad=0
	for f in "$tmp"/wasm/*.wasm "$tmp"/ebpf/*.o; do
		rel=${f#"$tmp"/}
		if ! cmp -s "$f" "$root/functions/$rel"; then
			echo "functions-check: functions/$rel differs from a fresh build of its source" >&2
			bad=1
		fi
	done
	for f in "$root"/functions/wasm/*.wasm "$root"/functions/ebpf/*.o; do
		rel=${f#"$root"/functions/}
		[ -e "$tmp/$rel" ] || { echo "functions-check: functions/$rel has no source" >&2; bad=1; }
	done
	if [ $bad = 1 ]; then
		echo "functions-check: FAILED with $(clang --version | head -1);" \
			"run 'make functions' and commit functions/wasm and functions/ebpf" >&2
		exit 1
	fi
	echo "functions-check: ok ($(ls "$tmp"/wasm | wc -l) wasm, $(ls "$tmp"/ebpf | wc -l) eBPF; $(clang --version | head -1))"
	exit 0
fi

mkdir -p "$out/wasm" "$out/ebpf"
# Deterministic, libc-free flags shared by both targets. -fno-builtin keeps
# clang from turning loops into memcpy/memset calls.
common=(-O2 -g0 -std=c11 -Wall -Wextra -Werror -ffreestanding -fno-builtin
	-ffile-prefix-map="$root"=. -I "$inc")
cd "$src"
for c in *.c; do
	name=${c%.c}
	# shellcheck disable=SC2046 # wasm_flags prints words to split
	clang --target=wasm32 "${common[@]}" $(wasm_flags "$name") -nostdlib \
		-Wl,--no-entry -Wl,--export=__heap_base -Wl,--strip-debug \
		-Wl,--no-export-dynamic \
		-o "$out/wasm/$name.wasm.tmp" "$c"
	llvm-objcopy --remove-section=producers "$out/wasm/$name.wasm.tmp" "$out/wasm/$name.wasm"
	rm -f "$out/wasm/$name.wasm.tmp"
	case " $NO_EBPF " in
	*" $name "*) continue ;;
	esac
	clang -target bpf -mcpu=v3 "${common[@]}" -fno-addrsig -c \
		-o "$out/ebpf/$name.o.tmp" "$c"
	llvm-objcopy --remove-section=.comment "$out/ebpf/$name.o.tmp" "$out/ebpf/$name.o"
	rm -f "$out/ebpf/$name.o.tmp"
done
chmod 644 "$out"/wasm/*.wasm "$out"/ebpf/*.o
