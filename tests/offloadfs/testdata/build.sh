#!/bin/sh
# Rebuilds stamp.c for both runtimes (stamp.wasm, stamp.o). The outputs are
# committed so the tests need no compiler; run this after editing the
# source. Needs clang with the wasm32 and BPF targets, wasm-ld and
# llvm-objcopy:
#   apt-get install -y clang lld llvm
set -eu
cd "$(dirname "$0")"
inc=../../../functions/include
common="-O2 -g0 -std=c11 -Wall -Wextra -Werror -ffreestanding -fno-builtin -I $inc"

clang --target=wasm32 $common -nostdlib -Wl,--no-entry -Wl,--export=__heap_base \
	-Wl,--strip-debug -Wl,--no-export-dynamic -o stamp.wasm.tmp stamp.c
llvm-objcopy --remove-section=producers stamp.wasm.tmp stamp.wasm
rm -f stamp.wasm.tmp
clang -target bpf -mcpu=v3 $common -fno-addrsig -c -o stamp.o.tmp stamp.c
llvm-objcopy --remove-section=.comment stamp.o.tmp stamp.o
rm -f stamp.o.tmp
chmod 644 stamp.wasm stamp.o
