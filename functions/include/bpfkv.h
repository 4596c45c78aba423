/*
 * bpfkv.h — BPF-KV's on-disk B+-tree (from XRP, OSDI '22), as nearstore's
 * kv/btree stores it, and the scratch layout of btree_lookup's requests.
 * functions/README.md has the byte layouts; functions/btree.go mirrors them.
 *
 * Index file (file-table index 0): 512-byte nodes, the root at offset 0.
 *
 *   struct bpfkv_node {            offset
 *     u64 next;                    0    leaf: offset of the next leaf, 0 = last
 *     u64 type;                    8    0 inner, 1 leaf
 *     u64 key[31];                 16
 *     u64 ptr[31];                 264
 *   };                             512
 *
 * Keys are sorted; unused slots hold key BPFKV_KEY_NONE (all ones, so that
 * key is reserved) and ptr 0. Inner: ptr[i] is the child holding the keys
 * in [key[i], key[i+1]); key[0] is the child's smallest key; the search is
 * BPF-KV's nxt_node: the last used i with key[i] <= k, else 0. Leaf: ptr[i] is
 * the offset of key[i]'s value in the value log (file 1). Bit 63 of a ptr
 * (BPF-KV's FILE_MASK) is ignored, so trees BPF-KV wrote read the same.
 */
#ifndef NEARSTORE_BPFKV_H
#define NEARSTORE_BPFKV_H

#include "nearstore.h"

#define BPFKV_NODE_SIZE 512
#define BPFKV_FANOUT    31
#define BPFKV_INNER     0
#define BPFKV_LEAF      1
#define BPFKV_KEY_NONE  0xffffffffffffffffULL
#define BPFKV_PTR_MASK  0x7fffffffffffffffULL
#define BPFKV_INDEX_FILE 0
#define BPFKV_VALUE_FILE 1

struct bpfkv_node {
	u64 next;
	u64 type;
	u64 key[BPFKV_FANOUT];
	u64 ptr[BPFKV_FANOUT];
};
_Static_assert(sizeof(struct bpfkv_node) == BPFKV_NODE_SIZE, "a node is one 512-byte block");

/* Request modes. */
#define BPFKV_MODE_GET   0
#define BPFKV_MODE_RANGE 1

/* Internal states. */
#define BPFKV_STATE_NODE  0 /* data is a node on the way down */
#define BPFKV_STATE_VALUE 1 /* data is the value (get) */
#define BPFKV_STATE_SCAN  2 /* data is the next leaf (range) */

/* Result status. */
#define BPFKV_PENDING   0
#define BPFKV_FOUND     1 /* get: value in result; range: complete */
#define BPFKV_NOT_FOUND 2 /* get: no such key */
#define BPFKV_MORE      3 /* range: stopped at max; resume from next_key */

#define BPFKV_RESULT_OFF   64
#define BPFKV_RESULT_SIZE  (NS_SCRATCH_SIZE - BPFKV_RESULT_OFF) /* 4032 */
#define BPFKV_RANGE_MAX    (BPFKV_RESULT_SIZE / 16)             /* 252 */

/* The request, at the start of the scratch buffer. The host fills key, hi,
 * mode, value_size and max; the rest starts zeroed. */
struct bpfkv_req {
	u64 key;        /* 0  get: the key; range: lo (inclusive) */
	u64 hi;         /* 8  range: hi (inclusive) */
	u32 mode;       /* 16 BPFKV_MODE_* */
	u32 value_size; /* 20 get: value bytes to read, 1..4032 */
	u32 max;        /* 24 range: most results, 0 or > 252 mean 252 */
	u32 state;      /* 28 BPFKV_STATE_* (internal) */
	u32 status;     /* 32 BPFKV_* status */
	u32 nodes;      /* 36 nodes this request read */
	u64 value_off;  /* 40 get: the value's offset in the value log */
	u32 count;      /* 48 range: results in result[] */
	u32 reserved;   /* 52 */
	u64 next_key;   /* 56 range, status BPFKV_MORE: first key not returned */
	/* 64: get: the value (value_size bytes); range: count entries of
	 * {u64 key; u64 value_off} */
};
_Static_assert(sizeof(struct bpfkv_req) == BPFKV_RESULT_OFF, "the result starts at 64");

#endif
