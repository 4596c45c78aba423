/*
 * nearstore.h — the function ABI (docs/ABI.md). One source compiles to both
 * runtimes:
 *   clang --target=wasm32 -O2 -nostdlib ...   (sandbox/wasm)
 *   clang -target bpf -O2 -c ...              (sandbox/ebpf)
 *
 * A function defines one or both entry points:
 *   NS_PUSHDOWN int pushdown(struct bpf_xrp *ctx);
 *   NS_COMPUTE  int compute(const unsigned char *in, unsigned int in_len,
 *                           unsigned char *out, unsigned int out_cap);
 * pushdown returns 0 (then ctx->done or ctx->size[0] say what next) or a
 * negative error; with done set, size[0] may say how many bytes of the
 * scratch the result is (ns_done), else it is the whole scratch; compute returns the output length (<= out_cap) or a
 * negative error. Functions never block, allocate or do I/O.
 */
#ifndef NEARSTORE_H
#define NEARSTORE_H

typedef unsigned char      u8;
typedef unsigned short     u16;
typedef unsigned int       u32;
typedef unsigned long long u64;
typedef int                s32;
typedef long long          s64;

#define NS_MAX_FANOUT   16
#define NS_SCRATCH_SIZE 4096

/*
 * The pushdown context. The first five fields are XRP's struct bpf_xrp, so
 * programs written for XRP compile unchanged; the next two are BPF-oF's
 * per-file fields, under BPF-oF's names (fd_arr, cur_fd) as well as
 * nearstore's (next_file, cur_file): same offsets, same 4-byte size. Their
 * values are indices into the request's file table, not descriptors, so a
 * BPF-oF program that follows cur_fd (fd_arr[0] = cur_fd) or names files
 * by their place in the table runs unchanged; one that stores descriptor
 * numbers it got elsewhere does not. Pointers are 32-bit in wasm32 and
 * 64-bit in BPF; the byte layouts of both are in docs/ABI.md.
 */
struct bpf_xrp {
	char *data;                      /* the block(s) just read */
	int done;                        /* set to 1 when the request is complete */
	u64 next_addr[NS_MAX_FANOUT];    /* byte offsets (in files) of the next reads */
	u64 size[NS_MAX_FANOUT];         /* their lengths; the first 0 ends the list */
	char *scratch;                   /* NS_SCRATCH_SIZE bytes, kept across steps, returned to the host */
	/* BPF-oF / nearstore */
	union {
		u32 next_file[NS_MAX_FANOUT]; /* file-table index of each next read */
		s32 fd_arr[NS_MAX_FANOUT];    /* BPF-oF's name for it */
	};
	union {
		u32 cur_file;            /* file-table index data came from */
		s32 cur_fd;              /* BPF-oF's name for it */
	};
	u32 data_len;                    /* bytes in data */
	u64 cur_addr;                    /* offset in cur_file data came from */
};

#if defined(__wasm__)
#define NS_PUSHDOWN __attribute__((export_name("pushdown")))
#define NS_COMPUTE  __attribute__((export_name("compute")))
#elif defined(__bpf__)
#define NS_PUSHDOWN __attribute__((section("nearstore/pushdown"), used))
#define NS_COMPUTE  __attribute__((section("nearstore/compute"), used))
#else
#define NS_PUSHDOWN
#define NS_COMPUTE
#endif

/* Error codes a function may return (any negative value is passed on). */
#define NS_EINVAL  (-22)  /* malformed input */
#define NS_ERANGE  (-34)  /* output does not fit */
#define NS_ENOENT  (-2)   /* key not found (a result, not a failure, for lookups) */

/* The context's size on each target (docs/ABI.md): a mismatch here means
 * the header and the runtimes disagree. */
#if defined(__wasm32__)
_Static_assert(sizeof(struct bpf_xrp) == 352, "struct bpf_xrp must be 352 bytes in wasm32");
#elif defined(__bpf__)
_Static_assert(sizeof(struct bpf_xrp) == 360, "struct bpf_xrp must be 360 bytes in BPF");
#endif
_Static_assert(__builtin_offsetof(struct bpf_xrp, fd_arr) == __builtin_offsetof(struct bpf_xrp, next_file),
	       "fd_arr is next_file");
_Static_assert(__builtin_offsetof(struct bpf_xrp, cur_fd) == __builtin_offsetof(struct bpf_xrp, cur_file),
	       "cur_fd is cur_file");

/*
 * NS_WASM_UNROLL(how) before a loop is "#pragma clang loop how" in wasm
 * and nothing in eBPF. wazero checks for a timeout at every loop
 * back-edge by leaving the compiled code (tens of nanoseconds each time,
 * more than a small loop body's work), so hot loops take several
 * iterations per back-edge there; eBPF's interpreter gains little from
 * unrolling, and its budgets count one backward jump per iteration.
 * Example: NS_WASM_UNROLL(unroll_count(16)), NS_WASM_UNROLL(unroll(full)).
 */
#define NS_PRAGMA_(x) _Pragma(#x)
#if defined(__wasm__)
#define NS_WASM_UNROLL(how) NS_PRAGMA_(clang loop how)
#else
#define NS_WASM_UNROLL(how)
#endif

/* Inline helpers. Both targets are little-endian and both runtimes allow
 * unaligned accesses, so these compile to plain loads and stores. */
#define NS_INLINE static inline __attribute__((always_inline))

NS_INLINE u64 ns_load64(const void *p) { return *(const u64 *)p; }
NS_INLINE u32 ns_load32(const void *p) { return *(const u32 *)p; }
NS_INLINE void ns_store64(void *p, u64 v) { *(u64 *)p = v; }
NS_INLINE void ns_store32(void *p, u32 v) { *(u32 *)p = v; }

/*
 * ns_done finishes a pushdown request whose result is the first len bytes
 * of the scratch (1 to NS_SCRATCH_SIZE), so that only those go back to the
 * host: done = 1 with size[0] = len. done = 1 alone returns the whole
 * scratch; a len over NS_SCRATCH_SIZE fails the request (docs/ABI.md).
 */
NS_INLINE void ns_done(struct bpf_xrp *ctx, u32 len)
{
	ctx->done = 1;
	ctx->size[0] = len;
}

/*
 * ns_copy copies n bytes, 8 at a time then byte by byte. There is no libc:
 * build with -fno-builtin so that clang never turns loops like this one
 * into calls to memcpy/memset (an unresolved import in wasm, an error in
 * BPF).
 */
NS_INLINE void ns_copy(void *dst, const void *src, u32 n)
{
	u8 *d = (u8 *)dst;
	const u8 *s = (const u8 *)src;
	u32 i = 0;
	for (; i + 8 <= n; i += 8)
		ns_store64(d + i, ns_load64(s + i));
	for (; i < n; i++)
		d[i] = s[i];
}

#endif
