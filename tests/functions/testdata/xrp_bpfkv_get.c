/*
 * A BPF-KV lookup written for XRP, as XRP's own programs are: XRP's
 * struct bpf_xrp and BPF-KV's node layout declared here (no nearstore
 * header), the program in a section of its own name with an unsigned
 * int return, a license section, and the values read from the same file
 * as the index. TestXRPBPFKV builds it with clang at test time and looks
 * keys up through a real target.
 *
 * One request looks up n_keys keys (a scatter-gather get): for each key
 * it walks from the root to a leaf, then reads the 512-byte block holding
 * the value and copies the value out, then starts the next key at the
 * root. Absent keys are reported as not found.
 */

/* libbpf's bpf_helpers.h */
#define SEC(name) __attribute__((section(name), used))

/* XRP's include/uapi/linux/bpf.h */
#define XRP_MAX_FANOUT 16
struct bpf_xrp {
	char *data;
	int done;
	unsigned long long next_addr[XRP_MAX_FANOUT];
	unsigned long long size[XRP_MAX_FANOUT];
	char *scratch;
};

/* BPF-KV's db_types.h */
typedef unsigned long meta__t;
typedef unsigned long key__t;
typedef unsigned char val__t[64];
typedef unsigned long ptr__t;
#define BLK_SIZE 512
#define INTERNAL 0
#define LEAF 1
#define NODE_CAPACITY ((BLK_SIZE - 2 * sizeof(meta__t)) / (sizeof(key__t) + sizeof(ptr__t)))
typedef struct _Node {
	meta__t num;
	meta__t type;
	key__t key[NODE_CAPACITY];
	ptr__t ptr[NODE_CAPACITY];
} Node;
#define FILE_MASK ((ptr__t)1 << 63)
#define decode(p) ((p) & ~FILE_MASK)
#define memcpy(d, s, n) __builtin_memcpy((d), (s), (n))

/*
 * The request, in scratch, laid out as BPF-KV's struct ScatterGatherQuery;
 * the test writes root_pointer, n_keys and keys.
 */
#define SG_KEYS 32
struct MaybeValue {
	char found;
	val__t value;
};
struct ScatterGatherQuery {
	ptr__t root_pointer;               /* 0 */
	ptr__t value_ptr;                  /* 8 */
	unsigned int state_flags;          /* 16 */
	int current_index;                 /* 20 */
	int n_keys;                        /* 24 */
	key__t keys[SG_KEYS];              /* 32 */
	struct MaybeValue values[SG_KEYS]; /* 288, 65 bytes each */
};

char LICENSE[] SEC("license") = "GPL";

#define AT_VALUE 1
#define KEY_MASK (SG_KEYS - 1) /* keeps every index inside the arrays */

static __inline int key_exists(key__t key, Node *node)
{
	for (int i = 0; i < NODE_CAPACITY; ++i)
		if (node->key[i] == key)
			return 1;
	return 0;
}

/* BPF-KV's nxt_node: the pointer before the first key above key. */
static __inline ptr__t nxt_node(key__t key, Node *node)
{
	for (int i = 1; i < NODE_CAPACITY; ++i)
		if (key < node->key[i])
			return node->ptr[i - 1];
	return node->ptr[NODE_CAPACITY - 1];
}

static __inline void next_key(struct bpf_xrp *context, struct ScatterGatherQuery *query)
{
	query->current_index += 1;
	query->state_flags = 0;
	if (query->current_index >= query->n_keys || query->current_index >= SG_KEYS) {
		context->done = 1;
		context->next_addr[0] = 0;
		context->size[0] = 0;
		return;
	}
	context->next_addr[0] = query->root_pointer;
	context->size[0] = BLK_SIZE;
}

SEC("oliver_agg")
unsigned int oliver_agg_func(struct bpf_xrp *context)
{
	struct ScatterGatherQuery *query = (struct ScatterGatherQuery *)context->scratch;
	Node *node = (Node *)context->data;
	int idx = query->current_index & KEY_MASK;
	key__t key = query->keys[idx];

	if (query->state_flags & AT_VALUE) {
		/* data is the block holding the value */
		ptr__t in_block = query->value_ptr & (BLK_SIZE - 1);
		query->values[idx].found = 1;
		memcpy(query->values[idx].value, context->data + in_block, sizeof(val__t));
		next_key(context, query);
		return 0;
	}
	if (node->type == LEAF) {
		if (!key_exists(key, node)) {
			query->values[idx].found = 0;
			next_key(context, query);
			return 0;
		}
		/* The value is in this same file: read its block. */
		query->state_flags = AT_VALUE;
		query->value_ptr = decode(nxt_node(key, node));
		context->next_addr[0] = query->value_ptr & ~(ptr__t)(BLK_SIZE - 1);
		context->size[0] = BLK_SIZE;
		return 0;
	}
	context->next_addr[0] = decode(nxt_node(key, node));
	context->size[0] = BLK_SIZE;
	return 0;
}
