/*
 * dpdk_peer.c: DPDK's BPF JIT as a peer (built only when pkg-config finds
 * libdpdk; compiled with DPDK's own flags).
 *
 * The program is libpcap's classic BPF (pcap_compile, optimized), converted
 * to eBPF by rte_bpf_convert, loaded (and validated) by rte_bpf_load and
 * compiled by DPDK's x86-64 JIT (rte_bpf_get_jit). The JIT-ed function takes
 * an rte_mbuf: the converted program reads the packet with LD_ABS/LD_IND,
 * which the JIT turns into an inline check against the mbuf's first segment
 * (data_len) and a load, with a call to __rte_pktmbuf_read only when the
 * data is not in the first segment or out of bounds (then it returns 0).
 *
 * rte_bpf_convert allocates with rte_malloc, so the EAL must be initialised
 * first; without hugepages this works: --no-huge --no-pci --no-shconf, on the
 * one CPU the harness is pinned to. rte_bpf_load/get_jit need nothing else.
 *
 * The mbufs are laid out as a mempool would hold them: each rte_mbuf
 * (128 bytes) followed by its data (SLOT bytes), single segment, data_off 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pcap/pcap.h>

#include <rte_bpf.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_log.h>
#include <rte_mbuf.h>

#include "peers.h"

int dpdk_init(int cpu, char *err, size_t errlen)
{
    char lcores[16];
    snprintf(lcores, sizeof lcores, "%d", cpu);
    char *argv[] = {"filterpeers", "--no-huge", "--no-pci", "--no-shconf", "--no-telemetry",
                    "-m", "64", "-l", lcores, "--log-level", "lib.eal:error", NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    if (rte_eal_init(argc, argv) < 0) {
        snprintf(err, errlen, "rte_eal_init: %s", rte_strerror(rte_errno));
        return -1;
    }
    return 0;
}

dpdk_jit_fn dpdk_prepare(const struct bpf_program *prog, char *err, size_t errlen)
{
    struct rte_bpf_prm *prm = rte_bpf_convert(prog);
    if (prm == NULL) {
        snprintf(err, errlen, "rte_bpf_convert: %s", rte_strerror(rte_errno));
        return NULL;
    }
    struct rte_bpf *bpf = rte_bpf_load(prm);
    if (bpf == NULL) {
        snprintf(err, errlen, "rte_bpf_load: %s", rte_strerror(rte_errno));
        return NULL;
    }
    struct rte_bpf_jit jit;
    if (rte_bpf_get_jit(bpf, &jit) != 0 || jit.func == NULL) {
        snprintf(err, errlen, "rte_bpf_get_jit: no JIT code (unsupported architecture?)");
        return NULL;
    }
    /* prm and bpf stay allocated for the life of the process. */
    return jit.func;
}

void *dpdk_mbufs(const uint8_t *slots, const uint32_t *caplen, size_t n, size_t *stride)
{
    size_t st = sizeof(struct rte_mbuf) + SLOT;
    uint8_t *base = aligned_alloc(RTE_CACHE_LINE_SIZE, st * (n ? n : 1));
    if (base == NULL)
        return NULL;
    memset(base, 0, st * n);
    for (size_t i = 0; i < n; i++) {
        struct rte_mbuf *m = (struct rte_mbuf *)(base + i * st);
        uint8_t *data = (uint8_t *)(m + 1);
        memcpy(data, slots + i * SLOT, caplen[i]);
        m->buf_addr = data;
        m->buf_len = SLOT;
        m->data_off = 0;
        m->data_len = (uint16_t)caplen[i];
        m->pkt_len = caplen[i];
        m->nb_segs = 1;
        m->next = NULL;
        rte_mbuf_refcnt_set(m, 1);
    }
    *stride = st;
    return base;
}
