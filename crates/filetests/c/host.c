/*
 * A small C host for AOT-compiled netvm applications (include/netvm.h),
 * the AOT engines of the conformance suite (crates/filetests): it links an
 * object written by `netvm compile -o` (or netvm_jit::aot) with
 * libnetvm_rt.a, runs packets through it in batches and prints everything
 * observable, for comparison with the interpreter.
 *
 * Input (stdin, little-endian): u32 packets, u32 batch size; then per packet
 * u16 in_port, u32 caplen, u32 wirelen, u64 ts_sec, u32 ts_nsec, u64 budget
 * (UINT64_MAX: the layout's; a batch runs under its first packet's), caplen bytes.
 * Output (stdout, one record per line):
 *   layout NODES COUNTERS INFO_SIZE BUDGET
 *   init R
 *   then per batch:
 *   pkt I VERDICT FANNED HEX        (packet I after processing)
 *   emit I PORT HEX                 (buffers that left duplicated packets, in order)
 *   counters C0 C1 ...              (after the batch)
 *   data N HEX                      (data memory of NetPE N after the batch)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netvm.h"

_Static_assert(sizeof(struct netvm_xb) == 40, "struct netvm_xb is 40 bytes");
_Static_assert(sizeof(struct netvm_node) == 40, "struct netvm_node is 40 bytes");
_Static_assert(sizeof(struct netvm_regfile) == 48, "struct netvm_regfile is 48 bytes");
_Static_assert(sizeof(struct netvm_bucketwalk) == 112, "struct netvm_bucketwalk is 112 bytes");
_Static_assert(sizeof(struct netvm_app) == 48, "struct netvm_app is 48 bytes");
_Static_assert(sizeof(struct netvm_layout) == 36, "struct netvm_layout header is 36 bytes");

static void die(const char *what) {
    fprintf(stderr, "host: %s\n", what);
    exit(2);
}

static void read_exact(void *p, size_t n) {
    if (n > 0 && fread(p, 1, n, stdin) != n) die("short input");
}

static void hex(const uint8_t *p, uint64_t n) {
    if (n == 0) fputc('-', stdout);
    for (uint64_t i = 0; i < n; i++) printf("%02x", p[i]);
}

int main(void) {
    const struct netvm_layout *l = &netvm_layout;
    if (l->abi_version != NETVM_ABI_VERSION) die("ABI version mismatch");
    printf("layout %u %u %u %u\n", l->nodes, l->counters, l->info_size, l->budget);

    struct netvm_node *nodes = calloc(l->nodes ? l->nodes : 1, sizeof *nodes);
    for (uint32_t i = 0; i < l->nodes; i++) {
        nodes[i].data = calloc(l->node[i].data_size ? l->node[i].data_size : 1, 1);
        nodes[i].data_len = l->node[i].data_size;
    }
    struct netvm_app app = {
        .budget = l->budget,
        .info = calloc(l->info_size ? l->info_size : 1, 1),
        .nodes = nodes,
        .counters = calloc(l->counters ? l->counters : 1, sizeof(uint64_t)),
        .rt = netvm_rt_fanout_new(),
    };
    if (!nodes || !app.info || !app.counters || !app.rt) die("out of memory");
    printf("init %u\n", netvm_init(&app));

    uint32_t npkts, batch;
    read_exact(&npkts, 4);
    read_exact(&batch, 4);
    if (batch == 0) die("batch size 0");
    struct netvm_xb *xb = calloc(npkts ? npkts : 1, sizeof *xb);
    uint32_t *verdicts = calloc(npkts ? npkts : 1, sizeof *verdicts);
    uint64_t *budgets = calloc(npkts ? npkts : 1, sizeof *budgets);
    if (!xb || !verdicts || !budgets) die("out of memory");
    for (uint32_t i = 0; i < npkts; i++) {
        read_exact(&xb[i].in_port, 2);
        read_exact(&xb[i].caplen, 4);
        read_exact(&xb[i].wirelen, 4);
        read_exact(&xb[i].ts_sec, 8);
        read_exact(&xb[i].ts_nsec, 4);
        read_exact(&budgets[i], 8);
        xb[i].data = malloc(xb[i].caplen ? xb[i].caplen : 1);
        if (!xb[i].data) die("out of memory");
        read_exact(xb[i].data, xb[i].caplen);
        xb[i].seq = i;
    }

    for (uint32_t start = 0; start < npkts; start += batch) {
        uint32_t n = npkts - start < batch ? npkts - start : batch;
        app.budget = budgets[start] != UINT64_MAX ? budgets[start] : l->budget;
        if (netvm_run(&app, xb + start, n, verdicts + start) != 0) die("netvm_run failed");
        for (uint32_t i = 0; i < n; i++) {
            const struct netvm_xb *x = &xb[start + i];
            printf("pkt %u %u %d ", start + i, verdicts[start + i], netvm_rt_fanout_fanned(app.rt, i));
            hex(x->data, x->caplen);
            putchar('\n');
        }
        uint64_t ne = netvm_rt_fanout_emitted_count(app.rt);
        for (uint64_t k = 0; k < ne; k++) {
            uint32_t idx;
            uint16_t port;
            const uint8_t *data;
            uint64_t len;
            if (netvm_rt_fanout_emitted(app.rt, k, &idx, &port, &data, &len) != 0) die("emitted");
            if (!data) {
                data = xb[start + idx].data;
                len = xb[start + idx].caplen;
            }
            printf("emit %u %u ", start + idx, port);
            hex(data, len);
            putchar('\n');
        }
        netvm_rt_fanout_clear(app.rt);
        printf("counters");
        for (uint32_t c = 0; c < l->counters; c++) printf(" %llu", (unsigned long long)app.counters[c]);
        putchar('\n');
        for (uint32_t i = 0; i < l->nodes; i++) {
            printf("data %u ", i);
            hex(nodes[i].data, nodes[i].data_len);
            putchar('\n');
        }
    }

    netvm_rt_fanout_free(app.rt);
    return 0;
}
