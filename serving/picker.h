/* picker.h - which endpoint of an LLM pool gets a request (issue 24, SPEC.md
 * "LLM pools", docs/LLM.md "Picking an endpoint"): a pure function of the
 * endpoints' states as the pool sees them (their last scrape, batchgate's own
 * calls in flight), the request's leading blocks and the clock, plus one
 * table of its own, the prefix affinity table. No I/O, no clock of its own.
 *
 * Policies: PICKER_ROUND_ROBIN and PICKER_LEAST_INFLIGHT are the baselines;
 * PICKER_SCORE (the default) picks the endpoint of least cost
 *
 *   cost(e) = w_queue * lq(e) + w_kv_cache * lk(e) - w_prefix * f(e) * keep(e)
 *
 *   lq(e) = q(e) / sat_waiting          the queue a request would join, against saturation
 *   lk(e) = kv(e) / sat_kv_cache        KV cache in use, against saturation
 *   L(e)  = max(lq(e), lk(e))           how near saturation e is (1: saturated)
 *   f(e)  = credit(e) / nblocks         how much of this request's prefix e alone holds
 *   keep(e) = max(0, 1 - L(e)), among saturated endpoints max(0, 1 - L(e) / 2)
 *
 * Fresh metrics (a scrape within PICKER_STALE_INTERVALS metrics intervals
 * that recognised the server): delta = inflight - inflight_at_scrape, the
 * calls batchgate sent since the scrape less those that ended since.
 *   q  = waiting + max(0, delta); with slots (llama-server's -np) the new
 *        calls take free slots first: waiting + max(0, delta - (slots - running)).
 *   kv = max(0, kv_cache + delta * kv_cache / running): each call since the
 *        scrape as much KV as a running one. No KV gauge (llama-server,
 *        TGI) but slots: slot use stands in at half weight,
 *        lk = 0.5 * min(1, (running + delta) / slots), so a free slot is
 *        preferred but full slots alone never saturate; neither: lk = 0.
 * Stale or never scraped: batchgate's inflight alone, q = inflight (beyond
 * slots, with slots), lk from inflight / slots as above.
 *
 * credit(e): the run of the request's leading blocks the affinity table says
 * e was sent, up to the deepest one e holds (blocks are chained hashes, so
 * holding block i means holding 0..i), each block weighed by how few other
 * endpoints may hold it: 1 - (sent - listed) / (n - listed), sent being how
 * many endpoints the block was recorded for and listed how many the table
 * still names. A block every endpoint was sent (a system prompt in every
 * request) weighs nothing: favouring the few the table lists would pile the
 * pool onto them for nothing.
 *
 * The prefix is worth less as its holder fills, nothing at saturation. With
 * the defaults (1, 1, 2), against idle peers a holder of the whole prefix
 * that no one else has keeps getting it until L = 2/3, a holder of half of
 * it until L = 1/2; then it spills to the least loaded, which
 * records the blocks and becomes a second holder. A saturated endpoint (lq
 * >= 1, or the scraped kv_cache >= sat_kv_cache) is chosen only when every
 * candidate is; then the prefix still counts, so an overloaded pool keeps
 * its caches rather than computing every prefix everywhere (there it keeps
 * half its worth at saturation, nothing from twice it; a discount
 * reaching 0 at saturation lost them in the trace test at 300 requests/s:
 * 30% of prompt tokens cached and p99 TTFT 17 s, against 64% and 0.8 s).
 * Equal costs go to the endpoint with fewer calls in flight, then to the
 * first after the last pick (so equal endpoints take turns).
 *
 * Everything is read under one mutex: IO threads call in concurrently. */
#ifndef BG_PICKER_H
#define BG_PICKER_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "serving/scrape.h"

#define PICKER_BLOCK_BYTES 64      /* ~16 tokens of English: vLLM's and llmsim's block */
#define PICKER_MAX_BLOCKS 256      /* a sensible max for picker_prefix_hashes (16 KiB of prompt) */
#define PICKER_STALE_INTERVALS 3   /* metrics older than this many intervals are stale */
#define PICKER_HOLDERS 8           /* endpoints remembered per block, the latest */

enum picker_policy { PICKER_SCORE, PICKER_ROUND_ROBIN, PICKER_LEAST_INFLIGHT };

struct picker_config {
    enum picker_policy policy;
    double w_queue, w_kv_cache, w_prefix;   /* SPEC's picker.weights: queue, kv_cache, prefix (defaults 1, 1, 2) */
    double sat_waiting;                      /* saturation.waiting: queue length at which an endpoint is saturated (default 8) */
    double sat_kv_cache;                     /* saturation.kv_cache (default 0.9) */
    int affinity_entries;                    /* prefix table capacity in blocks (default 65536), LRU */
    int metrics_interval_ms;                 /* the pool's metrics_interval_ms (default 200): staleness */
};

/* The defaults above. */
void picker_config_defaults(struct picker_config *c);
/* "score", "round_robin", "least_inflight"; -1 for another name. */
int picker_policy_from_name(const char *name);

struct picker_endpoint {       /* one endpoint as the pool sees it now */
    bool usable;               /* healthy (not taken out) */
    int inflight;              /* batchgate's own calls in flight to it */
    struct scrape_load load;   /* last scrape (fields -1 when unknown) */
    int64_t scraped_ns;        /* when; 0 never */
    int slots;                 /* optional capacity hint (e.g. llama-server -np), 0 unknown */
    /* inflight when that scrape was taken: calls the scrape may count
     * already. Left 0, every call in flight counts as unseen (safe: more
     * spreading, never herding). */
    int inflight_at_scrape;
    int offline_inflight;      /* of `inflight`, the offline (Batch API) calls */
    /* of `inflight`, streamed calls with no content back yet: waiting there
     * or being prefilled. A server that batches continuously admits them at
     * once (its `waiting` stays 0) and its steps grow instead: this count is
     * what a new call waits behind, known without a scrape. */
    int starting;
};

struct picker;  /* opaque: policy, round-robin cursor, the prefix affinity table; thread-safe */

/* NULL on a bad config (a negative weight, saturation not positive,
 * nendpoints < 1, affinity_entries < 1) or no memory. The table is
 * allocated here, once: about 100 bytes a block (6 MB at 65536). */
struct picker *picker_new(const struct picker_config *cfg, int nendpoints);
void picker_free(struct picker *p);

/* The prefix of a prompt as chained hashes of its leading blocks: block i's
 * hash = H(hash of block i-1, bytes of block i), blocks of PICKER_BLOCK_BYTES
 * bytes of the prompt text; only whole blocks; at most max. Returns the
 * count. Never 0 as a hash. Not a cryptographic hash: a collision made on
 * purpose only steers the caller's own request. */
int picker_prefix_hashes(const char *text, size_t len, uint64_t *out, int max);

/* Chooses among eps[0..n) (n <= nendpoints) skipping those whose bit is set
 * in `tried` (endpoint e < 32 is bit e; picker_pick_except takes any
 * index); -1 when none is usable and untried. *why (optional) gets a short
 * reason for logs ("prefix 12/14 blocks", "least loaded", "all saturated",
 * "round robin", "least inflight"), valid until this thread's next pick. */
int picker_pick(struct picker *p, const struct picker_endpoint *eps, int n, const uint64_t *blocks,
                int nblocks, unsigned tried, int64_t now_ns, const char **why);
/* The same with the endpoints already tried as a list (pools of more than
 * 32 endpoints). */
int picker_pick_except(struct picker *p, const struct picker_endpoint *eps, int n,
                       const uint64_t *blocks, int nblocks, const int *tried, int ntried,
                       int64_t now_ns, const char **why);

/* After a call was sent to endpoint e: remember that e now holds these
 * blocks (the server caches the prompt). LRU-bounded by affinity_entries
 * blocks, each remembering its PICKER_HOLDERS latest endpoints. */
void picker_record(struct picker *p, int e, const uint64_t *blocks, int nblocks);
/* The same for a call whose first token has not come back: where e was not
 * yet a holder of a block it becomes a *pending* one, which earns no credit
 * until picker_confirm (its server is still computing those blocks: a call
 * sent there now would wait behind that prefill), and whose presence keeps
 * the prefix's next calls on its confirmed holders while they are not
 * saturated (a prefix gains one new holder at a time). */
void picker_record_pending(struct picker *p, int e, const uint64_t *blocks, int nblocks);
/* e's first token for those blocks came back: its pending holds of them
 * are holds. A call that fails first leaves them pending (no credit) until
 * another call to e confirms them or they are evicted. */
void picker_confirm(struct picker *p, int e, const uint64_t *blocks, int nblocks);
/* An endpoint was taken out / lost its cache (restart): forgets its blocks
 * (a scan of the table: rare). */
void picker_forget(struct picker *p, int e);
/* Whether every usable endpoint is saturated (for shedding low priorities:
 * SPEC "Priority"); false when none is usable (that is an error to answer,
 * not a load to shed). */
bool picker_saturated(struct picker *p, const struct picker_endpoint *eps, int n, int64_t now_ns);
/* Idle capacity for offline work (the Batch API's lines, docs/LLM.md "Batch
 * API"): the pool's `offline` settings. */
struct picker_idle {
    int max_running;           /* the server's running + batchgate's unseen calls stay below it */
    int max_inflight;          /* offline calls in flight per endpoint, at most */
};
/* The endpoint an offline call may take now, or -1: one that is usable, has
 * fresh metrics that recognised the server, reported no request waiting,
 * is not saturated (queue or KV cache, as picker_pick judges it), whose
 * running count plus the calls batchgate sent since that scrape (online and
 * offline: inflight - inflight_at_scrape) is below max_running, and that
 * has fewer than max_inflight offline calls. Among those, the least running,
 * then the fewest offline calls, then the lowest index; the endpoints in
 * skip[0..nskip) are passed over (those a retried line has tried). Stale or never
 * scraped metrics say nothing of what waits there: no offline call goes. */
int picker_pick_idle(const struct picker *p, const struct picker_endpoint *eps, int n,
                     const struct picker_idle *idle, const int *skip, int nskip, int64_t now_ns);

/* Blocks in the affinity table now (tests, stats). */
int picker_table_size(struct picker *p);
/* Table entries naming endpoint e as a holder (picker_forget walks the
 * table only while this is above 0). */
int picker_held(struct picker *p, int e);

#endif
