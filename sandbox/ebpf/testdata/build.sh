#!/bin/sh
# Rebuilds the test objects. Needs clang with the BPF target
# (Debian: apt-get install clang llvm). The objects are committed so the
# tests do not need clang.
set -eu
cd "$(dirname "$0")"
for c in *.c; do
	clang -target bpf -O2 -g -Wall -fno-builtin -I../../../functions/include -c "$c" -o "${c%.c}.o"
done
