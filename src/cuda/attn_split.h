/*
 * The split-K rule of the main pass (host code, also compiled into test_cuda's host checks): how
 * many 16-token tiles a chunk takes, i.e. how many blocks read one (sequence, KV head, query group).
 *
 * Cost model (issue 17, session 11; measured on the H200, docs/RESULTS.md "Split-K at small batch
 * and the profile"): a block costs (tiles per warp + C0) tile times, C0 = 8 its fixed part (pipeline
 * fill, table build, block merge, partial state), and an SM runs its blocks one after the other at
 * the same rate whether one or two are resident (one block of 8 warps already streams at the SM's
 * share of DRAM: 16 x 32K, 2 blocks of 64 tiles a warp per SM, and 1 x 32K, 1 block of 16, read
 * ~14 tiles/us per SM alike). So the time is ceil(blocks / SMs) x (tiles per warp + C0), and the
 * rule picks the chunking that minimises it: the longest chunks that still give every SM a block.
 * The forced-chunk sweep (cuda_attn --chunks, 16..512 tiles, tq-mse:4/4, 2/2, q8 at 1 x 32K,
 * 1 x 128K, 4 x 32K, 4 x 128K, 16 x 32K) has this rule within 0.7% of its best chunking on
 * average (worst 4%), where the former rule (about 2 waves of resident-block slots) was up to 35%
 * slower at 1 x 32K: deeper splits lost everywhere.
 */
#ifndef KVQ_ATTN_SPLIT_H
#define KVQ_ATTN_SPLIT_H

namespace kvqa {

/* Tiles per chunk (a multiple of nw, at least 4 per warp, at most tpw_max per warp) for `tiles`
 * 16-token tiles of the longest sequence, `items` (sequence, KV head, query group) work items,
 * `sms` multiprocessors, nw warps per block. */
inline int split_chunk_tiles(int tiles, long long items, int sms, int nw, int tpw_max) {
    constexpr int C0 = 8; /* fixed cost of a block, in tiles per warp */
    const int cmin = 4 * nw, cmax = tpw_max * nw;
    if (tiles <= 0 || items <= 0 || sms <= 0) return cmin;
    long long best = -1;
    int ct = cmin;
    const int nmax = tiles / cmin > 1 ? tiles / cmin : 1;
    for (int n = 1; n <= nmax; n++) {
        int c = (tiles + n - 1) / n;
        c = ((c + nw - 1) / nw) * nw;
        if (c > cmax || (n > 1 && c < cmin)) continue;
        const long long blocks = items * ((tiles + c - 1) / c);
        const long long cost = ((blocks + sms - 1) / sms) * (c / nw + C0);
        if (best < 0 || cost < best) best = cost, ct = c;
    }
    return ct < cmin ? cmin : ct;
}

} /* namespace kvqa */

#endif
