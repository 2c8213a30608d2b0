/*
 * filterpeers: ns per packet of netvm's peers on the five filters of the
 * NetVM paper (§6.3.1), on the workloads `filterbench gen` writes:
 * TRACES/fullpath.pcap (the 64-byte frame 10.1.1.1:20 -> 10.2.2.2:30 TCP,
 * repeated) and TRACES/mixed.pcap (the mixed trace, one pass per repetition).
 *
 *   filterpeers --traces DIR [--reps N] [--target-ms MS] [--peers native,libpcap,dpdk,kernel]
 *               [--kernel-repeat N] [--kernel-check N]
 *
 * Prints one JSON line per (peer, filter, workload) on stdout, in the format
 * of crates/bench/src/measure.rs (a peer that cannot run prints
 * {"engine":..,"filter":..,"workload":..,"unavailable":"why"} instead), and a
 * table of medians on stderr.
 *
 * Peers and what each figure includes (ns per packet, median and minimum of
 * --reps repetitions after one warm-up pass; every repetition times a whole
 * loop with clock_gettime and divides by the packets in it):
 *   native-c   the filter hand-written in C (native_filters.c, gcc -O2),
 *              called per packet through a function pointer: the call, the
 *              filter, the loop and the accept count; native-c-empty is an
 *              empty function (return 1) called the same way right after:
 *              the floor of that measurement (full-path frame only);
 *   libpcap    pcap_compile (optimizer on, DLT_EN10MB, snaplen 65535) once,
 *              then bpf_filter() per packet: libpcap's BPF interpreter, called
 *              directly (through the PLT) with the packet, its wire and captured length;
 *   dpdk-jit   libpcap's program converted by rte_bpf_convert, loaded by
 *              rte_bpf_load, compiled by DPDK's JIT (rte_bpf_get_jit), called
 *              per packet with an rte_mbuf (see dpdk_peer.c);
 *   kernel-xdp the same libpcap program translated to XDP eBPF (kernel_bpf.c),
 *              verified and JIT-compiled by the kernel, run by BPF_PROG_TEST_RUN
 *              with --kernel-repeat repetitions per call: the kernel's reported
 *              average (whole ns) minus that of an empty XDP program measured
 *              right before it; kernel-xdp-raw and kernel-xdp-empty are the two
 *              terms. Full-path frame only: test_run repeats one frame, so it
 *              cannot stream the mixed trace.
 * The mixed trace is held in memory as contiguous SLOT-byte slots (for DPDK:
 * mbuf + data, see dpdk_peer.c), read in order.
 *
 * Every peer's accept count on the mixed trace is checked against libpcap's
 * bpf_filter; the kernel translation is checked on the first --kernel-check
 * frames of the mixed trace (one test_run each).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pcap/pcap.h>

#include "peers.h"

static const char *const FILTER_NAMES[5] = {"f1_ip", "f2_ip_src", "f3_ip_tcp", "f4_ip_tcp_4field", "f5_ip_src_or4"};
static const char *const FILTER_EXPRS[5] = {
    "ip",
    "ip src 10.1.1.1",
    "ip and tcp",
    "ip src 10.1.1.1 and ip dst 10.2.2.2 and tcp src port 20 and tcp dst port 30",
    "ip src 10.4.4.4 or ip src 10.3.3.3 or ip src 10.2.2.2 or ip src 10.1.1.1",
};

/* A workload in memory: n packets in SLOT-byte slots. */
struct trace {
    uint8_t *slots;
    uint32_t *caplen, *wirelen;
    size_t n;
};

static int reps = 7;
static double target_ms = 100;

/* ---- output ---------------------------------------------------------------- */

struct rec {
    char engine[32], filter[24], workload[12];
    double med, min;
    int ok;
};
static struct rec recs[256];
static int nrecs;

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

static void record(const char *engine, const char *filter, const char *workload, const double *ns, int n, uint64_t packets,
                   uint64_t accepted);

static void unavailable(const char *engine, const char *filter, const char *workload, const char *why)
{
    printf("{\"engine\":");
    json_str(engine);
    printf(",\"filter\":");
    json_str(filter);
    printf(",\"workload\":");
    json_str(workload);
    printf(",\"unavailable\":");
    json_str(why);
    printf("}\n");
    fflush(stdout);
    if (nrecs < 256) {
        struct rec *r = &recs[nrecs++];
        snprintf(r->engine, sizeof r->engine, "%s", engine);
        snprintf(r->filter, sizeof r->filter, "%s", filter);
        snprintf(r->workload, sizeof r->workload, "%s", workload);
        r->ok = 0;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    double s[64];
    if (n > 64)
        n = 64;
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void record(const char *engine, const char *filter, const char *workload, const double *ns, int n, uint64_t packets,
                   uint64_t accepted)
{
    double med = median(ns, n), mn = INFINITY;
    for (int i = 0; i < n; i++)
        mn = ns[i] < mn ? ns[i] : mn;
    printf("{\"engine\":\"%s\",\"filter\":\"%s\",\"workload\":\"%s\",\"ns_median\":%.3f,\"ns_min\":%.3f,\"reps\":%d,"
           "\"packets\":%llu,\"accepted\":%llu}\n",
           engine, filter, workload, med, mn, n, (unsigned long long)packets, (unsigned long long)accepted);
    fflush(stdout);
    if (nrecs < 256) {
        struct rec *r = &recs[nrecs++];
        snprintf(r->engine, sizeof r->engine, "%s", engine);
        snprintf(r->filter, sizeof r->filter, "%s", filter);
        snprintf(r->workload, sizeof r->workload, "%s", workload);
        r->med = med;
        r->min = mn;
        r->ok = 1;
    }
}

static void print_table(void)
{
    fprintf(stderr, "%-10s %-22s", "workload", "peer");
    for (int f = 0; f < 5; f++)
        fprintf(stderr, " %17s", FILTER_NAMES[f]);
    fprintf(stderr, "\n");
    const char *wl[2] = {"fullpath", "mixed"};
    for (int w = 0; w < 2; w++) {
        char seen[32][32];
        int nseen = 0;
        for (int i = 0; i < nrecs; i++) {
            if (strcmp(recs[i].workload, wl[w]) != 0)
                continue;
            int dup = 0;
            for (int j = 0; j < nseen; j++)
                dup |= strcmp(seen[j], recs[i].engine) == 0;
            if (dup || nseen == 32)
                continue;
            snprintf(seen[nseen++], 32, "%.31s", recs[i].engine);
            fprintf(stderr, "%-10s %-22s", wl[w], recs[i].engine);
            for (int f = 0; f < 5; f++) {
                const struct rec *r = NULL;
                for (int j = 0; j < nrecs; j++)
                    if (strcmp(recs[j].engine, recs[i].engine) == 0 && strcmp(recs[j].workload, wl[w]) == 0 &&
                        strcmp(recs[j].filter, FILTER_NAMES[f]) == 0)
                        r = &recs[j];
                if (r && r->ok)
                    fprintf(stderr, " %17.2f", r->med);
                else
                    fprintf(stderr, " %17s", r ? "n/a" : "-");
            }
            fprintf(stderr, "\n");
        }
    }
}

/* ---- timing ---------------------------------------------------------------- */

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* A pass: processes `iters` repetitions of one frame, or the whole trace
 * (iters ignored); returns the number of packets accepted. */
typedef uint64_t (*pass_fn)(void *ctx, uint64_t iters);

/* How many iterations make a repetition last about target_ms. */
static uint64_t calibrate(pass_fn pass, void *ctx)
{
    for (uint64_t n = 1000;; n *= 4) {
        double t = now_ns();
        pass(ctx, n);
        double ms = (now_ns() - t) / 1e6;
        if (ms >= 5 || n >= (1ull << 34)) {
            double k = n * target_ms / (ms > 1e-3 ? ms : 1e-3);
            return k < 1000 ? 1000 : (uint64_t)k;
        }
    }
}

/* Warm-up, then `reps` timed passes of `packets` packets each; fills ns[]. */
static uint64_t time_passes(pass_fn pass, void *ctx, uint64_t iters, uint64_t packets, double *ns)
{
    uint64_t acc = pass(ctx, iters);
    for (int r = 0; r < reps; r++) {
        double t = now_ns();
        uint64_t a = pass(ctx, iters);
        ns[r] = (now_ns() - t) / (double)packets;
        if (a != acc) {
            fprintf(stderr, "filterpeers: two passes accepted %llu and %llu packets\n", (unsigned long long)acc,
                    (unsigned long long)a);
            exit(1);
        }
    }
    return acc;
}

/* ---- the peers' inner loops ------------------------------------------------- */

struct ctx {
    const struct trace *t;
    native_filter_fn native;
    const struct bpf_insn *bpf;
    dpdk_jit_fn jit;
    uint8_t *mbufs;
    size_t stride;
};

static __attribute__((noinline)) uint64_t native_repeat(void *v, uint64_t iters)
{
    struct ctx *c = v;
    native_filter_fn f = *(native_filter_fn volatile *)&c->native; /* an opaque pointer: a real indirect call */
    const uint8_t *p = c->t->slots;
    uint32_t len = c->t->caplen[0];
    uint64_t acc = 0;
    for (uint64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+r"(p)); /* the frame could have changed: reload nothing across calls */
        acc += f(p, len) != 0;
    }
    return acc;
}

static __attribute__((noinline)) uint64_t native_trace(void *v, uint64_t iters)
{
    (void)iters;
    struct ctx *c = v;
    native_filter_fn f = *(native_filter_fn volatile *)&c->native;
    const struct trace *t = c->t;
    uint64_t acc = 0;
    for (size_t i = 0; i < t->n; i++)
        acc += f(t->slots + i * SLOT, t->caplen[i]) != 0;
    return acc;
}

static __attribute__((noinline)) uint64_t libpcap_repeat(void *v, uint64_t iters)
{
    struct ctx *c = v;
    const uint8_t *p = c->t->slots;
    uint32_t len = c->t->caplen[0], wire = c->t->wirelen[0];
    uint64_t acc = 0;
    for (uint64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+r"(p));
        acc += bpf_filter(c->bpf, p, wire, len) != 0;
    }
    return acc;
}

static __attribute__((noinline)) uint64_t libpcap_trace(void *v, uint64_t iters)
{
    (void)iters;
    struct ctx *c = v;
    const struct trace *t = c->t;
    uint64_t acc = 0;
    for (size_t i = 0; i < t->n; i++)
        acc += bpf_filter(c->bpf, t->slots + i * SLOT, t->wirelen[i], t->caplen[i]) != 0;
    return acc;
}

static __attribute__((noinline)) uint64_t dpdk_repeat(void *v, uint64_t iters)
{
    struct ctx *c = v;
    dpdk_jit_fn f = *(dpdk_jit_fn volatile *)&c->jit;
    void *m = c->mbufs;
    uint64_t acc = 0;
    for (uint64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+r"(m));
        acc += f(m) != 0;
    }
    return acc;
}

static __attribute__((noinline)) uint64_t dpdk_trace(void *v, uint64_t iters)
{
    (void)iters;
    struct ctx *c = v;
    dpdk_jit_fn f = *(dpdk_jit_fn volatile *)&c->jit;
    uint64_t acc = 0;
    for (size_t i = 0; i < c->t->n; i++)
        acc += f(c->mbufs + i * c->stride) != 0;
    return acc;
}

/* Times `repeat` (calibrated) on the full-path frame and `trace` on the mixed trace. */
static void measure(const char *engine, int f, pass_fn repeat, struct ctx *full, pass_fn trace, struct ctx *mixed,
                    uint64_t expect_mixed)
{
    double ns[64];
    uint64_t iters = calibrate(repeat, full);
    uint64_t acc = time_passes(repeat, full, iters, iters, ns);
    if (acc != iters)
        fprintf(stderr, "filterpeers: WARNING: %s %s rejects the full-path frame\n", engine, FILTER_NAMES[f]);
    record(engine, FILTER_NAMES[f], "fullpath", ns, reps, iters, acc);
    acc = time_passes(trace, mixed, 1, mixed->t->n, ns);
    if (acc != expect_mixed)
        fprintf(stderr, "filterpeers: WARNING: %s %s accepts %llu frames of the mixed trace, libpcap %llu\n", engine,
                FILTER_NAMES[f], (unsigned long long)acc, (unsigned long long)expect_mixed);
    record(engine, FILTER_NAMES[f], "mixed", ns, reps, mixed->t->n, acc);
}

/* ---- loading --------------------------------------------------------------- */

static int load_trace(const char *path, struct trace *t)
{
    char err[PCAP_ERRBUF_SIZE];
    pcap_t *p = pcap_open_offline(path, err);
    if (p == NULL) {
        fprintf(stderr, "filterpeers: %s\n", err);
        return -1;
    }
    if (pcap_datalink(p) != DLT_EN10MB) {
        fprintf(stderr, "filterpeers: %s: not an Ethernet capture\n", path);
        return -1;
    }
    size_t cap = 1024;
    t->n = 0;
    t->slots = malloc(cap * SLOT);
    t->caplen = malloc(cap * sizeof *t->caplen);
    t->wirelen = malloc(cap * sizeof *t->wirelen);
    struct pcap_pkthdr *h;
    const u_char *d;
    int r;
    while ((r = pcap_next_ex(p, &h, &d)) == 1) {
        if (t->n == cap) {
            cap *= 2;
            t->slots = realloc(t->slots, cap * SLOT);
            t->caplen = realloc(t->caplen, cap * sizeof *t->caplen);
            t->wirelen = realloc(t->wirelen, cap * sizeof *t->wirelen);
        }
        uint32_t len = h->caplen < SLOT ? h->caplen : SLOT;
        memset(t->slots + t->n * SLOT, 0, SLOT);
        memcpy(t->slots + t->n * SLOT, d, len);
        t->caplen[t->n] = len;
        t->wirelen[t->n] = h->len;
        t->n++;
    }
    pcap_close(p);
    /* Page-aligned copy, so that both workloads start on a fresh line. */
    uint8_t *s = aligned_alloc(4096, (t->n * SLOT + 4095) / 4096 * 4096 + 4096);
    memcpy(s, t->slots, t->n * SLOT);
    free(t->slots);
    t->slots = s;
    return r == -2 ? 0 : -1;
}

static int has_peer(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *peers = "native,libpcap,dpdk,kernel";
    uint32_t kernel_repeat = 1000000;
    long kernel_check = 20000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--traces"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--target-ms"))
            target_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--peers"))
            peers = argv[i + 1];
        else if (!strcmp(argv[i], "--kernel-repeat"))
            kernel_repeat = (uint32_t)strtoul(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--kernel-check"))
            kernel_check = atol(argv[i + 1]);
        else
            dir = NULL, i = argc;
    }
    if (dir == NULL || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: filterpeers --traces DIR [--reps N (1-64)] [--target-ms MS] "
                        "[--peers native,libpcap,dpdk,kernel] [--kernel-repeat N] [--kernel-check N]\n");
        return 2;
    }
    char path[4096];
    struct trace full, mixed;
    snprintf(path, sizeof path, "%s/fullpath.pcap", dir);
    if (load_trace(path, &full) != 0 || full.n != 1) {
        fprintf(stderr, "filterpeers: %s must hold exactly one frame\n", path);
        return 1;
    }
    snprintf(path, sizeof path, "%s/mixed.pcap", dir);
    if (load_trace(path, &mixed) != 0 || mixed.n == 0) {
        fprintf(stderr, "filterpeers: cannot read %s\n", path);
        return 1;
    }
    fprintf(stderr, "filterpeers: full-path frame of %u bytes, mixed trace of %zu frames\n", full.caplen[0], mixed.n);

    /* libpcap's programs, and its accept counts on the mixed trace: the reference. */
    struct bpf_program progs[5];
    uint64_t expect[5];
    pcap_t *dead = pcap_open_dead(DLT_EN10MB, 65535);
    for (int f = 0; f < 5; f++) {
        if (pcap_compile(dead, &progs[f], FILTER_EXPRS[f], 1, PCAP_NETMASK_UNKNOWN) != 0) {
            fprintf(stderr, "filterpeers: pcap_compile %s: %s\n", FILTER_EXPRS[f], pcap_geterr(dead));
            return 1;
        }
        expect[f] = 0;
        for (size_t i = 0; i < mixed.n; i++)
            expect[f] += bpf_filter(progs[f].bf_insns, mixed.slots + i * SLOT, mixed.wirelen[i], mixed.caplen[i]) != 0;
    }

    if (has_peer(peers, "native")) {
        for (int f = 0; f < 5; f++) {
            struct ctx cf = {.t = &full, .native = native_filters[f]}, cm = {.t = &mixed, .native = native_filters[f]};
            measure("native-c", f, native_repeat, &cf, native_trace, &cm, expect[f]);
            /* The empty function right after, on the full-path frame: the call-and-loop floor. */
            double ns[64];
            struct ctx ce = {.t = &full, .native = native_empty};
            uint64_t iters = calibrate(native_repeat, &ce);
            uint64_t acc = time_passes(native_repeat, &ce, iters, iters, ns);
            record("native-c-empty", FILTER_NAMES[f], "fullpath", ns, reps, iters, acc);
        }
    }
    if (has_peer(peers, "libpcap")) {
        for (int f = 0; f < 5; f++) {
            struct ctx cf = {.t = &full, .bpf = progs[f].bf_insns}, cm = {.t = &mixed, .bpf = progs[f].bf_insns};
            measure("libpcap", f, libpcap_repeat, &cf, libpcap_trace, &cm, expect[f]);
        }
    }
    if (has_peer(peers, "dpdk")) {
#ifdef HAVE_DPDK
        char err[1024] = "";
        cpu_set_t set;
        int cpu = 0;
        if (sched_getaffinity(0, sizeof set, &set) == 0)
            while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &set))
                cpu++;
        int ok = dpdk_init(cpu, err, sizeof err) == 0;
        struct ctx cf = {.t = &full}, cm = {.t = &mixed};
        if (ok) {
            cf.mbufs = dpdk_mbufs(full.slots, full.caplen, 1, &cf.stride);
            cm.mbufs = dpdk_mbufs(mixed.slots, mixed.caplen, mixed.n, &cm.stride);
            ok = cf.mbufs && cm.mbufs;
            if (!ok)
                snprintf(err, sizeof err, "out of memory for the mbufs");
        }
        for (int f = 0; f < 5; f++) {
            if (ok)
                cf.jit = cm.jit = dpdk_prepare(&progs[f], err, sizeof err);
            if (ok && cf.jit) {
                measure("dpdk-jit", f, dpdk_repeat, &cf, dpdk_trace, &cm, expect[f]);
            } else {
                unavailable("dpdk-jit", FILTER_NAMES[f], "fullpath", err);
                unavailable("dpdk-jit", FILTER_NAMES[f], "mixed", err);
            }
        }
#else
        for (int f = 0; f < 5; f++)
            for (int w = 0; w < 2; w++)
                unavailable("dpdk-jit", FILTER_NAMES[f], w ? "mixed" : "fullpath",
                            "built without DPDK (libdpdk-dev not found by pkg-config)");
#endif
    }
    if (has_peer(peers, "kernel")) {
        char err[2048] = "";
        int empty = kbpf_load_empty(err, sizeof err);
        for (int f = 0; f < 5; f++) {
            struct cbpf_insn prog[256];
            size_t len = progs[f].bf_len < 256 ? progs[f].bf_len : 256;
            for (size_t i = 0; i < len; i++) {
                const struct bpf_insn *b = &progs[f].bf_insns[i];
                prog[i] = (struct cbpf_insn){b->code, b->jt, b->jf, b->k};
            }
            int fd = empty < 0 ? empty : kbpf_load(prog, len, err, sizeof err);
            uint32_t dur, ret, dur0, ret0;
            /* Check the translation against bpf_filter on the head of the mixed trace. XDP
             * test_run refuses frames shorter than an Ethernet header: those are left out
             * (all five filters reject them). */
            long checked = 0, bad = 0;
            for (size_t i = 0; fd >= 0 && i < mixed.n && checked < kernel_check; i++) {
                const uint8_t *p = mixed.slots + i * SLOT;
                if (mixed.caplen[i] < 14)
                    continue;
                if (kbpf_test_run(fd, p, mixed.caplen[i], 1, &dur, &ret) != 0) {
                    snprintf(err, sizeof err, "BPF_PROG_TEST_RUN: %s", strerror(errno));
                    fd = -1;
                    break;
                }
                int want = bpf_filter(progs[f].bf_insns, p, mixed.wirelen[i], mixed.caplen[i]) != 0;
                bad += (ret == KBPF_ACCEPT) != want;
                checked++;
            }
            if (fd >= 0 && bad) {
                snprintf(err, sizeof err, "translation disagrees with bpf_filter on %ld of %ld frames", bad, checked);
                fd = -1;
            }
            if (fd >= 0 && checked)
                fprintf(stderr, "filterpeers: kernel-xdp %s: agrees with bpf_filter on %ld frames of the mixed trace\n",
                        FILTER_NAMES[f], checked);
            double raw[64], base[64], net[64];
            for (int r = 0; fd >= 0 && r <= reps; r++) { /* r == 0: warm-up */
                if (kbpf_test_run(empty, full.slots, full.caplen[0], kernel_repeat, &dur0, &ret0) != 0 ||
                    kbpf_test_run(fd, full.slots, full.caplen[0], kernel_repeat, &dur, &ret) != 0) {
                    snprintf(err, sizeof err, "BPF_PROG_TEST_RUN: %s", strerror(errno));
                    fd = -1;
                    break;
                }
                if (r > 0) {
                    raw[r - 1] = dur;
                    base[r - 1] = dur0;
                    net[r - 1] = (double)dur - (double)dur0;
                }
            }
            if (fd >= 0) {
                uint64_t acc = ret == KBPF_ACCEPT ? kernel_repeat : 0;
                record("kernel-xdp", FILTER_NAMES[f], "fullpath", net, reps, kernel_repeat, acc);
                record("kernel-xdp-raw", FILTER_NAMES[f], "fullpath", raw, reps, kernel_repeat, acc);
                record("kernel-xdp-empty", FILTER_NAMES[f], "fullpath", base, reps, kernel_repeat, kernel_repeat);
                unavailable("kernel-xdp", FILTER_NAMES[f], "mixed",
                            "BPF_PROG_TEST_RUN repeats one frame; it cannot stream a trace");
            } else {
                unavailable("kernel-xdp", FILTER_NAMES[f], "fullpath", err);
                unavailable("kernel-xdp", FILTER_NAMES[f], "mixed", err);
            }
        }
    }
    print_table();
    return 0;
}
