/*
 * lsm.h — the scratch layout of lsm_get requests: a point lookup in
 * kv/lsm's tables (docs/LSM.md has the table format; functions/README.md
 * has this layout; kv/lsm/pushdown.go mirrors it).
 *
 * Scratch (all little-endian):
 *
 *   offset size field
 *   0      4    magic LSM_MAGIC
 *   4      4    status (LSM_PENDING from the host; the result)
 *   8      8    snapshot seq: entries with a higher seq are invisible
 *   16     4    key length (user key, 1..LSM_MAX_KEY)
 *   20     4    number of plan entries (1..LSM_MAX_TABLES)
 *   24     4    cur: the plan entry being searched (the host sets 0)
 *   28     4    state: what the data of the next step is (LSM_STATE_*)
 *   32     8    trailer (seq << 8 | kind) of the entry found
 *   40     4    value length (SET)
 *   44     4    blocks searched
 *   48     8    LSM_SET_BLOCK: offset of the data block holding the value
 *   56     4    LSM_SET_BLOCK: that block's length
 *   60     4    value capacity: the longest value returned inline (the
 *               host sets it, at most LSM_VALUE_MAX; 0 means LSM_VALUE_MAX)
 *   64     256  plan: LSM_MAX_TABLES entries of 16 bytes:
 *                 +0 offset u64, +8 length u32 of the block to read first
 *                 +12 file u16 (file-table index), +14 kind u16
 *                 (LSM_PLAN_DATA: a data block; LSM_PLAN_INDEX: the
 *                 table's top-level index block)
 *   320    512  user key
 *   832    528  key buffer: the entry being decoded (internal key)
 *
 * The result is the first LSM_OFF_VALUE bytes (the header above), followed
 * for LSM_SET by the value, written over the plan, key and key buffer as
 * the request finishes (ns_done): LSM_OFF_VALUE + value length bytes
 * travel back, not the whole scratch.
 *
 *   64     4032 value (LSM_SET)
 */
#ifndef NEARSTORE_LSM_H
#define NEARSTORE_LSM_H

#include "nearstore.h"

#define LSM_MAGIC      0x676d736cU /* "lsmg" */
#define LSM_MAX_TABLES 16
#define LSM_MAX_KEY    512
#define LSM_KEYBUF     528 /* LSM_MAX_KEY + an 8-byte trailer, + 8 */

#define LSM_OFF_PLAN   64
#define LSM_OFF_KEY    320
#define LSM_OFF_KEYBUF 832
#define LSM_OFF_VALUE  LSM_OFF_PLAN /* the result's value, once done */
#define LSM_VALUE_MAX  (NS_SCRATCH_SIZE - LSM_OFF_VALUE) /* 4032 */

/* status */
#define LSM_PENDING   0
#define LSM_SET       1 /* the newest visible entry is a SET; value inline */
#define LSM_SET_BLOCK 2 /* a SET whose value is longer than the capacity:
                           read the data block at value block offset/length */
#define LSM_DEL       3 /* the newest visible entry is a DEL */
#define LSM_ABSENT    4 /* no plan table has a visible entry */

/* state: what the data of a step is */
#define LSM_STATE_DATA  0
#define LSM_STATE_TOP   1 /* a top-level index block */
#define LSM_STATE_PART  2 /* an index partition */

/* plan entry kinds */
#define LSM_PLAN_DATA  0
#define LSM_PLAN_INDEX 1

/* internal key kinds */
#define LSM_KIND_DEL 0
#define LSM_KIND_SET 1

/* The largest block a step reads: the executor's step cap. */
#define LSM_MAX_BLOCK (64 * 1024)

/* E2BIG: a key in a block is longer than the key buffer. */
#define LSM_E2BIG (-7)

struct lsm_plan {
	u64 offset;
	u32 length;
	u16 file;
	u16 kind;
};
_Static_assert(sizeof(struct lsm_plan) == 16, "a plan entry is 16 bytes");

struct lsm_req {
	u32 magic;
	u32 status;
	u64 snap;
	u32 key_len;
	u32 ntables;
	u32 cur;
	u32 state;
	u64 trailer;
	u32 value_len;
	u32 blocks;
	u64 block_off;
	u32 block_len;
	u32 value_cap;
	struct lsm_plan plan[LSM_MAX_TABLES];
};
_Static_assert(sizeof(struct lsm_req) == LSM_OFF_KEY, "the request header ends where the key starts");

#endif
