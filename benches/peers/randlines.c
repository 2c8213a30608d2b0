/* randlines: how fast this machine serves random cache lines of a large
 * table, and whether prefetching them early changes it (BENCHMARKS.md,
 * "The router's stages against memory").
 *
 *   randlines [WORK [AHEAD]]
 *
 * A 64 MiB table of 32-bit entries (the size of a DIR-24-8 first level),
 * on transparent huge pages, is read at 1,000,000 random entries in
 * batches of 64, five times over. Per batch: WORK rounds of an ALU chain
 * (0 by default), then the batch's 64 loads in a tight loop. With AHEAD
 * (batches, 1 or more) the lines of the batch AHEAD batches later are
 * prefetched at the start of each batch. Prints ns per load, without and
 * with the prefetch. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

#define BATCH 64
#define LOADS 1000000
#define REPS 5

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static double run(const uint32_t *table, const uint32_t *idx, int work, int ahead, uint64_t *sink)
{
    uint64_t acc = *sink;
    double t0 = now_ns();
    for (int rep = 0; rep < REPS; rep++)
        for (int b = 0; b + (ahead + 1) * BATCH <= LOADS; b += BATCH) {
            if (ahead > 0)
                for (int j = 0; j < BATCH; j++)
                    _mm_prefetch((const char *)&table[idx[b + ahead * BATCH + j]], _MM_HINT_T0);
            uint64_t x = acc;
            for (int w = 0; w < work; w++) {
                x = x * 31 + w;
                x ^= x >> 7;
            }
            acc = x;
            for (int j = 0; j < BATCH; j++)
                acc += table[idx[b + j]];
        }
    double ns = (now_ns() - t0) / ((double)REPS * LOADS);
    *sink = acc;
    return ns;
}

int main(int argc, char **argv)
{
    int work = argc > 1 ? atoi(argv[1]) : 0, ahead = argc > 2 ? atoi(argv[2]) : 1;
    size_t n = (64u << 20) / sizeof(uint32_t);
    uint32_t *table = aligned_alloc(2u << 20, n * sizeof *table);
    uint32_t *idx = malloc(LOADS * sizeof *idx);
    if (!table || !idx || ahead < 1) {
        fprintf(stderr, "randlines: usage: randlines [WORK [AHEAD >= 1]]\n");
        return 2;
    }
    madvise(table, n * sizeof *table, MADV_HUGEPAGE);
    memset(table, 1, n * sizeof *table);
    uint64_t s = 1, sink = 0;
    for (int i = 0; i < LOADS; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        idx[i] = (uint32_t)((s >> 33) % n);
    }
    double plain = run(table, idx, work, 0, &sink), early = run(table, idx, work, ahead, &sink);
    printf("{\"work\":%d,\"ahead\":%d,\"ns_per_load\":%.2f,\"ns_per_load_prefetched\":%.2f,\"sink\":%llu}\n", work, ahead,
           plain, early, (unsigned long long)(sink & 1));
    return 0;
}
