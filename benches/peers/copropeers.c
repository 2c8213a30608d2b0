/*
 * copropeers: the C peers of the coprocessor benchmarks (`coprobench`,
 * crates/bench/src/bin/coprobench.rs), on the inputs `coprobench gen DIR`
 * writes, so that both sides measure the same work:
 *
 *   copropeers lpm DIR    [--reps R] [--cpu N] [--tbl8s N]   DPDK rte_lpm
 *   copropeers hash DIR N [--reps R] [--cpu N]               DPDK rte_hash, 8-byte keys
 *   copropeers hs DIR     [--reps R] [--cpu N]               Hyperscan block mode, literals
 *   copropeers router DIR [--reps R] [--cpu N] [--tbl8s N]   IPv4 router loop + rte_lpm
 *   copropeers bridge DIR [--reps R] [--cpu N] [--entries N] learning bridge + rte_hash
 *   copropeers l2fwd DIR N [--reps R] [--cpu N]          L2 forwarding over an N-entry rte_hash
 *   copropeers lpm6 DIR [--reps R] [--cpu N]             rte_lpm6: build, memory, single and bulk lookups
 *   copropeers names DIR [--reps R] [--cpu N]            name forwarding (NDN) over rte_hash, single and bulk
 *   common: [--mem MB] (EAL memory without hugepages, default 4096)
 *
 * Each measurement prints one JSON line on stdout:
 *   {"engine":..,"bench":..,"mode":..,"ns_median":..,"ns_min":..,"reps":R,"ops":N,"check":C, ...}
 * ns per operation (lookup, payload or frame), median and minimum of R
 * repetitions of the whole loop, after one untimed warm-up pass; each
 * repetition is timed with clock_gettime(CLOCK_MONOTONIC). `check` is a sum
 * over the answers (defined per bench below) that coprobench computes the
 * same way; every repetition must give the same check, or the program stops.
 * Table construction prints a record with mode "build_s" and "seconds".
 * A peer that cannot run prints {"engine":..,"bench":..,"unavailable":"why"}
 * and the program exits 0. A malformed input file is an error: exit 1.
 *
 * Modes: "single" = one lookup call per operation; "bulk" = DPDK's bulk
 * lookup on batches of 32 (the last batch may be shorter). The router, the
 * bridge and L2 forwarding also run "bulk-xb": the bulk loop reaching each
 * frame and its length (and the bridge its input port) through a
 * descriptor of netvm's layout (`struct netvm_xb` of include/netvm.h, 40
 * bytes a frame, built once), as netvm's compiled batch function gets its
 * packets; "bulk" reads flat arrays of frames and 2-byte lengths. The
 * router also runs "staged" and "staged-xb": netvm's stage structure
 * written in C (per 64 frames: prefetch the headers, take the destination
 * addresses, prefetch then read the tbl24 entries and prefetch the tbl8
 * ones, then the whole frame with a single lookup that hits the cache).
 *
 * Checks:
 *   lpm     sum of (next hop + 1) over the lookups, 0 for a miss
 *   hash    sum of (value + 1) over the hits (key i has value i)
 *   hs      "all": every match of every pattern (HS_FLAG_SINGLEMATCH not set);
 *           "first": payloads with at least one match (callback returns 1)
 *   router  sum of (port + 1) over forwarded frames (the route's next hop is
 *           the port, 0 to 15; a next hop above 15 is dropped, as
 *           examples/ipv4-router does with `bad_port`)
 *   bridge  sum of (out port + 1) over forwarded frames, + 1000 per flooded
 *           frame; frames to the port they came from are dropped (0). The
 *           table is emptied (rte_hash_reset, untimed) before every pass, so
 *           every pass learns the same way. In "bulk" each batch of 32 first
 *           learns its 32 sources in order, then looks up its destinations:
 *           a destination learned later in the same batch is found, so the
 *           bulk check can differ slightly from the single one.
 *
 * EAL: hugepages when /proc/meminfo shows free ones (--in-memory), otherwise
 * --no-huge -m MEM; always --no-pci --no-telemetry and -l CPU (the EAL pins
 * the main thread there). The `hs` bench needs no EAL; it pins itself with
 * sched_setaffinity. DPDK's log goes to stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../include/netvm.h"

#ifdef HAVE_DPDK
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_jhash.h>
#include <rte_log.h>
#include <rte_lpm.h>
#include <rte_lpm6.h>
#include <rte_memory.h>
#endif
#ifdef HAVE_HS
#include <hs.h>
#endif

/* Helpers some builds (without DPDK or Hyperscan) do not use. */
#define MAYBE_UNUSED __attribute__((unused))

#define BATCH 32
#define STAGE 64 /* frames per sub-batch of the "staged" loops */
#define NPORTS 16 /* router output ports: a next hop is a port, 0 to 15 */

static int reps = 7;
/* bridge: hash with netvm's table hash instead of rte_hash's CRC32-C (`--hash netvm`). */
static int netvm_hash;
static int cpu = 1;
static long mem_mb = 4096;
static uint32_t tbl8s = 65536;
static uint32_t entries = 1u << 20;

/* ---- utilities ------------------------------------------------------------ */

MAYBE_UNUSED static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "copropeers: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

MAYBE_UNUSED static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

MAYBE_UNUSED static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

MAYBE_UNUSED static double median(const double *v, int n)
{
    double *s = malloc(n * sizeof *s);
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

MAYBE_UNUSED static double minimum(const double *v, int n)
{
    double m = INFINITY;
    for (int i = 0; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static void unavailable(const char *engine, const char *bench, const char *why)
{
    printf("{\"engine\":");
    json_str(engine);
    printf(",\"bench\":");
    json_str(bench);
    printf(",\"unavailable\":");
    json_str(why);
    printf("}\n");
    fflush(stdout);
}

/* One measurement record; `extra` is "" or starts with a comma. */
MAYBE_UNUSED static void emit(const char *engine, const char *bench, const char *mode, const double *ns, uint64_t ops, uint64_t check,
                 const char *extra)
{
    printf("{\"engine\":\"%s\",\"bench\":\"%s\",\"mode\":\"%s\",\"ns_median\":%.3f,\"ns_min\":%.3f,\"reps\":%d,"
           "\"ops\":%" PRIu64 ",\"check\":%" PRIu64 "%s}\n",
           engine, bench, mode, median(ns, reps), minimum(ns, reps), reps, ops, check, extra);
    fflush(stdout);
}

MAYBE_UNUSED static void emit_build(const char *engine, const char *bench, double seconds, const char *extra)
{
    printf("{\"engine\":\"%s\",\"bench\":\"%s\",\"mode\":\"build_s\",\"seconds\":%.3f%s}\n", engine, bench, seconds,
           extra);
    fflush(stdout);
}

/* A whole file in memory (NUL-terminated for text). */
struct blob {
    uint8_t *p;
    size_t n;
};

MAYBE_UNUSED static struct blob slurp(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        die("%s: %s (run `coprobench gen %s` first)", path, strerror(errno), dir);
    if (fseek(f, 0, SEEK_END) != 0)
        die("%s: cannot seek: %s", path, strerror(errno));
    long n = ftell(f);
    if (n < 0)
        die("%s: %s", path, strerror(errno));
    rewind(f);
    struct blob b = {aligned_alloc(64, ((size_t)n + 64) & ~(size_t)63), (size_t)n};
    if (b.p == NULL)
        die("%s: out of memory (%ld bytes)", path, n);
    if (n > 0 && fread(b.p, 1, (size_t)n, f) != (size_t)n)
        die("%s: short read", path);
    b.p[n] = 0;
    fclose(f);
    return b;
}

MAYBE_UNUSED static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
MAYBE_UNUSED static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
MAYBE_UNUSED static inline uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Length-prefixed records: `head` bytes before the u16 LE length (flags or a
 * port), then the bytes. Fills offsets of the bytes (and the lengths, and the
 * head's first u16/u8 when asked); validates that every record lies within
 * the file. Returns the count. */
MAYBE_UNUSED static size_t records(const struct blob *b, const char *name, size_t head, size_t **off, uint16_t **len, uint16_t **hdr)
{
    size_t n = 0, cap = 1024;
    *off = malloc(cap * sizeof **off);
    *len = malloc(cap * sizeof **len);
    if (hdr)
        *hdr = malloc(cap * sizeof **hdr);
    for (size_t i = 0; i < b->n;) {
        if (b->n - i < head + 2)
            die("%s: truncated record header at byte %zu (record %zu)", name, i, n);
        uint16_t h = head == 1 ? b->p[i] : head == 2 ? le16(b->p + i) : 0;
        uint16_t l = le16(b->p + i + head);
        if (b->n - i - head - 2 < l)
            die("%s: record %zu at byte %zu has length %u, past the end of the file (%zu bytes)", name, n, i, l, b->n);
        if (n == cap) {
            cap *= 2;
            *off = realloc(*off, cap * sizeof **off);
            *len = realloc(*len, cap * sizeof **len);
            if (hdr)
                *hdr = realloc(*hdr, cap * sizeof **hdr);
            if (*off == NULL || *len == NULL || (hdr && *hdr == NULL))
                die("%s: out of memory", name);
        }
        (*off)[n] = i + head + 2;
        (*len)[n] = l;
        if (hdr)
            (*hdr)[n] = h;
        n++;
        i += head + 2 + l;
    }
    return n;
}

/* Frames copied into 64-byte-aligned slots (slot = longest frame rounded up to 64). */
struct frames {
    uint8_t *pristine, *work;
    uint16_t *len, *port;
    size_t n, slot;
    struct netvm_xb *xb; /* frame i's descriptor: work slot i, its length, its input port */
};

/* Frame i's bytes, length and input port: from the flat arrays, or where
 * `via_xb` (a constant in each caller) through its netvm descriptor. */
static inline __attribute__((always_inline)) uint8_t *frame_at(const struct frames *fr, size_t i, int via_xb)
{
    return via_xb ? fr->xb[i].data : fr->work + i * fr->slot;
}

static inline __attribute__((always_inline)) uint32_t len_at(const struct frames *fr, size_t i, int via_xb)
{
    return via_xb ? fr->xb[i].caplen : fr->len[i];
}

static inline __attribute__((always_inline)) uint16_t port_at(const struct frames *fr, size_t i, int via_xb)
{
    return via_xb ? fr->xb[i].in_port : fr->port[i];
}

MAYBE_UNUSED static struct frames load_frames(const char *dir, const char *name, int with_port)
{
    struct blob b = slurp(dir, name);
    size_t *off;
    struct frames fr = {0};
    fr.n = records(&b, name, with_port ? 2 : 0, &off, &fr.len, with_port ? &fr.port : NULL);
    if (fr.n == 0)
        die("%s: no frames", name);
    size_t mx = 64;
    for (size_t i = 0; i < fr.n; i++)
        mx = fr.len[i] > mx ? fr.len[i] : mx;
    fr.slot = (mx + 63) & ~(size_t)63;
    fr.pristine = aligned_alloc(64, fr.n * fr.slot);
    fr.work = aligned_alloc(64, fr.n * fr.slot);
    if (fr.pristine == NULL || fr.work == NULL)
        die("%s: out of memory", name);
    memset(fr.pristine, 0, fr.n * fr.slot);
    for (size_t i = 0; i < fr.n; i++)
        memcpy(fr.pristine + i * fr.slot, b.p + off[i], fr.len[i]);
    memcpy(fr.work, fr.pristine, fr.n * fr.slot);
    fr.xb = aligned_alloc(64, (fr.n * sizeof *fr.xb + 63) & ~(size_t)63);
    if (fr.xb == NULL)
        die("%s: out of memory", name);
    for (size_t i = 0; i < fr.n; i++)
        fr.xb[i] = (struct netvm_xb){.data = fr.work + i * fr.slot, .caplen = fr.len[i], .wirelen = fr.len[i],
                                     .in_port = with_port ? fr.port[i] : 0, .seq = i};
    free(off);
    free(b.p);
    return fr;
}

/* ---- timing ---------------------------------------------------------------- */

typedef uint64_t (*pass_fn)(void *ctx);
typedef void (*prep_fn)(void *ctx);

/* `prep` (untimed, may be NULL) before every pass; a warm-up pass, then `reps`
 * timed ones; ns[] gets ns per op. Returns the check, equal in every pass. */
MAYBE_UNUSED static uint64_t timed(const char *what, pass_fn pass, prep_fn prep, void *ctx, uint64_t ops, double *ns)
{
    if (prep)
        prep(ctx);
    uint64_t check = pass(ctx);
    for (int r = 0; r < reps; r++) {
        if (prep)
            prep(ctx);
        double t = now_ns();
        uint64_t c = pass(ctx);
        ns[r] = (now_ns() - t) / (double)(ops ? ops : 1);
        if (c != check)
            die("%s: two passes gave checks %" PRIu64 " and %" PRIu64, what, check, c);
    }
    return check;
}

MAYBE_UNUSED static void pin(void)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s) != 0)
        fprintf(stderr, "copropeers: cannot pin to CPU %d: %s (running unpinned)\n", cpu, strerror(errno));
}

/* ---- DPDK ----------------------------------------------------------------- */

#ifdef HAVE_DPDK

static int hugepages_free(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    char line[256];
    long n = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "HugePages_Free: %ld", &n) == 1)
            break;
    fclose(f);
    return n > 0;
}

static char eal_mode[64];

static int eal_init(char *err, size_t errlen)
{
    char lcores[16], mem[24];
    snprintf(lcores, sizeof lcores, "%d", cpu);
    snprintf(mem, sizeof mem, "%ld", mem_mb);
    char *argv[16];
    int argc = 0;
    argv[argc++] = "copropeers";
    if (hugepages_free()) {
        argv[argc++] = "--in-memory";
        snprintf(eal_mode, sizeof eal_mode, "hugepages");
    } else {
        argv[argc++] = "--no-huge";
        argv[argc++] = "-m";
        argv[argc++] = mem;
        snprintf(eal_mode, sizeof eal_mode, "no-huge %ld MB", mem_mb);
    }
    argv[argc++] = "--no-pci";
    argv[argc++] = "--no-shconf";
    argv[argc++] = "--no-telemetry";
    argv[argc++] = "-l";
    argv[argc++] = lcores;
    argv[argc++] = "--log-level";
    argv[argc++] = "lib.eal:error";
    argv[argc] = NULL;
    rte_openlog_stream(stderr); /* keep stdout JSON only */
    if (rte_eal_init(argc, argv) < 0) {
        snprintf(err, errlen, "rte_eal_init (%s): %s", eal_mode, rte_strerror(rte_errno));
        return -1;
    }
    return 0;
}

/* ---- routes and rte_lpm ---- */

struct route {
    uint32_t net, nh;
    uint8_t len;
};

static size_t parse_routes(const char *dir, struct route **out)
{
    struct blob b = slurp(dir, "routes.txt");
    size_t n = 0, cap = 1024;
    struct route *r = malloc(cap * sizeof *r);
    size_t lineno = 0;
    char *s = (char *)b.p;
    while (*s) {
        char *e = strchr(s, '\n');
        if (e)
            *e = 0;
        lineno++;
        char *hash = strchr(s, '#');
        if (hash)
            *hash = 0;
        char *p = s;
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (*p) {
            unsigned a, bb, c, d, len = 32;
            unsigned long nh;
            int used = 0;
            char rest[8];
            if (sscanf(p, "%u.%u.%u.%u/%u %lu %n", &a, &bb, &c, &d, &len, &nh, &used) == 6)
                ;
            else if (sscanf(p, "%u.%u.%u.%u %lu %n", &a, &bb, &c, &d, &nh, &used) == 5)
                len = 32;
            else
                die("routes.txt:%zu: expected `a.b.c.d/len NH`, got `%s`", lineno, p);
            if (sscanf(p + used, "%7s", rest) == 1)
                die("routes.txt:%zu: trailing text `%s`", lineno, p + used);
            if (a > 255 || bb > 255 || c > 255 || d > 255 || len > 32)
                die("routes.txt:%zu: bad prefix `%s`", lineno, p);
            if (nh >= (1ul << 24))
                die("routes.txt:%zu: next hop %lu above 2^24 - 1", lineno, nh);
            uint32_t net = a << 24 | bb << 16 | c << 8 | d;
            uint32_t mask = len ? ~0u << (32 - len) : 0;
            if (net & ~mask)
                die("routes.txt:%zu: host bits set in `%s`", lineno, p);
            if (n == cap) {
                cap *= 2;
                r = realloc(r, cap * sizeof *r);
                if (r == NULL)
                    die("routes.txt: out of memory");
            }
            r[n++] = (struct route){net, (uint32_t)nh, (uint8_t)len};
        }
        if (!e)
            break;
        s = e + 1;
    }
    free(b.p);
    if (n == 0)
        die("routes.txt: no routes");
    *out = r;
    return n;
}

/* rte_lpm with every route of routes.txt; prints the build record under `engine`/`bench`. */
static struct rte_lpm *build_lpm(const char *dir, const char *engine, const char *bench)
{
    struct route *r;
    size_t n = parse_routes(dir, &r);
    struct rte_lpm_config cfg = {.max_rules = (uint32_t)n, .number_tbl8s = tbl8s, .flags = 0};
    struct rte_lpm *lpm = rte_lpm_create("copro_lpm", SOCKET_ID_ANY, &cfg);
    if (lpm == NULL)
        die("rte_lpm_create (%zu rules, %u tbl8s): %s", n, tbl8s, rte_strerror(rte_errno));
    double t = now_ns();
    for (size_t i = 0; i < n; i++) {
        int rc = rte_lpm_add(lpm, r[i].net, r[i].len, r[i].nh);
        if (rc < 0)
            die("rte_lpm_add of route %zu (%u.%u.%u.%u/%u): %s%s", i + 1, r[i].net >> 24, r[i].net >> 16 & 255,
                r[i].net >> 8 & 255, r[i].net & 255, r[i].len, strerror(-rc),
                rc == -ENOSPC ? " (out of tbl8 groups or rules: raise --tbl8s)" : "");
    }
    double s = (now_ns() - t) / 1e9;
    uint32_t used = 0;
    for (uint32_t g = 0; g < tbl8s; g++)
        used += lpm->tbl8[(size_t)g * RTE_LPM_TBL8_GROUP_NUM_ENTRIES].valid_group;
    char extra[160];
    snprintf(extra, sizeof extra, ",\"routes\":%zu,\"tbl8s\":%u,\"tbl8_groups_used\":%u,\"eal\":\"%s\"", n, tbl8s, used,
             eal_mode);
    emit_build(engine, bench, s, extra);
    free(r);
    return lpm;
}

/* ---- bench: lpm ---- */

struct lpm_ctx {
    struct rte_lpm *lpm;
    const uint32_t *addr;
    size_t n;
};

static __attribute__((noinline)) uint64_t lpm_single(void *v)
{
    struct lpm_ctx *c = v;
    const struct rte_lpm *lpm = c->lpm;
    uint64_t s = 0;
    for (size_t i = 0; i < c->n; i++) {
        uint32_t nh;
        if (rte_lpm_lookup(lpm, c->addr[i], &nh) == 0)
            s += nh + 1;
    }
    return s;
}

static __attribute__((noinline)) uint64_t lpm_bulk(void *v)
{
    struct lpm_ctx *c = v;
    const struct rte_lpm *lpm = c->lpm;
    uint64_t s = 0;
    uint32_t hop[BATCH];
    size_t i = 0;
    for (; i + BATCH <= c->n; i += BATCH) {
        rte_lpm_lookup_bulk(lpm, c->addr + i, hop, BATCH);
        for (int j = 0; j < BATCH; j++)
            if (hop[j] & RTE_LPM_LOOKUP_SUCCESS)
                s += (hop[j] & 0x00ffffff) + 1;
    }
    if (i < c->n) {
        unsigned k = (unsigned)(c->n - i);
        rte_lpm_lookup_bulk(lpm, c->addr + i, hop, k);
        for (unsigned j = 0; j < k; j++)
            if (hop[j] & RTE_LPM_LOOKUP_SUCCESS)
                s += (hop[j] & 0x00ffffff) + 1;
    }
    return s;
}

static int bench_lpm(const char *dir)
{
    struct blob a = slurp(dir, "lpm_addrs.bin");
    if (a.n % 4 != 0)
        die("lpm_addrs.bin: %zu bytes, not a multiple of 4", a.n);
    size_t n = a.n / 4;
    uint32_t *addr = aligned_alloc(64, (n * 4 + 64) & ~(size_t)63);
    for (size_t i = 0; i < n; i++)
        addr[i] = (uint32_t)a.p[4 * i] | (uint32_t)a.p[4 * i + 1] << 8 | (uint32_t)a.p[4 * i + 2] << 16 |
                  (uint32_t)a.p[4 * i + 3] << 24;
    free(a.p);
    struct lpm_ctx c = {build_lpm(dir, "dpdk-rte_lpm", "lpm"), addr, n};
    double *ns = calloc(reps, sizeof *ns);
    uint64_t check = timed("lpm single", lpm_single, NULL, &c, n, ns);
    emit("dpdk-rte_lpm", "lpm", "single", ns, n, check, "");
    check = timed("lpm bulk", lpm_bulk, NULL, &c, n, ns);
    emit("dpdk-rte_lpm", "lpm", "bulk", ns, n, check, "");
    return 0;
}

/* ---- bench: hash ---- */

struct hash_ctx {
    struct rte_hash *h;
    const uint8_t *look;
    size_t n;
};

static __attribute__((noinline)) uint64_t hash_single(void *v)
{
    struct hash_ctx *c = v;
    const struct rte_hash *h = c->h;
    uint64_t s = 0;
    for (size_t i = 0; i < c->n; i++) {
        void *d;
        if (rte_hash_lookup_data(h, c->look + 8 * i, &d) >= 0)
            s += (uintptr_t)d + 1;
    }
    return s;
}

static __attribute__((noinline)) uint64_t hash_bulk(void *v)
{
    struct hash_ctx *c = v;
    const struct rte_hash *h = c->h;
    uint64_t s = 0;
    const void *keys[BATCH];
    void *data[BATCH];
    for (size_t i = 0; i < c->n; i += BATCH) {
        unsigned k = c->n - i < BATCH ? (unsigned)(c->n - i) : BATCH;
        for (unsigned j = 0; j < k; j++)
            keys[j] = c->look + 8 * (i + j);
        uint64_t hit = 0;
        rte_hash_lookup_bulk_data(h, keys, k, &hit, data);
        for (unsigned j = 0; j < k; j++)
            if (hit >> j & 1)
                s += (uintptr_t)data[j] + 1;
    }
    return s;
}

/* Which function rte_hash used by default: compared on a key with the candidates. */
static const char *hash_func_name(const struct rte_hash *h, const void *key, uint32_t len)
{
    hash_sig_t x = rte_hash_hash(h, key);
    if (x == rte_hash_crc(key, len, 0))
        return "rte_hash_crc (CRC32-C, init 0)";
    if (x == rte_jhash(key, len, 0))
        return "rte_jhash (init 0)";
    return "unknown";
}

static int bench_hash(const char *dir, size_t n)
{
    char name[64], bench[32];
    snprintf(bench, sizeof bench, "hash%zu", n);
    snprintf(name, sizeof name, "hash_%zu_keys.bin", n);
    struct blob keys = slurp(dir, name);
    if (keys.n % 8 != 0 || keys.n / 8 != n)
        die("%s: %zu bytes, expected %zu keys of 8 bytes", name, keys.n, n);
    snprintf(name, sizeof name, "hash_%zu_lookups.bin", n);
    struct blob look = slurp(dir, name);
    if (look.n % 8 != 0)
        die("%s: %zu bytes, not a multiple of 8", name, look.n);
    size_t ops = look.n / 8;

    /* entries = N first (rte_hash rounds the capacity up to a power of two);
     * if an insert fails, twice as many, and so on. */
    struct rte_hash *h = NULL;
    uint32_t ent = (uint32_t)n, tries = 0;
    double t0 = now_ns(), secs = 0;
    for (;;) {
        char hname[32];
        snprintf(hname, sizeof hname, "copro_hash%u", tries++);
        struct rte_hash_parameters p = {
            .name = hname, .entries = ent, .key_len = 8, .hash_func = NULL, .hash_func_init_val = 0,
            .socket_id = SOCKET_ID_ANY, .extra_flag = 0,
        };
        double t = now_ns();
        h = rte_hash_create(&p);
        if (h == NULL)
            die("rte_hash_create (%u entries): %s", ent, rte_strerror(rte_errno));
        size_t i = 0;
        for (; i < n; i++)
            if (rte_hash_add_key_data(h, keys.p + 8 * i, (void *)(uintptr_t)i) < 0)
                break;
        secs = (now_ns() - t) / 1e9;
        if (i == n)
            break;
        fprintf(stderr, "copropeers: rte_hash with %u entries full at key %zu of %zu: retrying with %u\n", ent, i, n,
                ent * 2);
        rte_hash_free(h);
        if (ent > (1u << 30))
            die("rte_hash: cannot insert %zu keys", n);
        ent *= 2;
    }
    double total = (now_ns() - t0) / 1e9;
    char extra[320];
    snprintf(extra, sizeof extra,
             ",\"keys\":%zu,\"entries\":%u,\"capacity\":%" PRId32 ",\"tries\":%u,\"seconds_all_tries\":%.3f,"
             "\"hash_func\":\"%s\",\"eal\":\"%s\"",
             n, ent, rte_hash_max_key_id(h), tries, total, hash_func_name(h, keys.p, 8), eal_mode);
    emit_build("dpdk-rte_hash", bench, secs, extra);
    free(keys.p);

    struct hash_ctx c = {h, look.p, ops};
    double *ns = calloc(reps, sizeof *ns);
    uint64_t check = timed("hash single", hash_single, NULL, &c, ops, ns);
    emit("dpdk-rte_hash", bench, "single", ns, ops, check, "");
    check = timed("hash bulk", hash_bulk, NULL, &c, ops, ns);
    emit("dpdk-rte_hash", bench, "bulk", ns, ops, check, "");
    return 0;
}

/* ---- bench: router ---- */

struct router_ctx {
    struct rte_lpm *lpm;
    struct frames *fr;
    uint64_t port[NPORTS], dropped;
};

static void router_prep(void *v)
{
    struct router_ctx *c = v;
    memcpy(c->fr->work, c->fr->pristine, c->fr->n * c->fr->slot);
    memset(c->port, 0, sizeof c->port);
    c->dropped = 0;
}

/* The router's checks and TTL update on one frame; returns 1 and the
 * destination when the frame goes on to the lookup, 0 to drop it. */
static inline __attribute__((always_inline)) int router_frame(uint8_t *f, uint32_t len, uint32_t *dst)
{
    if (len < 14 + 20)
        return 0; /* runt / truncated */
    if (be16(f + 12) != 0x0800)
        return 0; /* not_ipv4 */
    uint8_t *ip = f + 14;
    if (ip[0] >> 4 != 4)
        return 0; /* bad_version */
    uint32_t hl = (ip[0] & 15u) * 4;
    if (hl < 20)
        return 0; /* bad_ihl */
    if (14 + hl > len)
        return 0; /* truncated */
    uint32_t tot = be16(ip + 2);
    if (tot < hl || tot > len - 14)
        return 0; /* bad_length */
    if (ip[8] <= 1)
        return 0; /* ttl_expired */
    /* RFC 1071: the one's complement sum of the header is 0xffff when the checksum is right. */
    uint32_t sum = 0;
    for (uint32_t i = 0; i < hl; i += 2)
        sum += be16(ip + i);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    if (sum != 0xffff)
        return 0; /* bad_checksum */
    /* TTL - 1; RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), m the 16-bit word holding the TTL. */
    uint32_t m = be16(ip + 8), m2 = m - 0x0100, hc = be16(ip + 10);
    uint32_t x = (~hc & 0xffff) + (~m & 0xffff) + m2;
    x = (x & 0xffff) + (x >> 16);
    x = (x & 0xffff) + (x >> 16);
    uint16_t hc2 = (uint16_t)~x;
    ip[8] = (uint8_t)(m2 >> 8);
    ip[10] = (uint8_t)(hc2 >> 8);
    ip[11] = (uint8_t)hc2;
    *dst = be32(ip + 16);
    return 1;
}

/* A frame's output: its port counted and (port + 1) added to the check
 * where a route was found to a port the router has, else a drop. */
static inline __attribute__((always_inline)) void router_out(struct router_ctx *c, int found, uint32_t nh, uint64_t *s,
                                                             uint64_t *dropped)
{
    if (found && nh < NPORTS) {
        c->port[nh]++;
        *s += nh + 1;
    } else
        (*dropped)++; /* a check failed, no_route or bad_port */
}

static __attribute__((noinline)) uint64_t router_single(void *v)
{
    struct router_ctx *c = v;
    const struct rte_lpm *lpm = c->lpm;
    const struct frames *fr = c->fr;
    uint64_t s = 0, dropped = 0;
    for (size_t i = 0; i < fr->n; i++) {
        uint32_t dst, nh = 0;
        int found = router_frame(fr->work + i * fr->slot, fr->len[i], &dst) && rte_lpm_lookup(lpm, dst, &nh) == 0;
        router_out(c, found, nh, &s, &dropped);
    }
    c->dropped += dropped;
    return s;
}

static inline __attribute__((always_inline)) uint64_t router_bulk_via(void *v, const int via_xb)
{
    struct router_ctx *c = v;
    const struct rte_lpm *lpm = c->lpm;
    const struct frames *fr = c->fr;
    uint64_t s = 0, dropped = 0;
    uint32_t ips[BATCH], hop[BATCH];
    for (size_t i = 0; i < fr->n; i += BATCH) {
        unsigned b = fr->n - i < BATCH ? (unsigned)(fr->n - i) : BATCH, k = 0;
        for (unsigned j = 0; j < b; j++)
            k += router_frame(frame_at(fr, i + j, via_xb), len_at(fr, i + j, via_xb), &ips[k]);
        dropped += b - k;
        if (k == 0)
            continue;
        rte_lpm_lookup_bulk(lpm, ips, hop, k);
        for (unsigned j = 0; j < k; j++)
            router_out(c, (hop[j] & RTE_LPM_LOOKUP_SUCCESS) != 0, hop[j] & 0x00ffffff, &s, &dropped);
    }
    c->dropped += dropped;
    return s;
}

/* The loop `name` on flat arrays and `name`_xb through descriptors, each
 * compiled on its own. */
#define FLAT_AND_XB(name)                                                                                              \
    static __attribute__((noinline)) uint64_t name(void *v) { return name##_via(v, 0); }                              \
    static __attribute__((noinline)) uint64_t name##_xb(void *v) { return name##_via(v, 1); }

FLAT_AND_XB(router_bulk)

/* netvm's stage structure in C (`LinkedApp::run_staged`, sub-batches of
 * 64): what the structure costs apart from the code netvm generates. The
 * answers are the single loop's (each frame's own lookup). */
static inline __attribute__((always_inline)) uint64_t router_staged_via(void *v, const int via_xb)
{
    struct router_ctx *c = v;
    const struct rte_lpm *lpm = c->lpm;
    const struct frames *fr = c->fr;
    uint64_t s = 0, dropped = 0;
    uint32_t key[STAGE];
    for (size_t i = 0; i < fr->n; i += STAGE) {
        unsigned b = fr->n - i < STAGE ? (unsigned)(fr->n - i) : STAGE;
        for (unsigned j = 0; j < b; j++)
            __builtin_prefetch(frame_at(fr, i + j, via_xb));
        /* The key stage: the destination where the frame holds one (0 is a harmless guess). */
        for (unsigned j = 0; j < b; j++)
            key[j] = len_at(fr, i + j, via_xb) >= 34 ? be32(frame_at(fr, i + j, via_xb) + 30) : 0;
        /* The prefetch stage: every tbl24 entry, then each read and its tbl8 entry prefetched. */
        for (unsigned j = 0; j < b; j++)
            __builtin_prefetch(&lpm->tbl24[key[j] >> 8]);
        for (unsigned j = 0; j < b; j++) {
            struct rte_lpm_tbl_entry e = lpm->tbl24[key[j] >> 8];
            if (e.valid && e.valid_group)
                __builtin_prefetch(&lpm->tbl8[e.next_hop * RTE_LPM_TBL8_GROUP_NUM_ENTRIES + (key[j] & 0xff)]);
        }
        /* The data path. */
        for (unsigned j = 0; j < b; j++) {
            uint32_t dst, nh = 0;
            int found = router_frame(frame_at(fr, i + j, via_xb), len_at(fr, i + j, via_xb), &dst) &&
                        rte_lpm_lookup(lpm, dst, &nh) == 0;
            router_out(c, found, nh, &s, &dropped);
        }
    }
    c->dropped += dropped;
    return s;
}

FLAT_AND_XB(router_staged)

static void router_extra(const struct router_ctx *c, const double *ns, char *buf, size_t len)
{
    uint64_t fwd = 0;
    int used = 0;
    for (int p = 0; p < NPORTS; p++) {
        fwd += c->port[p];
        used += c->port[p] != 0;
    }
    snprintf(buf, len, ",\"mpps\":%.3f,\"mpps_max\":%.3f,\"forwarded\":%" PRIu64 ",\"dropped\":%" PRIu64
             ",\"ports_used\":%d",
             1e3 / median(ns, reps), 1e3 / minimum(ns, reps), fwd, c->dropped, used);
}

static int bench_router(const char *dir)
{
    struct frames fr = load_frames(dir, "router64.bin", 0);
    struct router_ctx c = {.lpm = build_lpm(dir, "c-router/dpdk-rte_lpm", "router64"), .fr = &fr};
    double *ns = calloc(reps, sizeof *ns);
    char extra[256];
    const struct {
        const char *mode;
        uint64_t (*run)(void *);
    } loops[] = {{"single", router_single}, {"bulk", router_bulk},       {"bulk-xb", router_bulk_xb},
                 {"staged", router_staged}, {"staged-xb", router_staged_xb}};
    for (size_t k = 0; k < sizeof loops / sizeof loops[0]; k++) {
        char what[32];
        snprintf(what, sizeof what, "router %s", loops[k].mode);
        uint64_t check = timed(what, loops[k].run, router_prep, &c, fr.n, ns);
        router_extra(&c, ns, extra, sizeof extra);
        emit("c-router/dpdk-rte_lpm", "router64", loops[k].mode, ns, fr.n, check, extra);
    }
    return 0;
}

/* ---- bench: bridge ---- */

struct bridge_ctx {
    struct rte_hash *h;
    struct frames *fr;
    uint64_t fwd, flood, drop, learn_fail;
};

static void bridge_prep(void *v)
{
    struct bridge_ctx *c = v;
    rte_hash_reset(c->h);
    c->fwd = c->flood = c->drop = c->learn_fail = 0;
}

static inline __attribute__((always_inline)) void bridge_learn(struct bridge_ctx *c, const uint8_t *f, uint16_t port,
                                                               uint64_t *fail)
{
    if (!(f[6] & 1)) /* a group source address is not learned */
        *fail += rte_hash_add_key_data(c->h, f + 6, (void *)(uintptr_t)port) < 0;
}

static __attribute__((noinline)) uint64_t bridge_single(void *v)
{
    struct bridge_ctx *c = v;
    const struct frames *fr = c->fr;
    uint64_t s = 0, fwd = 0, flood = 0, drop = 0, fail = 0;
    for (size_t i = 0; i < fr->n; i++) {
        const uint8_t *f = fr->work + i * fr->slot;
        uint16_t port = fr->port[i];
        if (fr->len[i] < 14) {
            drop++; /* runt */
            continue;
        }
        bridge_learn(c, f, port, &fail);
        void *d;
        if ((f[0] & 1) || rte_hash_lookup_data(c->h, f, &d) < 0) {
            flood++;
            s += 1000;
        } else if ((uintptr_t)d == port) {
            drop++; /* same_port */
        } else {
            fwd++;
            s += (uintptr_t)d + 1;
        }
    }
    c->fwd += fwd, c->flood += flood, c->drop += drop, c->learn_fail += fail;
    return s;
}

static inline __attribute__((always_inline)) uint64_t bridge_bulk_via(void *v, const int via_xb)
{
    struct bridge_ctx *c = v;
    const struct frames *fr = c->fr;
    uint64_t s = 0, fwd = 0, flood = 0, drop = 0, fail = 0;
    const void *keys[BATCH];
    void *data[BATCH];
    unsigned idx[BATCH];
    for (size_t i = 0; i < fr->n; i += BATCH) {
        unsigned b = fr->n - i < BATCH ? (unsigned)(fr->n - i) : BATCH, k = 0;
        for (unsigned j = 0; j < b; j++) {
            const uint8_t *f = frame_at(fr, i + j, via_xb);
            if (len_at(fr, i + j, via_xb) < 14) {
                drop++;
                continue;
            }
            bridge_learn(c, f, port_at(fr, i + j, via_xb), &fail);
            if (f[0] & 1) {
                flood++;
                s += 1000;
            } else {
                idx[k] = j;
                keys[k++] = f;
            }
        }
        uint64_t hit = 0;
        if (k)
            rte_hash_lookup_bulk_data(c->h, keys, k, &hit, data);
        for (unsigned j = 0; j < k; j++) {
            uint16_t port = port_at(fr, i + idx[j], via_xb);
            if (!(hit >> j & 1)) {
                flood++;
                s += 1000;
            } else if ((uintptr_t)data[j] == port) {
                drop++;
            } else {
                fwd++;
                s += (uintptr_t)data[j] + 1;
            }
        }
    }
    c->fwd += fwd, c->flood += flood, c->drop += drop, c->learn_fail += fail;
    return s;
}

FLAT_AND_XB(bridge_bulk)

static void bridge_extra(const struct bridge_ctx *c, const double *ns, char *buf, size_t len)
{
    snprintf(buf, len,
             ",\"mpps\":%.3f,\"mpps_max\":%.3f,\"forwarded\":%" PRIu64 ",\"flooded\":%" PRIu64 ",\"dropped\":%" PRIu64
             ",\"entries\":%u,\"learned\":%" PRId32,
             1e3 / median(ns, reps), 1e3 / minimum(ns, reps), c->fwd, c->flood, c->drop, entries, rte_hash_count(c->h));
    if (c->learn_fail)
        fprintf(stderr, "copropeers: bridge: %" PRIu64 " sources could not be learned (table full)\n", c->learn_fail);
}

/* netvm's table hash (`crates/copro/src/table/exact.rs`, `BucketWalk::MIX`)
 * on a 6-byte key, with fixed seeds: two folded 64x64->128 multiplies over
 * the key read as two overlapping 32-bit words. `--hash netvm` plugs it into
 * the bridge's rte_hash in place of CRC32-C, to measure what the longer
 * latency of netvm's hash costs a lookup (BENCHMARKS.md). */
static inline uint64_t netvm_fold(uint64_t x, uint64_t y)
{
    unsigned __int128 p = (unsigned __int128)x * y;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

static uint32_t netvm_hash6(const void *key, uint32_t len, uint32_t init)
{
    /* The bridge's keys lie in frames, with bytes to spare after them. */
    uint64_t w;
    memcpy(&w, key, 8);
    uint64_t a = w & 0xffffffffu, b = (w >> 16) & 0xffffffffu;
    uint64_t h = netvm_fold(netvm_fold(a ^ 0x243f6a8885a308d3ull, b ^ 0x13198a2e03707344ull ^ init) ^ 0x452821e638d01377ull,
                            0xbe5466cf34e90c6dull);
    return (uint32_t)h ^ (uint32_t)(h >> 32);
}

static int bench_bridge(const char *dir)
{
    struct frames fr = load_frames(dir, "bridge64.bin", 1);
    struct rte_hash_parameters p = {
        .name = "copro_bridge", .entries = entries, .key_len = 6, .hash_func = netvm_hash ? netvm_hash6 : NULL, .hash_func_init_val = 0,
        .socket_id = SOCKET_ID_ANY, .extra_flag = 0,
    };
    double t = now_ns();
    struct rte_hash *h = rte_hash_create(&p);
    if (h == NULL)
        die("rte_hash_create (%u entries, 6-byte keys): %s", entries, rte_strerror(rte_errno));
    char extra[256];
    snprintf(extra, sizeof extra, ",\"entries\":%u,\"capacity\":%" PRId32 ",\"hash_func\":\"%s\",\"eal\":\"%s\"",
             entries, rte_hash_max_key_id(h), hash_func_name(h, fr.pristine + 6, 6), eal_mode);
    emit_build("c-bridge/dpdk-rte_hash", "bridge64", (now_ns() - t) / 1e9, extra);
    struct bridge_ctx c = {.h = h, .fr = &fr};
    double *ns = calloc(reps, sizeof *ns);
    uint64_t check = timed("bridge single", bridge_single, bridge_prep, &c, fr.n, ns);
    bridge_extra(&c, ns, extra, sizeof extra);
    emit("c-bridge/dpdk-rte_hash", "bridge64", "single", ns, fr.n, check, extra);
    check = timed("bridge bulk", bridge_bulk, bridge_prep, &c, fr.n, ns);
    bridge_extra(&c, ns, extra, sizeof extra);
    emit("c-bridge/dpdk-rte_hash", "bridge64", "bulk", ns, fr.n, check, extra);
    check = timed("bridge bulk-xb", bridge_bulk_xb, bridge_prep, &c, fr.n, ns);
    bridge_extra(&c, ns, extra, sizeof extra);
    emit("c-bridge/dpdk-rte_hash", "bridge64", "bulk-xb", ns, fr.n, check, extra);
    return 0;
}

#endif /* HAVE_DPDK */

/* ---- bench: Hyperscan ------------------------------------------------------- */

#ifdef HAVE_HS

struct hs_ctx {
    hs_database_t *db;
    hs_scratch_t *scratch;
    const uint8_t *base;
    const size_t *off;
    const uint16_t *len;
    size_t n;
    uint64_t count;
};

static int on_match_all(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void *ctx)
{
    (void)id, (void)from, (void)to, (void)flags;
    ((struct hs_ctx *)ctx)->count++;
    return 0;
}

static int on_match_first(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void *ctx)
{
    (void)id, (void)from, (void)to, (void)flags;
    ((struct hs_ctx *)ctx)->count++;
    return 1; /* stop scanning this payload */
}

static uint64_t hs_pass(struct hs_ctx *c, match_event_handler cb, hs_error_t ok2)
{
    c->count = 0;
    for (size_t i = 0; i < c->n; i++) {
        hs_error_t e = hs_scan(c->db, (const char *)c->base + c->off[i], c->len[i], 0, c->scratch, cb, c);
        if (e != HS_SUCCESS && e != ok2)
            die("hs_scan of payload %zu: error %d", i, e);
    }
    return c->count;
}

static __attribute__((noinline)) uint64_t hs_all(void *v) { return hs_pass(v, on_match_all, HS_SUCCESS); }
static __attribute__((noinline)) uint64_t hs_first(void *v) { return hs_pass(v, on_match_first, HS_SCAN_TERMINATED); }

static int bench_hs(const char *dir)
{
    struct blob pb = slurp(dir, "patterns.bin");
    size_t *poff;
    uint16_t *plen, *pflag;
    size_t np = records(&pb, "patterns.bin", 1, &poff, &plen, &pflag);
    if (np == 0)
        die("patterns.bin: no patterns");
    const char **expr = malloc(np * sizeof *expr);
    unsigned *flags = malloc(np * sizeof *flags), *ids = malloc(np * sizeof *ids);
    size_t *lens = malloc(np * sizeof *lens);
    for (size_t i = 0; i < np; i++) {
        if (plen[i] == 0)
            die("patterns.bin: pattern %zu is empty", i);
        expr[i] = (const char *)pb.p + poff[i];
        lens[i] = plen[i];
        ids[i] = (unsigned)i;
        flags[i] = (pflag[i] & 1) ? HS_FLAG_CASELESS : 0;
    }
    struct blob yb = slurp(dir, "payloads.bin");
    struct hs_ctx c = {.base = yb.p};
    size_t *yoff;
    uint16_t *ylen;
    c.n = records(&yb, "payloads.bin", 0, &yoff, &ylen, NULL);
    c.off = yoff;
    c.len = ylen;
    uint64_t bytes = 0;
    for (size_t i = 0; i < c.n; i++)
        bytes += ylen[i];
    if (c.n == 0)
        die("payloads.bin: no payloads");

    pin();
    if (hs_valid_platform() != HS_SUCCESS) {
        unavailable("hyperscan", "strmatch", "hs_valid_platform: this CPU lacks SSSE3");
        return 0;
    }
    hs_compile_error_t *err = NULL;
    double t = now_ns();
    if (hs_compile_lit_multi(expr, flags, ids, lens, (unsigned)np, HS_MODE_BLOCK, NULL, &c.db, &err) != HS_SUCCESS) {
        char why[512];
        snprintf(why, sizeof why, "hs_compile_lit_multi: %s (expression %d)", err ? err->message : "?",
                 err ? err->expression : -1);
        die("%s", why);
    }
    double secs = (now_ns() - t) / 1e9;
    if (hs_alloc_scratch(c.db, &c.scratch) != HS_SUCCESS)
        die("hs_alloc_scratch failed");
    size_t dbsize = 0;
    hs_database_size(c.db, &dbsize);
    char extra[256];
    snprintf(extra, sizeof extra, ",\"patterns\":%zu,\"db_bytes\":%zu,\"version\":\"%s\"", np, dbsize, hs_version());
    emit_build("hyperscan", "strmatch", secs, extra);

    double *ns = calloc(reps, sizeof *ns);
    double bits = (double)bytes * 8 / (double)c.n; /* per payload */
    uint64_t check = timed("hs all", hs_all, NULL, &c, c.n, ns);
    snprintf(extra, sizeof extra, ",\"gbit_s\":%.3f,\"gbit_s_max\":%.3f,\"payload_bytes\":%" PRIu64 ",\"avg_payload\":%.3f",
             bits / median(ns, reps), bits / minimum(ns, reps), bytes, (double)bytes / (double)c.n);
    emit("hyperscan", "strmatch", "all", ns, c.n, check, extra);
    check = timed("hs first", hs_first, NULL, &c, c.n, ns);
    snprintf(extra, sizeof extra, ",\"gbit_s\":%.3f,\"gbit_s_max\":%.3f,\"payload_bytes\":%" PRIu64 ",\"avg_payload\":%.3f",
             bits / median(ns, reps), bits / minimum(ns, reps), bytes, (double)bytes / (double)c.n);
    emit("hyperscan", "strmatch", "first", ns, c.n, check, extra);
    hs_free_scratch(c.scratch);
    hs_free_database(c.db);
    return 0;
}

#endif /* HAVE_HS */

/* ---- main ------------------------------------------------------------------- */

/* ---- bench: l2fwd ---- */

/* L2 forwarding by destination MAC over a static table (examples/l2-fwd,
 * the paper's L2Fwd): `coprobench gen-l2fwd DIR N` writes the table
 * (l2fwd-N.keys: 6 key bytes and a u16 port per entry) and the frames
 * (l2fwd64-N.bin). The check is the sum of port + 1 over forwarded frames. */
struct l2fwd_ctx {
    struct rte_hash *h;
    struct frames *fr;
    uint64_t fwd, drop;
};

static __attribute__((noinline)) uint64_t l2fwd_single(void *v)
{
    struct l2fwd_ctx *c = v;
    const struct frames *fr = c->fr;
    uint64_t s = 0, fwd = 0, drop = 0;
    for (size_t i = 0; i < fr->n; i++) {
        const uint8_t *f = fr->work + i * fr->slot;
        void *d;
        if (fr->len[i] < 14 || rte_hash_lookup_data(c->h, f, &d) < 0 || (uintptr_t)d >= NPORTS) {
            drop++;
            continue;
        }
        fwd++;
        s += (uintptr_t)d + 1;
    }
    c->fwd += fwd, c->drop += drop;
    return s;
}

static inline __attribute__((always_inline)) uint64_t l2fwd_bulk_via(void *v, const int via_xb)
{
    struct l2fwd_ctx *c = v;
    const struct frames *fr = c->fr;
    uint64_t s = 0, fwd = 0, drop = 0;
    const void *keys[BATCH];
    void *data[BATCH];
    for (size_t i = 0; i < fr->n; i += BATCH) {
        unsigned b = fr->n - i < BATCH ? (unsigned)(fr->n - i) : BATCH, k = 0;
        for (unsigned j = 0; j < b; j++) {
            if (len_at(fr, i + j, via_xb) < 14)
                drop++;
            else
                keys[k++] = frame_at(fr, i + j, via_xb);
        }
        uint64_t hit = 0;
        if (k)
            rte_hash_lookup_bulk_data(c->h, keys, k, &hit, data);
        for (unsigned j = 0; j < k; j++) {
            if (!(hit >> j & 1) || (uintptr_t)data[j] >= NPORTS) {
                drop++;
                continue;
            }
            fwd++;
            s += (uintptr_t)data[j] + 1;
        }
    }
    c->fwd += fwd, c->drop += drop;
    return s;
}

FLAT_AND_XB(l2fwd_bulk)

static int bench_l2fwd(const char *dir, size_t n)
{
    char name[64], bench[48];
    snprintf(bench, sizeof bench, "l2fwd64-%zu", n);
    snprintf(name, sizeof name, "l2fwd-%zu.keys", n);
    struct blob keys = slurp(dir, name);
    if (keys.n != 8 * n)
        die("%s: %zu bytes, expected %zu entries of 8 bytes", name, keys.n, n);
    snprintf(name, sizeof name, "l2fwd64-%zu.bin", n);
    struct frames fr = load_frames(dir, name, 0);
    /* entries = N first; if an insert fails (the cuckoo table is full
     * before its nominal size), twice as many, as the hash bench does. */
    struct rte_hash *h = NULL;
    uint32_t ent = (uint32_t)(n < 1024 ? 1024 : n), tries = 0;
    double t = now_ns();
    for (;;) {
        char hname[32];
        snprintf(hname, sizeof hname, "copro_l2fwd%u", tries++);
        struct rte_hash_parameters p = {
            .name = hname, .entries = ent, .key_len = 6, .hash_func = NULL, .hash_func_init_val = 0,
            .socket_id = SOCKET_ID_ANY, .extra_flag = 0,
        };
        t = now_ns();
        h = rte_hash_create(&p);
        if (h == NULL)
            die("rte_hash_create (%u entries, 6-byte keys): %s", ent, rte_strerror(rte_errno));
        size_t i = 0;
        for (; i < n; i++) {
            uint16_t port;
            memcpy(&port, keys.p + 8 * i + 6, 2);
            if (rte_hash_add_key_data(h, keys.p + 8 * i, (void *)(uintptr_t)port) < 0)
                break;
        }
        if (i == n)
            break;
        rte_hash_free(h);
        if (ent > (1u << 30))
            die("rte_hash: cannot insert %zu keys", n);
        ent *= 2;
    }
    char extra[256];
    snprintf(extra, sizeof extra, ",\"entries\":%zu,\"capacity\":%" PRId32 ",\"hash_func\":\"%s\",\"eal\":\"%s\"", n,
             rte_hash_max_key_id(h), hash_func_name(h, keys.p, 6), eal_mode);
    emit_build("c-l2fwd/dpdk-rte_hash", bench, (now_ns() - t) / 1e9, extra);
    free(keys.p);
    struct l2fwd_ctx c = {.h = h, .fr = &fr};
    double *ns = calloc(reps, sizeof *ns);
    uint64_t check = timed("l2fwd single", l2fwd_single, NULL, &c, fr.n, ns);
    snprintf(extra, sizeof extra, ",\"mpps\":%.3f", 1e3 / median(ns, reps));
    emit("c-l2fwd/dpdk-rte_hash", bench, "single", ns, fr.n, check, extra);
    check = timed("l2fwd bulk", l2fwd_bulk, NULL, &c, fr.n, ns);
    snprintf(extra, sizeof extra, ",\"mpps\":%.3f", 1e3 / median(ns, reps));
    emit("c-l2fwd/dpdk-rte_hash", bench, "bulk", ns, fr.n, check, extra);
    check = timed("l2fwd bulk-xb", l2fwd_bulk_xb, NULL, &c, fr.n, ns);
    snprintf(extra, sizeof extra, ",\"mpps\":%.3f", 1e3 / median(ns, reps));
    emit("c-l2fwd/dpdk-rte_hash", bench, "bulk-xb", ns, fr.n, check, extra);
    rte_hash_free(h);
    return 0;
}

/* ---- bench: lpm6 ---- */

/* rte_lpm6 on `coprobench gen-ipv6`'s routes (routes6.bin: 16 address
 * bytes, the length, a u32 next hop) and addresses (lpm6_addrs.bin, 16
 * bytes each). The table's memory: rte_lpm6 allocates a 2^24-entry first
 * level (4-byte entries) and `number_tbl8s` groups of 256 entries up
 * front; the fewest groups that take every route are found by doubling
 * from 2^16. The check is the sum of next hop + 1. */
struct lpm6_ctx {
    struct rte_lpm6 *lpm;
    const uint8_t *addrs;
    size_t n;
};

static __attribute__((noinline)) uint64_t lpm6_single(void *v)
{
    struct lpm6_ctx *c = v;
    uint64_t s = 0;
    for (size_t i = 0; i < c->n; i++) {
        uint32_t nh;
        if (rte_lpm6_lookup(c->lpm, c->addrs + 16 * i, &nh) == 0)
            s += nh + 1;
    }
    return s;
}

static __attribute__((noinline)) uint64_t lpm6_bulk(void *v)
{
    struct lpm6_ctx *c = v;
    uint64_t s = 0;
    int32_t nh[BATCH];
    for (size_t i = 0; i < c->n; i += BATCH) {
        unsigned b = c->n - i < BATCH ? (unsigned)(c->n - i) : BATCH;
        rte_lpm6_lookup_bulk_func(c->lpm, (uint8_t(*)[16])(uintptr_t)(c->addrs + 16 * i), nh, b);
        for (unsigned j = 0; j < b; j++)
            if (nh[j] >= 0)
                s += (uint64_t)nh[j] + 1;
    }
    return s;
}

static int bench_lpm6(const char *dir)
{
    struct blob routes = slurp(dir, "routes6.bin");
    struct blob addrs = slurp(dir, "lpm6_addrs.bin");
    if (routes.n % 21 != 0 || addrs.n % 16 != 0)
        die("routes6.bin / lpm6_addrs.bin: bad sizes (run coprobench gen-ipv6)");
    size_t nr = routes.n / 21;
    struct rte_lpm6 *lpm = NULL;
    uint32_t tbl8s = 1u << 16, tries = 0;
    double secs = 0;
    for (;;) {
        char name[32];
        snprintf(name, sizeof name, "copro_lpm6_%u", tries++);
        struct rte_lpm6_config cfg = {.max_rules = (uint32_t)nr, .number_tbl8s = tbl8s, .flags = 0};
        double t = now_ns();
        lpm = rte_lpm6_create(name, SOCKET_ID_ANY, &cfg);
        if (lpm == NULL)
            die("rte_lpm6_create (%u tbl8s): %s", tbl8s, rte_strerror(rte_errno));
        size_t i = 0;
        for (; i < nr; i++) {
            const uint8_t *r = routes.p + 21 * i;
            uint32_t hop;
            memcpy(&hop, r + 17, 4);
            if (rte_lpm6_add(lpm, r, r[16], hop) < 0)
                break;
        }
        secs = (now_ns() - t) / 1e9;
        if (i == nr)
            break;
        rte_lpm6_free(lpm);
        if (tbl8s >= (1u << 24))
            die("rte_lpm6: %zu routes do not fit 2^24 tbl8s", nr);
        tbl8s *= 2;
    }
    double mib = ((double)(1u << 24) * 4 + (double)tbl8s * 256 * 4) / (1 << 20);
    char extra[256];
    snprintf(extra, sizeof extra, ",\"routes\":%zu,\"tbl8s\":%u,\"table_mib\":%.1f,\"eal\":\"%s\"", nr, tbl8s, mib, eal_mode);
    emit_build("dpdk-rte_lpm6", "lpm6", secs, extra);
    struct lpm6_ctx c = {lpm, addrs.p, addrs.n / 16};
    double *ns = calloc(reps, sizeof *ns);
    uint64_t check = timed("lpm6 single", lpm6_single, NULL, &c, c.n, ns);
    emit("dpdk-rte_lpm6", "lpm6", "single", ns, c.n, check, "");
    check = timed("lpm6 bulk", lpm6_bulk, NULL, &c, c.n, ns);
    emit("dpdk-rte_lpm6", "lpm6", "bulk", ns, c.n, check, "");
    rte_lpm6_free(lpm);
    return 0;
}

/* ---- bench: names ---- */

/* Name forwarding (examples/ndn-router, the paper's NDN application) as a
 * hand-written C loop over rte_hash: `coprobench gen-names DIR` writes the
 * prefixes (names.bin: u8 components, u32 next hop, u16 length, the
 * components as NDN TLV) and the Interests (names64.bin). Every prefix is
 * keyed by 16 bytes (a 64-bit hash chained over its components, the count,
 * the encoded length), its stored bytes compared on a hit, as netvm's
 * `names` does. A lookup parses the Interest's Name at offset 14, hashes
 * its prefixes up to the deepest stored one and probes longest first,
 * skipping lengths no prefix has. "single": one rte_hash_lookup_data per
 * probe; "bulk": 32 frames at a time, each round one
 * rte_hash_lookup_bulk_data over every unresolved frame's next candidate.
 * The check is the sum of next hop + 1 over the names found. */
#define NAME_DEPTH 64
struct names_ctx {
    struct rte_hash *h;
    struct frames *fr;
    const uint8_t *arena;
    const uint32_t *hop, *at; /* per stored prefix */
    uint32_t per_depth[NAME_DEPTH + 1];
    unsigned depth;
};

struct name_key {
    uint64_t hash, meta; /* meta: components | encoded length << 8 */
};

static inline uint64_t fold64(uint64_t a, uint64_t b)
{
    __uint128_t p = (__uint128_t)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

static inline uint64_t chain64(uint64_t h, uint64_t typ, const uint8_t *v, size_t n)
{
    h = fold64(h ^ typ ^ 0x243f6a8885a308d3ull, (uint64_t)n ^ 0x13198a2e03707344ull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, v + i, 8);
        h = fold64(h ^ w, 0xa4093822299f31d0ull);
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, v + i, n - i);
        h = fold64(h ^ w, 0x082efa98ec4e6c89ull);
    }
    return h;
}

/* One-byte TLV lengths only (what gen-names writes): anything else is not
 * a name this loop handles (0 components, no match). Fills keys[1..k] and
 * returns k = min(components, depth), or -1. */
static inline int name_keys(const struct names_ctx *c, const uint8_t *f, uint16_t len, struct name_key *keys,
                            const uint8_t **name)
{
    if (len < 18 || f[12] != 0x86 || f[13] != 0x24 || f[14] != 5 || f[16] != 7 || f[15] >= 253 || f[17] >= 253)
        return -1;
    size_t at = 18, end = 18 + (size_t)f[17];
    if (end > len || end > 16 + (size_t)f[15])
        return -1;
    *name = f + 18;
    uint64_t h = 0x5eed;
    int k = 0;
    while (at < end) {
        if (at + 2 > end || f[at] == 0 || f[at] >= 253 || f[at + 1] >= 253 || at + 2 + f[at + 1] > end)
            return -1;
        size_t n = f[at + 1];
        if ((unsigned)k < c->depth) {
            h = chain64(h, f[at], f + at + 2, n);
            k++;
            keys[k].hash = h;
            keys[k].meta = (uint64_t)k | (uint64_t)(at + 2 + n - 18) << 8;
        }
        at += 2 + n;
    }
    return k;
}

static inline int names_next(const struct names_ctx *c, int k)
{
    while (k > 0 && c->per_depth[k] == 0)
        k--;
    return k;
}

static inline uint64_t names_hit(const struct names_ctx *c, uintptr_t id, const struct name_key *key, const uint8_t *name)
{
    if (memcmp(c->arena + c->at[id], name, key->meta >> 8) != 0)
        return 0;
    return c->hop[id] + 1;
}

static __attribute__((noinline)) uint64_t names_single(void *v)
{
    struct names_ctx *c = v;
    const struct frames *fr = c->fr;
    uint64_t s = 0;
    struct name_key keys[NAME_DEPTH + 1];
    for (size_t i = 0; i < fr->n; i++) {
        const uint8_t *name;
        int k = name_keys(c, fr->work + i * fr->slot, fr->len[i], keys, &name);
        for (k = names_next(c, k); k > 0; k = names_next(c, k - 1)) {
            void *d;
            if (rte_hash_lookup_data(c->h, &keys[k], &d) >= 0) {
                uint64_t r = names_hit(c, (uintptr_t)d, &keys[k], name);
                if (r) {
                    s += r;
                    break;
                }
            }
        }
    }
    return s;
}

static __attribute__((noinline)) uint64_t names_bulk(void *v)
{
    struct names_ctx *c = v;
    const struct frames *fr = c->fr;
    uint64_t s = 0;
    static struct name_key keys[BATCH][NAME_DEPTH + 1];
    const uint8_t *name[BATCH];
    int next[BATCH];
    const void *kp[BATCH];
    void *data[BATCH];
    unsigned who[BATCH];
    for (size_t i = 0; i < fr->n; i += BATCH) {
        unsigned b = fr->n - i < BATCH ? (unsigned)(fr->n - i) : BATCH;
        for (unsigned j = 0; j < b; j++) {
            int k = name_keys(c, fr->work + (i + j) * fr->slot, fr->len[i + j], keys[j], &name[j]);
            next[j] = k > 0 ? names_next(c, k) : 0;
        }
        for (;;) {
            unsigned m = 0;
            for (unsigned j = 0; j < b; j++)
                if (next[j] > 0) {
                    kp[m] = &keys[j][next[j]];
                    who[m++] = j;
                }
            if (m == 0)
                break;
            uint64_t hits = 0;
            rte_hash_lookup_bulk_data(c->h, kp, m, &hits, data);
            for (unsigned q = 0; q < m; q++) {
                unsigned j = who[q];
                uint64_t r = (hits >> q & 1) ? names_hit(c, (uintptr_t)data[q], kp[q], name[j]) : 0;
                if (r) {
                    s += r;
                    next[j] = 0;
                } else
                    next[j] = names_next(c, next[j] - 1);
            }
        }
    }
    return s;
}

static int bench_names(const char *dir)
{
    struct blob b = slurp(dir, "names.bin");
    size_t n = 0, bytes = 0;
    for (size_t i = 0; i < b.n; n++) {
        if (b.n - i < 7 || b.n - i - 7 < le16(b.p + i + 5))
            die("names.bin: truncated at byte %zu", i);
        bytes += le16(b.p + i + 5);
        i += 7 + le16(b.p + i + 5);
    }
    struct names_ctx c = {0};
    uint8_t *arena = malloc(bytes + 1);
    uint32_t *hop = malloc(n * 4), *at = malloc(n * 4);
    struct frames fr = load_frames(dir, "names64.bin", 0);
    double t = now_ns();
    struct rte_hash_parameters p = {
        .name = "copro_names", .entries = (uint32_t)(n + n / 4), .key_len = sizeof(struct name_key),
        .hash_func = NULL, .hash_func_init_val = 0, .socket_id = SOCKET_ID_ANY, .extra_flag = 0,
    };
    c.h = rte_hash_create(&p);
    if (c.h == NULL)
        die("rte_hash_create (%zu entries): %s", n, rte_strerror(rte_errno));
    size_t off = 0;
    for (size_t i = 0, id = 0; i < b.n; id++) {
        unsigned k = b.p[i];
        uint16_t len = le16(b.p + i + 5);
        memcpy(&hop[id], b.p + i + 1, 4);
        at[id] = (uint32_t)off;
        memcpy(arena + off, b.p + i + 7, len);
        if (k == 0 || k > NAME_DEPTH)
            die("names.bin: prefix %zu has %u components", id, k);
        struct name_key key = {0x5eed, (uint64_t)k | (uint64_t)len << 8};
        const uint8_t *q = arena + off;
        for (unsigned j = 0; j < k; j++) {
            key.hash = chain64(key.hash, q[0], q + 2, q[1]);
            q += 2 + q[1];
        }
        if (rte_hash_add_key_data(c.h, &key, (void *)(uintptr_t)id) < 0)
            die("rte_hash: cannot insert prefix %zu", id);
        c.per_depth[k]++;
        c.depth = k > c.depth ? k : c.depth;
        off += len;
        i += 7 + len;
    }
    c.arena = arena, c.hop = hop, c.at = at, c.fr = &fr;
    char extra[256];
    snprintf(extra, sizeof extra, ",\"prefixes\":%zu,\"depth\":%u,\"hash_func\":\"%s\",\"eal\":\"%s\"", n, c.depth,
             hash_func_name(c.h, &(struct name_key){0, 0}, sizeof(struct name_key)), eal_mode);
    emit_build("c-names/dpdk-rte_hash", "names64", (now_ns() - t) / 1e9, extra);
    free(b.p);
    double *ns = calloc(reps, sizeof *ns);
    uint64_t check = timed("names single", names_single, NULL, &c, fr.n, ns);
    snprintf(extra, sizeof extra, ",\"mpps\":%.3f", 1e3 / median(ns, reps));
    emit("c-names/dpdk-rte_hash", "names64", "single", ns, fr.n, check, extra);
    check = timed("names bulk", names_bulk, NULL, &c, fr.n, ns);
    snprintf(extra, sizeof extra, ",\"mpps\":%.3f", 1e3 / median(ns, reps));
    emit("c-names/dpdk-rte_hash", "names64", "bulk", ns, fr.n, check, extra);
    rte_hash_free(c.h);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: copropeers lpm|lpm6|hash|hs|router|bridge|l2fwd|names DIR [N] [--reps R] [--cpu N] [--entries N] "
                    "[--tbl8s N] [--mem MB] [--hash crc|netvm]\n");
    exit(2);
}

static unsigned long parse_num(const char *flag, const char *s, unsigned long lo, unsigned long hi)
{
    char *e;
    errno = 0;
    unsigned long v = strtoul(s, &e, 10);
    if (errno || e == s || *e || v < lo || v > hi)
        die("%s: `%s` is not a number in [%lu, %lu]", flag, s, lo, hi);
    return v;
}

int main(int argc, char **argv)
{
    const char *pos[3] = {NULL, NULL, NULL};
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] == '-') {
            if (i + 1 >= argc)
                die("%s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--reps"))
                reps = (int)parse_num(a, v, 1, 1000);
            else if (!strcmp(a, "--cpu"))
                cpu = (int)parse_num(a, v, 0, CPU_SETSIZE - 1);
            else if (!strcmp(a, "--entries"))
                entries = (uint32_t)parse_num(a, v, 8, 1u << 30);
            else if (!strcmp(a, "--tbl8s"))
                tbl8s = (uint32_t)parse_num(a, v, 1, 1u << 24);
            else if (!strcmp(a, "--mem"))
                mem_mb = (long)parse_num(a, v, 64, 1u << 20);
            else if (!strcmp(a, "--hash")) {
                if (strcmp(v, "netvm") && strcmp(v, "crc"))
                    die("--hash: `%s` is neither `crc` (rte_hash's default) nor `netvm`", v);
                netvm_hash = !strcmp(v, "netvm");
            }
            else
                die("unknown option %s", a);
        } else if (npos < 3)
            pos[npos++] = a;
        else
            usage();
    }
    if (npos < 2)
        usage();
    const char *cmd = pos[0], *dir = pos[1];

    if (!strcmp(cmd, "hs")) {
        if (npos != 2)
            usage();
#ifdef HAVE_HS
        return bench_hs(dir);
#else
        unavailable("hyperscan", "strmatch", "built without Hyperscan (libhyperscan-dev / pkg-config libhs)");
        return 0;
#endif
    }

    const char *engine, *bench;
    char hb[32];
    size_t n = 0;
    if (!strcmp(cmd, "lpm"))
        engine = "dpdk-rte_lpm", bench = "lpm";
    else if (!strcmp(cmd, "lpm6"))
        engine = "dpdk-rte_lpm6", bench = "lpm6";
    else if (!strcmp(cmd, "hash")) {
        if (npos != 3)
            die("usage: copropeers hash DIR N");
        n = parse_num("N", pos[2], 1, 1u << 30);
        snprintf(hb, sizeof hb, "hash%zu", n);
        engine = "dpdk-rte_hash", bench = hb;
    } else if (!strcmp(cmd, "l2fwd")) {
        if (npos != 3)
            die("usage: copropeers l2fwd DIR N");
        n = parse_num("N", pos[2], 1, 1u << 25);
        snprintf(hb, sizeof hb, "l2fwd64-%zu", n);
        engine = "c-l2fwd/dpdk-rte_hash", bench = hb;
    } else if (!strcmp(cmd, "names"))
        engine = "c-names/dpdk-rte_hash", bench = "names64";
    else if (!strcmp(cmd, "router"))
        engine = "c-router/dpdk-rte_lpm", bench = "router64";
    else if (!strcmp(cmd, "bridge"))
        engine = "c-bridge/dpdk-rte_hash", bench = "bridge64";
    else
        usage();
    if (strcmp(cmd, "hash") != 0 && strcmp(cmd, "l2fwd") != 0 && npos != 2)
        usage();

#ifdef HAVE_DPDK
    char err[256];
    if (eal_init(err, sizeof err) != 0) {
        unavailable(engine, bench, err);
        return 0;
    }
    int rc;
    if (!strcmp(cmd, "lpm"))
        rc = bench_lpm(dir);
    else if (!strcmp(cmd, "hash"))
        rc = bench_hash(dir, n);
    else if (!strcmp(cmd, "l2fwd"))
        rc = bench_l2fwd(dir, n);
    else if (!strcmp(cmd, "lpm6"))
        rc = bench_lpm6(dir);
    else if (!strcmp(cmd, "names"))
        rc = bench_names(dir);
    else if (!strcmp(cmd, "router"))
        rc = bench_router(dir);
    else
        rc = bench_bridge(dir);
    rte_eal_cleanup();
    return rc;
#else
    (void)dir, (void)n;
    unavailable(engine, bench, "built without DPDK (libdpdk-dev / pkg-config libdpdk)");
    return 0;
#endif
}
