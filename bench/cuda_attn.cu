/*
 * cuda_attn — decode attention and encode speed of the CUDA backend
 * (docs/CUDA.md, docs/RESULTS.md "CUDA (H200)").
 *
 * For every (batch x context) shape and K/V policy: a paged cache filled
 * with random rows encoded by the GPU (pages shuffled in the pool, P = 256),
 * 32 query heads over 8 KV heads, head dim 128, no f16 window; one decode
 * step timed with CUDA events around kvq_cuda_attend (query prep + split-K
 * kernel + merge), after warm-up, median of many runs; the cache is
 * replicated into enough copies (>= 256 MB in all) that successive runs
 * rotate through them and the 60 MB L2 cannot hold the working set.
 * Bandwidth = compressed bytes read (every K and V record of every
 * position) / time, compared with a measured device-to-device copy (bytes
 * read + written / time). Encode: vectors per second of kvq_cuda_encode on
 * 4M rows (f32 and f16 input).
 * --dim D: head dim D instead of 128 (f16, q8, tq-mse:2/3/4, tcq:2/3/4 at 64 and 256 run the tensor-core kernel,
 * the rest and 96 the generic kernel). --heads HQ H: HQ query heads over H KV heads (Gemma 3 270M:
 * 4 over 1). --generic: the main pass on the generic kernel (its baseline for a tensor-core pair).
 * Calibrated policies (+center, +chscale; e.g. --policy tq-mse:4+chscale/tq-mse:4): one CPU plan per
 * KV head fitted to 64 random calibration rows (channel means ~ N(0, 4), channel scales e^N(0, 0.64)), as
 * the C cache fits one per head, uploaded with kvq_cuda_plan_create_heads.
 * A policy's sink=S (e.g. tq-mse:5+chscale/tcq:3,sink=1, the README's): S f16 sink rows a sequence
 * before its ctx paged positions (read by the window pass).
 * --chunks T1,T2,...: the split-K sweep (issue 17): after the rule's chunking, the same cache timed with
 * each forced chunk of Ti 16-token tiles (kvq_cuda_layer_force_chunk; a multiple of the block's warps, at
 * most 32 per warp, 64 for the wide-table kernel; others are skipped), one line each ("chunk=Ti").
 * Usage: cuda_attn [--quick] [--json FILE] [--runs N] [--dim D] [--heads HQ H] [--generic] [--policy NAME]
 *                  [--shape B CTX] [--chunks T1,T2,...]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kvq.h"
#include "kvq_cuda.h"

/* internal (attn.cu): the main pass on the generic kernel */
extern "C" int kvq_cuda_layer_force_generic(kvq_cuda_layer *L);
extern "C" int kvq_cuda_layer_force_chunk(kvq_cuda_layer *L, int tiles_per_chunk);
static const char *g_chunks; /* --chunks: forced tiles per chunk to sweep, comma-separated */

#define CU(expr)                                                                                      \
    do {                                                                                              \
        cudaError_t _e = (expr);                                                                      \
        if (_e != cudaSuccess) {                                                                      \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e));     \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)
#define OK(expr)                                                                                             \
    do {                                                                                                     \
        int _rc = (expr);                                                                                    \
        if (_rc) {                                                                                           \
            fprintf(stderr, "%s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #expr, _rc, kvq_strerror(_rc));     \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static FILE *g_json = NULL;

__global__ void fill_gauss(float *x, size_t n, unsigned long long seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float u1 = ((z >> 40) + 1) * (1.0f / 16777217.0f), u2 = ((z >> 16) & 0xffffff) * (1.0f / 16777216.0f);
        x[i] = scale * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    }
}

static double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

static double copy_bandwidth(void) {
    const size_t bytes = (size_t)2 << 30;
    void *a, *b;
    CU(cudaMalloc(&a, bytes));
    CU(cudaMalloc(&b, bytes));
    CU(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int i = 0; i < 25; i++) {
        CU(cudaEventRecord(e0));
        CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        CU(cudaEventRecord(e1));
        CU(cudaEventSynchronize(e1));
        float ms;
        CU(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 5) t.push_back(ms);
    }
    const double ms = median(t), gbps = 2.0 * bytes / (ms * 1e-3) / 1e9;
    printf("device-to-device copy: %.1f GB/s (read + write of %zu MiB, median of %zu)\n", gbps, bytes >> 20, t.size());
    if (g_json) fprintf(g_json, "{\"bench\":\"copy\",\"bytes\":%zu,\"ms\":%.4f,\"gbps\":%.1f}\n", bytes, ms, gbps);
    CU(cudaFree(a));
    CU(cudaFree(b));
    CU(cudaEventDestroy(e0));
    CU(cudaEventDestroy(e1));
    return gbps;
}

static void bench_encode(const char *spec, kvq_dtype dt) {
    const int d = 128;
    const size_t n = (size_t)4 << 20;
    kvq_plan *p;
    OK(kvq_plan_create(&p, spec, d, 1, NULL, 0));
    kvq_cuda_plan *cp;
    OK(kvq_cuda_plan_create(&cp, p));
    float *x;
    void *xin, *codes;
    int *st;
    CU(cudaMalloc(&x, n * d * 4));
    CU(cudaMalloc(&codes, n * kvq_plan_code_bytes(p)));
    CU(cudaMalloc(&st, 4));
    CU(cudaMemset(st, 0, 4));
    fill_gauss<<<1024, 256>>>(x, n * d, 7, 1.0f);
    xin = x;
    if (dt == KVQ_DTYPE_F16) { /* f16 copy of the rows through the f16 encoder */
        kvq_plan *ph;
        kvq_cuda_plan *ch;
        OK(kvq_plan_create(&ph, "f16", d, 1, NULL, 0));
        OK(kvq_cuda_plan_create(&ch, ph));
        CU(cudaMalloc(&xin, n * d * 2));
        OK(kvq_cuda_encode(ch, x, KVQ_DTYPE_F32, n, xin, st, NULL));
        kvq_cuda_plan_free(ch);
        kvq_plan_free(ph);
    }
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int i = 0; i < 13; i++) {
        CU(cudaEventRecord(e0));
        OK(kvq_cuda_encode(cp, xin, dt, n, codes, st, NULL));
        CU(cudaEventRecord(e1));
        CU(cudaEventSynchronize(e1));
        float ms;
        CU(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3) t.push_back(ms);
    }
    int s;
    CU(cudaMemcpy(&s, st, 4, cudaMemcpyDeviceToHost));
    const double ms = median(t), vps = n / (ms * 1e-3);
    const char *dn = dt == KVQ_DTYPE_F16 ? "f16" : "f32";
    printf("encode %-10s d=%d %s input: %.3f ms for %zu vectors = %.2f G vectors/s (status %d)\n", spec, d, dn, ms, n,
           vps / 1e9, s);
    if (g_json)
        fprintf(g_json, "{\"bench\":\"encode\",\"spec\":\"%s\",\"dim\":%d,\"input\":\"%s\",\"n\":%zu,\"ms\":%.4f,\"vec_per_s\":%.4g}\n",
                spec, d, dn, n, ms, vps);
    if (xin != x) CU(cudaFree(xin));
    CU(cudaFree(x));
    CU(cudaFree(codes));
    CU(cudaFree(st));
    kvq_cuda_plan_free(cp);
    kvq_plan_free(p);
}

struct Policy {
    const char *name, *k, *v;
    int sink; /* S f16 sink rows a sequence (the policy's sink=S: kvq_cuda_layer_config.sink), before the pages */
};

/* The device plan of spec for H KV heads (*first: the CPU plan of head 0, for its sizes; *cpu: all of
 * them, freed by free_plans): calibrated specs get one plan per head fitted to random rows. */
static kvq_cuda_plan *make_plan(const char *spec, int D, uint64_t seed, int H, std::vector<kvq_plan *> &cpu) {
    int needs = 0;
    OK(kvq_spec_needs_calibration(spec, &needs));
    kvq_cuda_plan *cp;
    cpu.assign(needs ? H : 1, NULL);
    if (!needs) {
        OK(kvq_plan_create(&cpu[0], spec, D, seed, NULL, 0));
        OK(kvq_cuda_plan_create(&cp, cpu[0]));
        return cp;
    }
    const int n = 64;
    std::vector<float> cal((size_t)n * D), mean(D), sg(D);
    unsigned long long rs = seed * 0x9e3779b97f4a7c15ull + 1;
    auto gauss = [&rs]() { /* Box-Muller on a 64-bit LCG */
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        const double u = ((rs >> 11) + 1) * (1.0 / 9007199254740993.0);
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        const double v = (rs >> 11) * (1.0 / 9007199254740992.0);
        return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
    };
    for (int h = 0; h < H; h++) {
        for (int c = 0; c < D; c++) mean[c] = (float)(2 * gauss()), sg[c] = (float)exp(0.8 * gauss());
        for (int i = 0; i < n; i++)
            for (int c = 0; c < D; c++) cal[(size_t)i * D + c] = (float)(mean[c] + sg[c] * gauss());
        OK(kvq_plan_create(&cpu[h], spec, D, seed, cal.data(), n));
    }
    OK(kvq_cuda_plan_create_heads(&cp, (const kvq_plan *const *)cpu.data(), H));
    return cp;
}
static void free_plans(std::vector<kvq_plan *> &cpu) {
    for (kvq_plan *p : cpu) kvq_plan_free(p);
    cpu.clear();
}

static void bench_attn(const Policy &pol, int B, int ctx, int runs, double copy_gbps, int D, int HQ, int H,
                       bool generic) {
    const int P = 256;
    std::vector<kvq_plan *> kps, vps;
    kvq_cuda_plan *ck = make_plan(pol.k, D, 11, H, kps), *cv = make_plan(pol.v, D, 12, H, vps);
    const kvq_plan *kp = kps[0], *vp = vps[0];
    kvq_cuda_layer_config cfg = {ck, cv, H, HQ, P, 0, pol.sink};
    kvq_cuda_layer *L;
    OK(kvq_cuda_layer_create(&L, &cfg));
    if (generic) OK(kvq_cuda_layer_force_generic(L));
    const size_t page_bytes = kvq_cuda_layer_page_bytes(L);
    const int pps = (ctx + P - 1) / P, npages = B * pps;
    const size_t pool = (size_t)npages * page_bytes;
    const size_t read_bytes = (size_t)B * ctx * H * (kvq_plan_code_bytes(kp) + kvq_plan_code_bytes(vp));
    int copies = (int)((256ull << 20) / pool) + 1;
    if (copies > 64) copies = 64;
    /* block table: shuffled pages */
    std::vector<int32_t> perm(npages), bt((size_t)B * pps);
    for (int i = 0; i < npages; i++) perm[i] = i;
    unsigned long long rs = 12345;
    for (int i = npages - 1; i > 0; i--) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(perm[i], perm[(int)((rs >> 33) % (unsigned long long)(i + 1))]);
    }
    for (size_t i = 0; i < bt.size(); i++) bt[i] = perm[i];
    std::vector<uint8_t *> pages(copies);
    for (int c = 0; c < copies; c++) CU(cudaMalloc(&pages[c], pool));
    int32_t *dbt, *dml, *dslot;
    int *dst;
    float *x;
    CU(cudaMalloc(&dbt, bt.size() * 4));
    CU(cudaMemcpy(dbt, bt.data(), bt.size() * 4, cudaMemcpyHostToDevice));
    CU(cudaMalloc(&dml, B * 4));
    std::vector<int32_t> ml(B, ctx);
    CU(cudaMemcpy(dml, ml.data(), B * 4, cudaMemcpyHostToDevice));
    CU(cudaMalloc(&dslot, (size_t)ctx * 4));
    CU(cudaMalloc(&dst, 4));
    CU(cudaMemset(dst, 0, 4));
    CU(cudaMalloc(&x, (size_t)ctx * H * D * 4));
    std::vector<int32_t> slots(ctx);
    for (int s = 0; s < B; s++) {
        for (int t = 0; t < ctx; t++) slots[t] = bt[(size_t)s * pps + t / P] * P + t % P;
        CU(cudaMemcpy(dslot, slots.data(), (size_t)ctx * 4, cudaMemcpyHostToDevice));
        for (int kv = 0; kv < 2; kv++) {
            fill_gauss<<<1024, 256>>>(x, (size_t)ctx * H * D, 1000 * s + kv, 1.0f);
            OK(kvq_cuda_store_pages(L, kv, pages[0], x, KVQ_DTYPE_F32, ctx, dslot, dst, NULL));
        }
    }
    for (int c = 1; c < copies; c++) CU(cudaMemcpy(pages[c], pages[0], pool, cudaMemcpyDeviceToDevice));
    /* the sinks (sink=S): positions 0..S-1 of every sequence as f16 rows, the pages after them */
    void *sink = NULL;
    int32_t *dsl = NULL;
    if (pol.sink) {
        const int ns = B * pol.sink;
        CU(cudaMalloc(&sink, kvq_cuda_layer_sink_bytes(L, B)));
        std::vector<int32_t> sseq(ns), spos(ns), sl(B, pol.sink);
        for (int i = 0; i < ns; i++) sseq[i] = i / pol.sink, spos[i] = i % pol.sink;
        int32_t *dseq, *dpos;
        CU(cudaMalloc(&dseq, ns * 4));
        CU(cudaMalloc(&dpos, ns * 4));
        CU(cudaMalloc(&dsl, B * 4));
        CU(cudaMemcpy(dseq, sseq.data(), ns * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dpos, spos.data(), ns * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dsl, sl.data(), B * 4, cudaMemcpyHostToDevice));
        for (int kv = 0; kv < 2; kv++) {
            fill_gauss<<<64, 256>>>(x, (size_t)ns * H * D, 7000 + kv, 1.0f);
            OK(kvq_cuda_store_sink(L, kv, sink, x, KVQ_DTYPE_F32, ns, dseq, dpos, dst, NULL));
        }
        CU(cudaFree(dseq));
        CU(cudaFree(dpos));
    }
    int st;
    CU(cudaMemcpy(&st, dst, 4, cudaMemcpyDeviceToHost));
    if (st) fprintf(stderr, "store status %d\n", st);
    std::vector<float *> q(copies);
    float *out;
    for (int c = 0; c < copies; c++) {
        CU(cudaMalloc(&q[c], (size_t)B * HQ * D * 4));
        fill_gauss<<<64, 256>>>(q[c], (size_t)B * HQ * D, 99 + c, 1.0f);
    }
    CU(cudaMalloc(&out, (size_t)B * HQ * D * 4));
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    const float scale = 1.0f / sqrtf((float)D);
    /* one timing of the current chunking; ct: the forced tiles per chunk, 0 for the rule */
    auto timing = [&](int ct) {
        std::vector<float> t;
        const int warm = 5;
        for (int i = 0; i < warm + runs; i++) {
            const int c = i % copies;
            kvq_cuda_batch b = {B, pages[c], dbt, pps, dml, NULL, NULL, ctx, NULL, dsl, sink};
            CU(cudaEventRecord(e0));
            OK(kvq_cuda_attend(L, &b, q[c], scale, out, NULL));
            CU(cudaEventRecord(e1));
            CU(cudaEventSynchronize(e1));
            float ms;
            CU(cudaEventElapsedTime(&ms, e0, e1));
            if (i >= warm) t.push_back(ms);
        }
        CU(cudaGetLastError());
        std::vector<float> o((size_t)B * HQ * D);
        CU(cudaMemcpy(o.data(), out, o.size() * 4, cudaMemcpyDeviceToHost));
        int nonfinite = 0;
        for (float v : o) nonfinite += !isfinite(v);
        const double ms = median(t), gbps = read_bytes / (ms * 1e-3) / 1e9;
        char heads[48] = "", chunk[32] = "";
        if (HQ != 32 || H != 8) snprintf(heads, sizeof heads, ", HQ %d / H %d", HQ, H);
        if (ct) snprintf(chunk, sizeof chunk, ", chunk=%d", ct);
        printf("%-22s d=%3d B=%3d ctx=%6d: %9.1f us  %8.1f GB/s  %5.1f%% of copy  (%.1f MB read, %d copies%s%s%s%s)\n",
               pol.name, D, B, ctx, ms * 1e3, gbps, 100 * gbps / copy_gbps, read_bytes / 1e6, copies, heads,
               generic ? ", generic kernel" : "", chunk, nonfinite ? ", NON-FINITE OUTPUT" : "");
        fflush(stdout);
        if (g_json)
            fprintf(g_json,
                    "{\"bench\":\"attn\",\"policy\":\"%s\",\"k\":\"%s\",\"v\":\"%s\",\"batch\":%d,\"ctx\":%d,\"hq\":%d,\"hkv\":%d,"
                    "\"dim\":%d,\"us\":%.2f,\"bytes\":%zu,\"gbps\":%.1f,\"copy_gbps\":%.1f,\"copies\":%d,\"runs\":%d,"
                    "\"generic\":%d,\"chunk\":%d}\n",
                    pol.name, pol.k, pol.v, B, ctx, HQ, H, D, ms * 1e3, read_bytes, gbps, copy_gbps, copies, runs,
                    generic ? 1 : 0, ct);
    };
    timing(0);
    for (const char *c = g_chunks; c && *c;) {
        const int ct = atoi(c);
        if (ct > 0 && kvq_cuda_layer_force_chunk(L, ct) == KVQ_OK) timing(ct);
        c = strchr(c, ',');
        if (c) c++;
    }
    if (g_chunks) OK(kvq_cuda_layer_force_chunk(L, 0));
    for (int c = 0; c < copies; c++) {
        CU(cudaFree(pages[c]));
        CU(cudaFree(q[c]));
    }
    CU(cudaFree(dbt));
    CU(cudaFree(dml));
    CU(cudaFree(sink));
    CU(cudaFree(dsl));
    CU(cudaFree(dslot));
    CU(cudaFree(dst));
    CU(cudaFree(x));
    CU(cudaFree(out));
    CU(cudaEventDestroy(e0));
    CU(cudaEventDestroy(e1));
    kvq_cuda_layer_free(L);
    kvq_cuda_plan_free(ck);
    kvq_cuda_plan_free(cv);
    free_plans(kps);
    free_plans(vps);
}

int main(int argc, char **argv) {
    bool quick = false, no_encode = false;
    int runs = 50, only_b = 0, only_ctx = 0, dim = 128, hq = 32, hkv = 8;
    bool generic = false;
    const char *only_pol = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--no-encode")) no_encode = true;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) g_json = fopen(argv[++i], "w");
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dim") && i + 1 < argc) dim = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--heads") && i + 2 < argc) hq = atoi(argv[++i]), hkv = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--generic")) generic = true;
        else if (!strcmp(argv[i], "--policy") && i + 1 < argc) only_pol = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 2 < argc) only_b = atoi(argv[++i]), only_ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunks") && i + 1 < argc) g_chunks = argv[++i];
    }
    if (kvq_cuda_device_count() <= 0) {
        fprintf(stderr, "cuda_attn: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("device: %s, %d SMs, %.0f MB L2, driver API %d, runtime %d\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize / 1e6, drv, rt);
    if (g_json)
        fprintf(g_json, "{\"bench\":\"device\",\"name\":\"%s\",\"sms\":%d,\"l2\":%d,\"driver\":%d,\"runtime\":%d}\n",
                prop.name, prop.multiProcessorCount, prop.l2CacheSize, drv, rt);
    const double cbw = copy_bandwidth();
    const char *encs[] = {"tq-mse:4", "tq-mse:2", "q8", "rvq:2", "tq-prod:3", "qjl"};
    for (const char *e : encs) {
        if (no_encode) break;
        bench_encode(e, KVQ_DTYPE_F32);
        if (!strcmp(e, "tq-mse:4")) bench_encode(e, KVQ_DTYPE_F16);
        if (quick) break;
    }
    const Policy pols[] = {{"f16", "f16", "f16", 0},
                           {"q8", "q8", "q8", 0},
                           {"tq-mse:4/4", "tq-mse:4", "tq-mse:4", 0},
                           {"tq-mse:2/2", "tq-mse:2", "tq-mse:2", 0},
                           {"tq-mse:4/2", "tq-mse:4", "tq-mse:2", 0},
                           {"tq-mse:2/4", "tq-mse:2", "tq-mse:4", 0},
                           {"tq-mse:3/3", "tq-mse:3", "tq-mse:3", 0},
                           {"tq-prod:3/tq-mse:2", "tq-prod:3", "tq-mse:2", 0},
                           {"rvq:2/2", "rvq:2", "rvq:2", 0},
                           {"tq-mse:4+chscale/tq-mse:4", "tq-mse:4+chscale", "tq-mse:4", 0},
                           /* tcq (issue 17; d = 128: the classic kernel, tq-mse:5 keys: the generic one) */
                           {"tcq:3/tcq:3", "tcq:3", "tcq:3", 0},
                           {"tcq:2/tcq:2", "tcq:2", "tcq:2", 0},
                           {"tcq:4/tcq:4", "tcq:4", "tcq:4", 0},
                           {"tq-mse:4/tcq:3", "tq-mse:4", "tcq:3", 0},
                           {"q8/tcq:3", "q8", "tcq:3", 0},
                           {"tq-mse:5+chscale/tcq:3,sink=1", "tq-mse:5+chscale", "tcq:3", 1},
                           /* tq-mse:5 keys on the classic kernel (attn_tq5.cuh), the sink's cost on the
                            * headline pair */
                           {"tq-mse:5/tq-mse:4", "tq-mse:5", "tq-mse:4", 0},
                           {"tq-mse:5+chscale/tq-mse:4", "tq-mse:5+chscale", "tq-mse:4", 0},
                           {"tq-mse:4/4,sink=1", "tq-mse:4", "tq-mse:4", 1}};
    if (only_pol) { /* a name that is not in the list measured nothing, silently (session 15): refuse it */
        bool known = false;
        for (const Policy &pl : pols) known = known || !strcmp(only_pol, pl.name);
        if (!known) {
            fprintf(stderr, "cuda_attn: unknown --policy %s; the policies:", only_pol);
            for (const Policy &pl : pols) fprintf(stderr, " %s", pl.name);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    const int shapes[][2] = {{1, 4096}, {1, 32768}, {4, 4096}, {4, 32768}, {16, 4096}, {16, 32768},
                             {64, 4096}, {64, 32768}, {8, 131072}, {1, 131072}, {4, 131072}};
    for (auto &sh : shapes) {
        if (quick && sh[0] * (size_t)sh[1] > 16 * 32768) continue;
        if (only_b && (sh[0] != only_b || sh[1] != only_ctx)) continue;
        for (size_t i = 0; i < sizeof pols / sizeof *pols; i++) {
            if (only_pol && strcmp(only_pol, pols[i].name)) continue;
            if (!only_pol && i >= 4 && !(sh[0] == 16 && sh[1] == 32768)) continue; /* extra policies at the headline shape */
            bench_attn(pols[i], sh[0], sh[1], runs, cbw, dim, hq, hkv, generic);
        }
    }
    if (g_json) fclose(g_json);
    return 0;
}
