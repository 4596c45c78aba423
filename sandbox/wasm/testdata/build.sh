#!/bin/sh
# Rebuilds the test modules from their sources. The .wasm files are checked
# in so the tests need neither clang nor wabt; run this after editing a
# source. Needs clang (with the wasm32 target and wasm-ld) and wat2wasm:
#   apt-get install -y clang lld wabt
set -eu
cd "$(dirname "$0")"
for c in *.c; do
	clang --target=wasm32 -O2 -nostdlib -Wl,--no-entry \
		-Wl,--export=__heap_base -o "${c%.c}.wasm" "$c"
done
for w in *.wat; do
	wat2wasm -o "${w%.wat}.wasm" "$w"
done
chmod 644 ./*.wasm
