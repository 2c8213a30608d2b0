/*
 * pcap_compile_time: libpcap's compile latency, the peer of
 * crates/pfl/examples/compile_time.rs (scripts/bench-pfl.sh, "compile").
 *
 *   pcap_compile_time N EXPR...
 *
 * For each expression: N rounds of pcap_compile (optimizer on, netmask 0,
 * DLT_EN10MB, as tcpdump -r) + pcap_freecode, each round timed alone;
 * prints one JSON line per expression with the median and minimum in
 * microseconds and the number of BPF instructions.
 */
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: pcap_compile_time N EXPR...\n");
        return 2;
    }
    int n = atoi(argv[1]);
    if (n < 1) n = 1;
    pcap_t *p = pcap_open_dead(DLT_EN10MB, 262144);
    double *t = malloc(sizeof(double) * n);
    if (!p || !t) return 1;
    for (int e = 2; e < argc; e++) {
        struct bpf_program prog;
        unsigned insns = 0;
        for (int i = 0; i < n; i++) {
            double t0 = now_us();
            if (pcap_compile(p, &prog, argv[e], 1, 0) != 0) {
                fprintf(stderr, "pcap_compile %s: %s\n", argv[e], pcap_geterr(p));
                return 1;
            }
            t[i] = now_us() - t0;
            insns = prog.bf_len;
            pcap_freecode(&prog);
        }
        qsort(t, n, sizeof(double), cmp_double);
        printf("{\"compile\": {\"engine\": \"libpcap\", \"expr\": \"%s\", \"us_median\": %.2f, \"us_min\": %.2f, \"n\": %d, \"insns\": %u}}\n",
               argv[e], t[n / 2], t[0], n, insns);
    }
    free(t);
    pcap_close(p);
    return 0;
}
