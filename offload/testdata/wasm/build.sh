#!/usr/bin/env bash
# Builds task.c into task.wasm (committed) with Debian's clang and lld:
# no libc, no debug info, no producers section, so the build is
# deterministic. Run from anywhere: offload/testdata/wasm/build.sh
set -euo pipefail
cd "$(dirname "$0")"
clang --target=wasm32 -O2 -g0 -std=c11 -Wall -Wextra -Werror -ffreestanding -fno-builtin -nostdlib \
	-Wl,--no-entry -Wl,--strip-debug -Wl,--no-export-dynamic -o task.wasm.tmp task.c
llvm-objcopy --remove-section=producers task.wasm.tmp task.wasm
rm -f task.wasm.tmp
