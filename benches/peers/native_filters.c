/*
 * native_filters.c: the five filters of the NetVM paper (§6.3.1) hand-written
 * in C, the "native" peer. Compiled with plain `gcc -O2` (no -march), in a
 * translation unit of their own so that nothing else's flags apply.
 *
 * Each has exactly libpcap's semantics on Ethernet, like the NetIL listings
 * in benches/filters: a frame too short for a field the accepting path reads
 * is rejected (libpcap's bpf_filter returns 0 for an out-of-bounds load);
 * the ports are at 14 + 4 * IHL whatever IHL is; port tests require the
 * fragment offset to be 0.
 *
 * As in the paper, multi-byte fields are compared in network byte order with
 * constants swapped at compile time (instead of swapping every loaded value):
 * the loads are unaligned-safe memcpy's that gcc turns into plain moves.
 * Each filter is noinline and called per packet through a function pointer
 * by filterpeers.c, so its figure includes one indirect call and return.
 */
#include <stdint.h>
#include <string.h>

#include "peers.h"

/* Big-endian constants as they sit in memory on this (little-endian) host. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define BE16(x) ((uint16_t)__builtin_bswap16(x))
#define BE32(x) ((uint32_t)__builtin_bswap32(x))
#else
#define BE16(x) ((uint16_t)(x))
#define BE32(x) ((uint32_t)(x))
#endif

static inline uint16_t raw16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t raw32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

#define IS_IP(p) (raw16((p) + 12) == BE16(0x0800))

/* ip */
__attribute__((noinline)) static int f1_ip(const uint8_t *p, uint32_t len)
{
    return len >= 14 && IS_IP(p);
}

/* ip src 10.1.1.1 */
__attribute__((noinline)) static int f2_ip_src(const uint8_t *p, uint32_t len)
{
    return len >= 30 && IS_IP(p) && raw32(p + 26) == BE32(0x0a010101);
}

/* ip and tcp */
__attribute__((noinline)) static int f3_ip_tcp(const uint8_t *p, uint32_t len)
{
    return len >= 24 && IS_IP(p) && p[23] == 6;
}

/* ip src 10.1.1.1 and ip dst 10.2.2.2 and tcp src port 20 and tcp dst port 30 */
__attribute__((noinline)) static int f4_ip_tcp_4field(const uint8_t *p, uint32_t len)
{
    if (len < 34 || !IS_IP(p) || raw32(p + 26) != BE32(0x0a010101) || raw32(p + 30) != BE32(0x0a020202) || p[23] != 6)
        return 0;
    if (raw16(p + 20) & BE16(0x1fff)) /* not the first fragment */
        return 0;
    uint32_t t = 14 + 4 * (p[14] & 0x0f);
    return len >= t + 4 && raw32(p + t) == BE32(0x0014001e); /* ports 20, 30 */
}

/* ip src 10.4.4.4 or ip src 10.3.3.3 or ip src 10.2.2.2 or ip src 10.1.1.1 */
__attribute__((noinline)) static int f5_ip_src_or4(const uint8_t *p, uint32_t len)
{
    if (len < 30 || !IS_IP(p))
        return 0;
    uint32_t s = raw32(p + 26);
    return s == BE32(0x0a040404) || s == BE32(0x0a030303) || s == BE32(0x0a020202) || s == BE32(0x0a010101);
}

/* The floor of the measurement: an empty filter that accepts everything,
 * called the same way. Its figure is the call, the loop and the count. */
__attribute__((noinline)) static int empty_filter(const uint8_t *p, uint32_t len)
{
    (void)p;
    (void)len;
    return 1;
}

const native_filter_fn native_empty = empty_filter;

const native_filter_fn native_filters[5] = {f1_ip, f2_ip_src, f3_ip_tcp, f4_ip_tcp_4field, f5_ip_src_or4};
