/*
 * peers.h: what the translation units of the filter-benchmark peers share.
 *
 * The peers are split into translation units because their headers clash
 * (libpcap's <pcap/bpf.h> and the kernel's <linux/bpf.h> both define
 * `struct bpf_insn`) and because DPDK's compiler flags (-march=corei7 from
 * pkg-config) must not leak into the native C filters, which are compiled
 * with plain `gcc -O2`.
 */
#ifndef NETVM_PEERS_H
#define NETVM_PEERS_H

#include <stddef.h>
#include <stdint.h>

/* Bytes stored per packet (the traces' snap length): one slot per packet. */
#define SLOT 128

/* A native filter: returns nonzero to accept the frame `p` of `caplen` captured bytes. */
typedef int (*native_filter_fn)(const uint8_t *p, uint32_t caplen);

/* native_filters.c: the five filters hand-written in C, in the paper's order. */
extern const native_filter_fn native_filters[5];
/* An empty filter (accepts everything), called the same way: the floor of the measurement. */
extern const native_filter_fn native_empty;

/* A classic BPF instruction, independent of libpcap's and the kernel's headers. */
struct cbpf_insn {
    uint16_t code;
    uint8_t jt, jf;
    uint32_t k;
};

/* kernel_bpf.c: classic BPF -> eBPF (XDP, direct packet access), loaded and
 * run through the bpf() syscall. Each returns a negative errno-style value on
 * failure and writes a message to `err`. */
int kbpf_load(const struct cbpf_insn *prog, size_t len, char *err, size_t errlen);
int kbpf_load_empty(char *err, size_t errlen);
/* BPF_PROG_TEST_RUN: runs `fd` `repeat` times on the frame; sets the kernel's
 * average duration (integer ns per run) and the program's return value. */
int kbpf_test_run(int fd, const uint8_t *data, uint32_t len, uint32_t repeat, uint32_t *duration_ns, uint32_t *retval);
/* The XDP return values the translation uses for accept and reject. */
#define KBPF_ACCEPT 2 /* XDP_PASS */
#define KBPF_REJECT 1 /* XDP_DROP */

/* dpdk_peer.c (only when built with DPDK, HAVE_DPDK). */
struct bpf_program;
int dpdk_init(int cpu, char *err, size_t errlen);
/* Converts and JIT-compiles a libpcap program; returns the JIT's entry or NULL. */
typedef uint64_t (*dpdk_jit_fn)(void *mbuf);
dpdk_jit_fn dpdk_prepare(const struct bpf_program *prog, char *err, size_t errlen);
/* Lays out `n` packets as DPDK would hold them: an rte_mbuf followed by its
 * data (SLOT bytes), each mbuf describing one single-segment packet. Returns
 * the array base; `stride` receives the distance between mbufs. */
void *dpdk_mbufs(const uint8_t *slots, const uint32_t *caplen, size_t n, size_t *stride);

#endif
