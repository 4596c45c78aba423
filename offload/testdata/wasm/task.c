// A wasm offload task for offload's tests (offload/wasm.go states the
// ABI). args[0], a letter (so a command line can pass it), picks what
// it does:
//
//   c  copy: the inputs, end to end, into the first writable file; the
//      output is the bytes copied, 8 bytes little-endian
//   r  reads one byte past file 0's end; the output is the status (i32 LE)
//   w  writes one byte into file 0 (an input); the output is the status
//   f  reads file 99, which no request has; the output is the status
//   m  reads into memory it does not have; the output is the status
//   s  never ends
//
// Built by build.sh; the .wasm beside it is committed.

typedef unsigned char u8;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define IMPORT(name) __attribute__((import_module("offload"), import_name(#name)))
IMPORT(offload_num_files) i32 offload_num_files(void);
IMPORT(offload_size) i64 offload_size(i32 file);
IMPORT(offload_writable) i32 offload_writable(i32 file);
IMPORT(offload_args) i32 offload_args(u8 *p, i32 n);
IMPORT(offload_read) i32 offload_read(i32 file, i64 off, u8 *p, i32 n);
IMPORT(offload_write) i32 offload_write(i32 file, i64 off, const u8 *p, i32 n);
IMPORT(offload_output) i32 offload_output(const u8 *p, i32 n);

static u8 buf[65536];

static i32 out32(i32 v) {
	u8 b[4];
	for (int i = 0; i < 4; i++) b[i] = (u8)((u32)v >> (8 * i));
	return offload_output(b, 4);
}

static i32 copy(void) {
	i32 n = offload_num_files(), out = -1;
	for (i32 i = 0; i < n; i++)
		if (offload_writable(i)) { out = i; break; }
	if (out < 0) return 1;
	i64 at = 0;
	for (i32 i = 0; i < n; i++) {
		if (offload_writable(i)) continue;
		i64 size = offload_size(i);
		for (i64 off = 0; off < size;) {
			i32 k = size - off < (i64)sizeof buf ? (i32)(size - off) : (i32)sizeof buf;
			i32 st = offload_read(i, off, buf, k);
			if (st) return 10 - st;
			st = offload_write(out, at, buf, k);
			if (st) return 20 - st;
			off += k;
			at += k;
		}
	}
	u8 b[8];
	for (int i = 0; i < 8; i++) b[i] = (u8)((u64)at >> (8 * i));
	return offload_output(b, 8) ? 2 : 0;
}

__attribute__((export_name("run"))) i32 run(void) {
	u8 mode = 0;
	if (offload_args(&mode, 1) < 1) return 3;
	switch (mode) {
	case 'c': return copy();
	case 'r': return out32(offload_read(0, offload_size(0), buf, 1)) ? 2 : 0;
	case 'w': return out32(offload_write(0, 0, buf, 1)) ? 2 : 0;
	case 'f': return out32(offload_read(99, 0, buf, 1)) ? 2 : 0;
	case 'm': return out32(offload_read(0, 0, (u8 *)0x7ffffff0, 4096)) ? 2 : 0;
	case 's': for (volatile int spin = 1; spin;) {} return 0;
	}
	return 4;
}
