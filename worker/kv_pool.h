/* kv_pool.h — the paged KV cache's block manager.
 *
 * The pool owns the K/V memory (one kv_store_t, see kv_store.h) allocated once
 * at start-up, cut into n_blocks physical blocks of block_size token positions.
 * Sequences (kv_seq_t) own a block table: logical block i of a sequence lives
 * in physical block table[i], so token position p is block table[p / bs],
 * slot p % bs. Blocks are reference counted; only FULL blocks are ever shared,
 * and a sequence only ever writes into its last, non-full, exclusively owned
 * block (asserted), so no copy-on-write exists.
 *
 * Prefix cache. A full block is keyed by
 *     key_i = H(key_{i-1}, tokens of block i)
 *     key_{-1} = per-pool root ^ mix(the sequence's partition)
 * (64-bit keyed hash; partitions: kv_seq_set_partition, common/prefix_key.h). The key only indexes a chained hash map; a hit is
 * confirmed by comparing the block's stored token ids, its parent key and its
 * parent's identity (physical id + registration serial), so hash collisions
 * cost time, never correctness. Cached blocks nobody references sit on an LRU
 * list; allocation takes never-cached free blocks first, then evicts the least
 * recently released cached block. docs/KV_CACHE.md has the details.
 *
 * Block states (each block is in exactly one):
 *     used    ref > 0 (cached or not)
 *     cached  ref == 0, registered in the prefix cache, on the LRU list
 *     warm    ref == 0, loaded from the lower tier by a warm start
 *             (kv_pool_warm_step), known by its public key only, on the
 *             LRU list (evictable like a cached block, before any of them)
 *     free    ref == 0, not registered, on the free stack
 *
 * Typical use by the scheduler, per sequence:
 *     seq = kv_seq_new(pool);
 *     n_hit = kv_pool_match_prefix(pool, prompt, n_prompt, seq);  // skip n_hit tokens
 *     loop: kv_seq_reserve(seq, n_chunk)  -> KV_POOL_NO_CAPACITY: wait / preempt
 *           kv_seq_append(seq, chunk_tokens, n_chunk)  // positions being written
 *           forward pass writes K/V of those positions through kv_seq_block_table()
 *           kv_pool_commit_full_blocks(pool, seq)      // after the K/V is written
 *           kv_seq_drop_before(seq, next_pos - W + 1)  // sliding-window models only
 *     kv_seq_free(&seq);   // blocks go back: cached ones stay cached
 *
 * Return codes (int) used below:
 *      0  KV_POOL_OK            done
 *      1  KV_POOL_NO_CAPACITY   not enough free+evictable blocks; nothing changed
 *     -1  KV_POOL_EINVAL        bad argument; nothing changed
 *
 * Ownership: kv_pool_new returns a pool freed with kv_pool_free; every
 * kv_seq_t of a pool must be freed (kv_seq_free) before the pool. The
 * kv_store_t returned by kv_pool_store points into the pool's memory and is
 * valid until kv_pool_free. Pointers returned by kv_seq_block_table /
 * kv_seq_tokens are valid until the next call that changes that sequence.
 * Not thread-safe: one scheduler thread owns the pool and its sequences.
 */
#ifndef PAGODA_WORKER_KV_POOL_H
#define PAGODA_WORKER_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/kernels/kv_store.h"

enum kv_pool_rc {
    KV_POOL_OK = 0,
    KV_POOL_NO_CAPACITY = 1,
    KV_POOL_EINVAL = -1,
};

typedef struct kv_pool kv_pool_t;
typedef struct kv_seq kv_seq_t;

typedef struct kv_pool_stats {
    int32_t n_blocks;          /* total physical blocks */
    int32_t n_used;            /* ref > 0 */
    int32_t n_cached;          /* ref == 0 and in the prefix cache (evictable) */
    int32_t n_free;            /* ref == 0, not cached */
    int32_t n_cached_total;    /* blocks registered in the prefix cache, used or not */
    int32_t n_seqs;            /* live kv_seq_t objects */
    int32_t block_size;        /* token positions per block */
    /* Prefix-cache counters are in TOKENS (like vLLM): a query of an n-token
     * prompt adds n to n_prefix_query_tokens and the tokens it covered to
     * n_prefix_hit_tokens. hit rate = hit_tokens / query_tokens. */
    uint64_t n_prefix_queries;      /* kv_pool_match_prefix calls */
    uint64_t n_prefix_query_tokens;
    uint64_t n_prefix_hit_tokens;
    uint64_t n_prefix_hit_blocks;
    uint64_t n_registered;     /* blocks ever registered by commit_full_blocks */
    uint64_t n_evictions;      /* cached blocks evicted to satisfy an allocation */
    /* with a lower tier (kv_pool_set_tier) */
    uint64_t n_tier_hit_tokens;  /* prompt tokens covered by blocks loaded from the tier
                                  * (not in n_prefix_hit_tokens, which counts RAM hits) */
    uint64_t n_tier_stored;      /* evicted blocks the tier holds (stored or had) */
    /* warm start (kv_pool_warm_begin) */
    int32_t n_warm;              /* warm blocks now (loaded, not yet used by a prompt; in n_cached) */
    int32_t n_warm_planned;      /* blocks the warm start still means to load (0: done or none) */
    uint64_t n_warm_loaded;      /* blocks loaded by the warm start */
    uint64_t n_warm_hit_tokens;  /* prompt tokens covered by warm blocks (in n_prefix_hit_tokens:
                                  * they were in RAM when the prompt came) */
} kv_pool_stats_t;

/* Bytes one block costs: K and V for every layer (2 * n_layer * block_size *
 * kv_dim elements of `type`: 4 bytes each for F32, 2 for F16) plus per-block
 * bookkeeping. 0 for invalid arguments. */
size_t kv_pool_block_bytes(int32_t n_layer, int32_t kv_dim, int32_t block_size, kv_type_t type);
/* The same for any type: Q8_0 vectors of kv_dim + 2 * kv_dim / qblock bytes
 * (kv_store.h; qblock ignored for F32/F16). */
size_t kv_pool_block_bytes_q(int32_t n_layer, int32_t kv_dim, int32_t block_size, kv_type_t type, int32_t qblock);

/* Blocks that fit in budget_bytes (floor(budget / kv_pool_block_bytes),
 * capped at INT32_MAX / block_size so positions fit in int32). 0 when the
 * arguments are invalid or the budget holds no block. */
int32_t kv_pool_blocks_for_budget(int32_t n_layer, int32_t kv_dim, int32_t block_size, kv_type_t type,
                                  size_t budget_bytes);
int32_t kv_pool_blocks_for_budget_q(int32_t n_layer, int32_t kv_dim, int32_t block_size, kv_type_t type,
                                    int32_t qblock, size_t budget_bytes);

/* Allocates zeroed K/V for n_blocks blocks of element type `type`
 * (zeroed so a forward pass that masks unwritten slots never meets NaN
 * garbage), without mapping its pages yet (kv_pool_prefault). Arguments must all be > 0, the type known and the total size
 * must fit in size_t; otherwise logs and returns NULL. Out of memory aborts
 * (xalloc). The hash root is seeded from getrandom(2). */
kv_pool_t *kv_pool_new(int32_t n_layer, int32_t kv_dim, int32_t n_blocks, int32_t block_size, kv_type_t type);
/* kv_pool_new for any type: a Q8_0 store with scales every qblock elements
 * (kv_store_qblock(head_dim)); F32/F16 ignore qblock. */
kv_pool_t *kv_pool_new_q(int32_t n_layer, int32_t kv_dim, int32_t n_blocks, int32_t block_size, kv_type_t type,
                         int32_t qblock);

/* Maps up to max_bytes more of the K/V pages ahead of use: kv_pool_new
 * maps none, so a start does not wait for hundreds of MiB to be zeroed, and
 * a page a step writes first is mapped then (a 2 MiB page fault). The owner
 * calls this while it has nothing else to do, a few MiB at a time; it never
 * changes a byte. Returns true while pages remain. */
bool kv_pool_prefault_step(kv_pool_t *pool, size_t max_bytes);
/* Maps the first `bytes` of every layer's K and V memory on a thread of
 * the pool's own, now: the blocks a pool hands out first (the lowest ids),
 * so that a request reaching a just-started worker (an on-demand start, a
 * prefix loaded from the disk tier) does not stop for them while the
 * start-up leaves the other core idle. The thread then maps ahead of use:
 * every layer's blocks up to a lead past the highest id handed out, so a
 * step does not fault fresh pages. Never changes a byte; kv_pool_free
 * stops and joins the thread. Once per pool. */
void kv_pool_prefault_head(kv_pool_t *pool, size_t bytes);

/* Frees the pool and its memory; NULLs *pool. Asserts no sequence is alive. */
void kv_pool_free(kv_pool_t **pool);

/* The K/V memory (owned by the pool). */
kv_store_t *kv_pool_store(kv_pool_t *pool);
int32_t kv_pool_block_size(const kv_pool_t *pool);

/* Blocks an allocation could get right now: free + evictable cached. */
int32_t kv_pool_n_available(const kv_pool_t *pool);

void kv_pool_stats(const kv_pool_t *pool, kv_pool_stats_t *out);

/* Attaches to the EMPTY sequence seq the longest chain of cached full blocks
 * matching tokens[0..n), incrementing their refs (an evictable block leaves
 * the LRU list), and records those tokens in seq. Never covers the whole
 * prompt: at most floor((n - 1) / block_size) blocks, so at least the last
 * token is recomputed and produces logits.
 * Returns the number of tokens covered (a multiple of block_size, >= 0), or
 * -1 (KV_POOL_EINVAL) when seq is not empty, belongs to another pool, n < 0
 * or tokens is NULL with n > 0. */
int32_t kv_pool_match_prefix(kv_pool_t *pool, const int32_t *tokens, int32_t n, kv_seq_t *seq);

/* Registers in the prefix cache every block of seq that became full since the
 * last call (call it after the forward pass wrote those positions). A block
 * whose content is already cached under the same parent is left uncached (it
 * is freed, not cached, when released). Returns the number of blocks newly
 * registered, or -1 when seq belongs to another pool. */
int32_t kv_pool_commit_full_blocks(kv_pool_t *pool, kv_seq_t *seq);

/* Consistency check for tests (O(n_blocks + total seq blocks), allocates):
 * every block in exactly one state, counters agree, ref == number of
 * references from live sequences, no sequence references a block twice,
 * hash map <-> cached flag, LRU and free stack well formed, cached blocks
 * referenced by a sequence hold that sequence's tokens, a sequence's
 * uncommitted blocks are exclusively owned. Returns 0, or -1 after logging
 * the first violation (log_error). */
int kv_pool_check(const kv_pool_t *pool);

/* Test hook: replaces the block hash (NULL restores the default) so tests can
 * force collisions. Only call on a pool with no cached blocks. */
typedef uint64_t (*kv_pool_hash_fn)(uint64_t parent_key, const int32_t *tokens, int32_t n);
void kv_pool_test_set_hash(kv_pool_t *pool, kv_pool_hash_fn fn);

/* ---- sequences ---------------------------------------------------------- */

/* A new empty sequence of pool (no blocks, no tokens). Free with kv_seq_free. */
kv_seq_t *kv_seq_new(kv_pool_t *pool);

/* Puts the EMPTY sequence seq in prefix-cache partition `partition` (0, the
 * default, for a new sequence): its blocks are matched against, and
 * registered under, that partition's chain only, in RAM and in the lower
 * tier (public keys from prefix_key_root(partition)). A release keeps it.
 * Returns KV_POOL_OK, or KV_POOL_EINVAL when seq holds blocks or tokens. */
int kv_seq_set_partition(kv_seq_t *seq, uint64_t partition);
uint64_t kv_seq_partition(const kv_seq_t *seq);

/* Releases seq's blocks (see kv_seq_release) and frees it; NULLs *seq. */
void kv_seq_free(kv_seq_t **seq);

/* Drops every block reference of seq, last logical block first (so a released
 * chain is evicted tail first), and empties it (0 tokens, 0 blocks); the
 * object stays usable, e.g. for a preempted request that will recompute.
 * Blocks reaching ref 0 become cached (if registered) or free. */
void kv_seq_release(kv_seq_t *seq);

/* Ensures seq has blocks for n more tokens beyond kv_seq_n_tokens(), taking
 * free blocks first, then evicting LRU cached blocks. All or nothing.
 * Returns KV_POOL_OK, KV_POOL_NO_CAPACITY (nothing allocated), or
 * KV_POOL_EINVAL (n < 0, or the total would exceed INT32_MAX tokens). */
int kv_seq_reserve(kv_seq_t *seq, int32_t n);

/* Records that tokens[0..n) occupy positions [n_tokens, n_tokens + n): the
 * forward pass writes their K/V there. The positions must be reserved.
 * Asserts every block written is exclusively owned and not cached.
 * Returns KV_POOL_OK or KV_POOL_EINVAL (n < 0, tokens NULL with n > 0, or
 * not enough reserved capacity). */
int kv_seq_append(kv_seq_t *seq, const int32_t *tokens, int32_t n);

/* Sliding-window models (every layer attends only to the last W positions,
 * model_kv_window): once no future row can read a block, the sequence lets it
 * go. Releases every block of seq whose positions all lie before `first`
 * (the lowest position any later row will read, pos - W + 1 of the next row)
 * and that is already committed (kv_pool_commit_full_blocks): it becomes
 * cached-evictable if registered (still in the prefix cache, so a later
 * prompt with the same prefix can reuse it), else free. Its table entry
 * becomes KV_SEQ_NO_BLOCK: "never read" — the forward pass must not touch
 * positions before `first` (forward_run checks only the entries a row reads).
 * Dropped blocks are always a prefix of the table (kv_seq_n_dropped of them);
 * kv_seq_n_blocks and kv_seq_capacity still count them, so positions keep
 * their logical block. Returns the number of blocks released now (>= 0). */
#define KV_SEQ_NO_BLOCK (-1)
int32_t kv_seq_drop_before(kv_seq_t *seq, int32_t first);
int32_t kv_seq_n_dropped(const kv_seq_t *seq);     /* leading entries released */
int32_t kv_seq_n_live(const kv_seq_t *seq);        /* blocks held: n_blocks - n_dropped */

int32_t kv_seq_n_tokens(const kv_seq_t *seq);      /* positions recorded */
int32_t kv_seq_n_blocks(const kv_seq_t *seq);      /* blocks in the table */
int32_t kv_seq_capacity(const kv_seq_t *seq);      /* n_blocks * block_size */
/* Physical block ids, kv_seq_n_blocks() entries (KV_SEQ_NO_BLOCK for the
 * first kv_seq_n_dropped()). */
const int32_t *kv_seq_block_table(const kv_seq_t *seq);
/* Token ids of positions [0, n_tokens). */
const int32_t *kv_seq_tokens(const kv_seq_t *seq);

/* ---- KV events (routing by cache, proto/msg.h KV) ------------------------ */

/* One change of the prefix cache, by public key (common/prefix_key.h). */
typedef struct kv_pool_event {
    uint64_t key;              /* public key of the block */
    bool added;                /* true: registered (now cached); false: evicted */
} kv_pool_event_t;

/* Starts logging cache changes into a ring of cap events (off by default:
 * only a worker that reports to a gateway needs them). When the reader falls
 * more than cap events behind, the log is dropped and the next take reports
 * overflow: the reader then sends the full set (kv_pool_cached_keys). If
 * blocks were already cached, the first take reports overflow too. */
void kv_pool_events_enable(kv_pool_t *pool, int32_t cap);

/* Moves up to max events, oldest first, into out and returns their count.
 * *overflow = true (and 0 returned, the log emptied) when events were lost
 * since the last take. */
int32_t kv_pool_events_take(kv_pool_t *pool, kv_pool_event_t *out, int32_t max, bool *overflow);

/* Public keys of every cached block (in use or not), at most max; returns the
 * count. max ≥ n_blocks gets them all. */
int32_t kv_pool_cached_keys(const kv_pool_t *pool, uint64_t *out, int32_t max);

/* ---- lower tier (worker/kv_disk.h) --------------------------------------- */

/* One block of a batched load (kv_pool_tier_t.load_batch). */
typedef struct kv_pool_tier_req {
    int32_t block;       /* in: the destination block of the store */
    uint64_t pub;        /* in: the block's public key */
    uint64_t parent_pub; /* in: expected; or out, when learning (a warm start) */
    int32_t *tokens;     /* (block_size) in: expected; or out, when learning */
    int rc;              /* out: 0 loaded, 1 not there, 2 rejected (the block holds junk) */
} kv_pool_tier_req_t;

/* A store below the RAM pool, by public key. Every function gets ud. */
typedef struct kv_pool_tier {
    void *ud;
    /* keep block `block` of st (evicted now, or flushed at a clean stop):
     * 0 when the tier holds pub afterwards, else -1 */
    int (*store)(void *ud, const kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub,
                 const int32_t *tokens);
    /* fill block `block` of st with pub's K/V, checked against parent_pub
     * and tokens: 0 loaded, else not (the block's contents are then junk) */
    int (*load)(void *ud, kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub,
                const int32_t *tokens);
    /* optional: r[0..n) at once (each rc set as load returns); learn: take
     * parent_pub and tokens from the tier (still checked by it) instead of
     * checking them; returns how many loaded */
    int32_t (*load_batch)(void *ud, kv_store_t *st, kv_pool_tier_req_t *r, int32_t n, bool learn);
    /* optional: up to max keys, most recent first (a warm start's order) */
    int32_t (*recent_keys)(void *ud, uint64_t *out, int32_t max);
    bool (*has)(void *ud, uint64_t pub);
    int32_t (*n_keys)(void *ud);
    int32_t (*keys)(void *ud, uint64_t *out, int32_t max);
    /* keys the tier no longer holds since the last call */
    int32_t (*take_dropped)(void *ud, uint64_t *out, int32_t max);
} kv_pool_tier_t;

/* Puts `tier` (copied; NULL detaches) under the pool:
 *   - every block registered by kv_pool_commit_full_blocks is stored at
 *     once (write-through: a process killed without warning has lost no
 *     committed block);
 *   - an evicted cached block is stored (a no-op when the tier has it); if
 *     the tier then holds it, no eviction event is logged (the replica
 *     still has the prefix);
 *   - kv_pool_match_prefix continues past the RAM chain: each next block
 *     of the prompt (same limit: never the whole prompt) is a warm block
 *     with its public key, parent public key and token ids (no I/O), or
 *     is loaded from the tier into a newly taken block (runs of blocks the
 *     tier has in one load_batch when it has one), registered in the
 *     prefix cache like a committed one and attached to the sequence,
 *     until a miss or no block is available (n_tier_hit_tokens counts the
 *     loaded ones, n_warm_hit_tokens the warm ones);
 *   - keys the tier drops are logged as evicted unless RAM has them, and
 *     kv_pool_held_keys reports both tiers. */
void kv_pool_set_tier(kv_pool_t *pool, const kv_pool_tier_t *tier);

/* Warm start: after a (re)start the tier's most recent blocks are loaded
 * into FREE blocks while the owner is idle, so a prompt that comes back
 * finds its prefix in RAM. kv_pool_warm_begin plans up to max_blocks of the
 * tier's keys, most recent first (needs recent_keys and load_batch; a
 * second call replans). kv_pool_warm_step loads up to n of them at once
 * (load_batch with learn: the tier checks the MAC and the header, which
 * gives the parent key and token ids) into free blocks — never evicting,
 * and stopping for good when no block is free — skipping keys RAM already
 * holds; each becomes a warm block: kv_pool_match_prefix adopts it when a
 * prompt's block has the same public key, parent public key and token ids
 * (the checks a load from the tier makes). Returns true while planned keys
 * remain. A warm block nobody uses is evicted before any cached block. */
void kv_pool_warm_begin(kv_pool_t *pool, int32_t max_blocks);
bool kv_pool_warm_step(kv_pool_t *pool, int32_t n);

/* Stores every cached block in the tier (a clean stop keeps the hot set).
 * Returns how many the tier holds afterwards; 0 without a tier. */
int32_t kv_pool_tier_flush(kv_pool_t *pool);

/* Public keys held by RAM or the tier (a key in both may appear twice):
 * kv_pool_n_held_keys bounds the count, kv_pool_held_keys fills out with up
 * to max of them and returns how many. */
int32_t kv_pool_n_held_keys(const kv_pool_t *pool);
int32_t kv_pool_held_keys(const kv_pool_t *pool, uint64_t *out, int32_t max);

#endif
