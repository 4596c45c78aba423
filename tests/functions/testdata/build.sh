#!/bin/sh
# Rebuilds the test modules: hostile.c for both runtimes (hostile.wasm,
# hostile.o), badhelper.c for eBPF only, and the .wat files. The outputs
# are committed so the tests need neither clang nor wabt; run this after
# editing a source. Needs clang with the wasm32 and BPF targets, wasm-ld,
# llvm-objcopy and wat2wasm:
#   apt-get install -y clang lld llvm wabt
set -eu
cd "$(dirname "$0")"
inc=../../../functions/include
common="-O2 -g0 -std=c11 -Wall -Wextra -Werror -ffreestanding -fno-builtin -I $inc"

bpf() {
	clang -target bpf -mcpu=v3 $common -fno-addrsig -c -o "$1.o.tmp" "$1.c"
	llvm-objcopy --remove-section=.comment "$1.o.tmp" "$1.o"
	rm -f "$1.o.tmp"
}

clang --target=wasm32 $common -nostdlib -Wl,--no-entry -Wl,--export=__heap_base \
	-Wl,--strip-debug -Wl,--no-export-dynamic -o hostile.wasm.tmp hostile.c
llvm-objcopy --remove-section=producers hostile.wasm.tmp hostile.wasm
rm -f hostile.wasm.tmp
bpf hostile
bpf badhelper
for w in *.wat; do
	wat2wasm -o "${w%.wat}.wasm" "$w"
done
chmod 644 ./*.wasm ./*.o
