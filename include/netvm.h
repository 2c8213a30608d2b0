/*
 * netvm.h: the C ABI of compiled netvm applications (ABI version 7: NETVM_ABI_VERSION).
 *
 * `netvm compile APP.toml -o app.o --target TRIPLE` (or `--program P.nil`
 * for one program) writes a relocatable object that exports three symbols:
 *
 *   netvm_layout  what the host must allocate (struct netvm_layout)
 *   netvm_init    runs every NetPE's .init handler, once, before any packet
 *   netvm_run     runs a batch of packets through the whole application
 *
 * and imports the helpers below, implemented by libnetvm_rt.a (crate
 * netvm-rt: `cargo build --release -p netvm-rt [--target TRIPLE]`). Link:
 *
 *   cc host.c app.o libnetvm_rt.a -lpthread -ldl -lm
 *
 * The code inside is exactly what `netvm run --link direct|table` runs: it
 * has the semantics of docs/netil.md, keeps every bounds check and the
 * instruction budget, and never reads or writes outside the memories given
 * here. It is reentrant for distinct struct netvm_app instances (each with
 * its own info memory, counters, data memories and fan-out state).
 */
#ifndef NETVM_H
#define NETVM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NETVM_ABI_VERSION 7

/* One packet of a batch. The code reads it and writes packet bytes in place
 * (ustore); it never changes the descriptor. */
struct netvm_xb {
    uint8_t *data;      /* caplen bytes, writable */
    uint32_t caplen;    /* captured length: loads beyond it fault (bounds) */
    uint32_t wirelen;   /* length on the wire */
    uint64_t ts_sec;    /* timestamp, seconds */
    uint32_t ts_nsec;   /* timestamp, nanoseconds */
    uint16_t in_port;   /* application input port */
    uint16_t reserved;  /* 0 */
    uint64_t seq;       /* the packet's sequence number in the run (arrival order, from 0):
                           passed to coprocessor operations; any value for a C host */
};

/* The direct entry of a coprocessor operation: call(this_, pkt, pkt_len,
 * ts_sec, ts_nsec) does what netvm_rt_copro_invoke does for that operation
 * (which reads nothing but the packet and its time), returning 0, or 1 to
 * fault. In .init there is no packet: pkt is NULL and pkt_len 0. */
struct netvm_directop {
    uint32_t (*call)(void *this_, const uint8_t *pkt, uint64_t pkt_len, uint64_t ts_sec, uint32_t ts_nsec);
    void *this_;
};

/* Where a coprocessor instance keeps its registers (its inline register
 * file): bit r of `inputs` set means input register r is input[r], and the
 * code stores copro.in there; bit r of `outputs` set means output register r
 * is output[r], and the code loads copro.out there. Other registers go
 * through netvm_rt_copro_in / netvm_rt_copro_out. Bit o of `ops` set means
 * operation o has a direct entry, direct[o], which copro.invoke calls
 * instead of netvm_rt_copro_invoke (a C host sets `direct` NULL, `ops` 0). */
struct netvm_regfile {
    uint32_t *input;
    const uint32_t *output;
    uint32_t inputs;
    uint32_t outputs;
    const struct netvm_directop *direct;
    uint32_t ops;
    uint32_t walk_ops;    /* operations (0..7) the code performs as *walk itself (a C host: 0) */
    const void *walk;     /* NULL when walk_ops is 0; a netvm_dir24walk (lpm) or a
                             netvm_bucketwalk (table), as the kind says */
};

/* A lookup the code performs itself, without a call: the DIR-24-8 walk of
 * DPDK's rte_lpm (the lpm coprocessor's IPv4 lookup and lookup_pkt). For an
 * operation o whose bit is set in netvm_regfile.walk_ops:
 *   key: where the kind's operation reads it (lpm lookup: input register 0;
 *        lookup_pkt: the big-endian u32 at the packet offset in input
 *        register 8; past the packet's end the code calls the operation,
 *        which faults);
 *   e = root[key >> 8]; if e >= 0xff000000: e = groups[(e & 0xffffff) * 256 + (key & 0xff)];
 *   found: e >> 24 != 0 (next hop e & 0xffffff), else has_default (next hop default_hop);
 *   output[0] = found, output[1] = next hop (0 when not found);
 *   counters[0] += 1 (lookups); counters[1] += found (hits). */
struct netvm_dir24walk {
    const uint32_t *root;     /* 2^24 first-level entries */
    const uint32_t *groups;   /* second-level groups of 256 entries */
    uint64_t *counters;       /* lookups, hits */
    uint32_t default_hop;     /* the /0 route's next hop, or 0 */
    uint32_t has_default;     /* 1 when there is a /0 route */
};

/* An exact-match lookup, or the replace of a stored key's value, the code
 * performs itself: the probe of the table coprocessor's bucketized cuckoo
 * hash (its lookup_pkt, and insert_pkt of a key already stored; keys of 4 to
 * 16 bytes at the packet offset in input register 8, values of at most 4
 * bytes). netvm_vm::BucketWalk documents it step by step:
 *   where tags is NULL, shape is not the one the code was compiled for (if
 *   it was compiled for one: then stride, key_size, ts_off, reach, b_off,
 *   b_shift, a_mask and value_mask are its constants), the key's `reach`
 *   bytes lie past the packet's end or the time is 2^64 ns or later: call
 *   the operation;
 *   a = le64(key) & a_mask, b = (le64(key + b_off) >> b_shift) & a_mask;
 *   h = fold(fold(a ^ seed[0], b ^ seed[1]) ^ 0x452821e638d01377, 0xbe5466cf34e90c6d)
 *     (fold: the 128-bit product's halves xored);
 *   b1 = ((h & 0xffffffff) * nbuckets) >> 32, tag = h >> 48 (1 if 0);
 *   t = ((u32)(tag * 0x9e3779b1) * nbuckets) >> 32, b2 = t >= b1 ? t - b1 : t + nbuckets - b1;
 *   the entry: a slot of b1 or b2 (tags[8 b + i] == tag) whose key has the
 *   same words, live unless idle_ns != ~0 and now - timestamp > idle_ns;
 *   lookup: output[0..4] = found, be32(value) & value_mask (0 if not found),
 *     0, 0, 0; counters[0] += 1; counters[1] += found;
 *   insert of a live stored key: value (be32 of input[4]) and timestamp now
 *     stored, output[0..4] = 1, 0, 0, 0, 0, counters[2] += 1,
 *     *store_now = max(*store_now, now); anything else: call the operation;
 *   every operation performed: *handle_now = max(*handle_now, now). */
struct netvm_bucketwalk {
    const uint16_t *tags;  /* 8 per bucket, 16-byte aligned; NULL: call */
    uint8_t *entries;      /* stride bytes each: key, value, u64 LE timestamp at ts_off */
    uint64_t *counters;    /* lookups, hits, inserts */
    uint64_t *handle_now;
    uint64_t *store_now;
    uint64_t seed[2];
    uint64_t nbuckets;
    uint64_t idle_ns;      /* ~0: entries never age */
    uint64_t a_mask;
    uint32_t stride;
    uint32_t key_size;
    uint32_t ts_off;       /* key_size + value_size */
    uint32_t reach;        /* max(key_size, 8) */
    uint32_t b_off;
    uint32_t b_shift;
    uint32_t value_mask;
    uint32_t shape;        /* key_size | value_size << 8 */
};

/* The memories of one NetPE, in application (manifest) order. */
struct netvm_node {
    uint8_t *data;      /* data memory: exactly netvm_layout.nodes[i].data_size bytes, */
    uint64_t data_len;  /* zeroed before netvm_init; persists across packets */
    void *copros;       /* coprocessor instances: Rust objects of netvm-rt's host; a C */
    uint64_t ncopros;   /* host passes NULL, 0 and every copro.* instruction faults */
    const struct netvm_regfile *regs; /* ncopros register files (NULL when ncopros is 0),
                                         valid for the call */
};

/* What netvm_init and netvm_run receive. */
struct netvm_app {
    uint64_t budget;          /* instructions per handler invocation (netvm_layout.budget) */
    uint8_t *info;            /* info memory, netvm_layout.info_size bytes (zeroed per packet by the code) */
    const struct netvm_node *nodes; /* netvm_layout.nodes entries */
    uint64_t *counters;       /* netvm_layout.counters counters, zeroed once; the code adds to them */
    void *rt;                 /* fan-out state: netvm_rt_fanout_new() (may be NULL if no NetPE port
                                 or source has several destinations) */
    uint32_t fanned;          /* scratch, 0 */
    uint32_t reserved;        /* 0 */
};

/* Per NetPE entry of netvm_layout. */
struct netvm_node_layout {
    uint32_t data_size;    /* .datasize */
    uint32_t out_ports;    /* output ports */
    uint32_t counter_base; /* first counter: out_ports "packets out" counters (one per port),
                              then "dropped", then fault_kinds fault counters, then the
                              budget its .push handler consumed (see NETVM_ABI_VERSION 3) */
    uint32_t copros;       /* coprocessors declared */
};

/* Exported by the object as `const struct netvm_layout netvm_layout`. */
struct netvm_layout {
    uint32_t abi_version;  /* NETVM_ABI_VERSION */
    uint32_t nodes;        /* NetPEs */
    uint32_t counters;     /* counters in netvm_app.counters */
    uint32_t info_size;    /* bytes of info memory */
    uint32_t sources;      /* application input ports 0..sources-1 may have a source */
    uint32_t source_base;  /* counters[source_base + p]: packets that entered on input port p */
    uint32_t no_source;    /* counters[no_source]: packets on an input port without a source (dropped) */
    uint32_t fault_kinds;  /* 5: bounds, div-by-zero, budget, bad-port, copro (NETVM_FAULT_*) */
    uint32_t budget;       /* the application's budget (manifest or --budget), saturated to 2^32-1 */
    struct netvm_node_layout node[];
};

/* Verdicts written by netvm_run, one per packet:
 *   0 .. 0xffff                   the packet left on that application output port
 *   NETVM_VERDICT_DROP            dropped (drop, an unconnected port, or no source)
 *   NETVM_VERDICT_FAULT | kind    a fault ended it (and it is dropped)
 * A packet that was duplicated (fan-out) may leave several times: see
 * netvm_rt_fanout_fanned / netvm_rt_fanout_emitted. */
#define NETVM_VERDICT_DROP   0x10000u
#define NETVM_VERDICT_FAULT  0x30000u
#define NETVM_FAULT_BOUNDS       0
#define NETVM_FAULT_DIV_BY_ZERO  1
#define NETVM_FAULT_BUDGET       2
#define NETVM_FAULT_BAD_PORT     3
#define NETVM_FAULT_COPRO        4

extern const struct netvm_layout netvm_layout;

/* Runs the .init handlers in topological order. Returns 0, or
 * 1 + 8 * netpe + fault_kind for the first one that faulted. */
uint32_t netvm_init(struct netvm_app *app);

/* Runs descs[0..n) in order; verdicts[i] receives packet i's verdict.
 * Returns 0. With fan-out, call netvm_rt_fanout_clear(app->rt) after
 * reading what left, before the next batch. */
uint32_t netvm_run(struct netvm_app *app, struct netvm_xb *descs, uint32_t n, uint32_t *verdicts);

/* ---- libnetvm_rt.a: helpers the object imports (not called by hosts) ---- */
uint32_t netvm_rt_crc32(const uint8_t *p, uint64_t n);
uint32_t netvm_rt_murmur3(const uint8_t *p, uint64_t n);
uint32_t netvm_rt_csum(const uint8_t *p, uint64_t n);
uint32_t netvm_rt_copro_in(void *copros, uint64_t n, uint32_t copro, uint32_t reg, uint32_t value);
uint64_t netvm_rt_copro_out(void *copros, uint64_t n, uint32_t copro, uint32_t reg);
uint32_t netvm_rt_copro_invoke(void *copros, uint64_t n, uint32_t copro, uint32_t op,
                               const uint8_t *pkt, uint64_t pkt_len, const uint8_t *info,
                               uint64_t info_len, uint64_t ts_sec, uint32_t ts_nsec, uint64_t seq);
void netvm_rt_fanout_save(void *rt, uint64_t idx, uint32_t route, uint8_t *data, uint64_t len,
                          const uint8_t *info, uint64_t info_len, uint32_t keep);
uint8_t *netvm_rt_fanout_copy(void *rt, uint64_t idx, const uint8_t *data, uint64_t len);
int32_t netvm_rt_fanout_pop(void *rt, uint64_t idx, uint8_t *info, uint64_t info_len, uint64_t *out);
void netvm_rt_emit(void *rt, uint64_t idx, uint32_t port, const uint8_t *data, uint64_t len);

/* ---- libnetvm_rt.a: the fan-out state, for hosts ---- */
/* A fresh state for netvm_app.rt; free with netvm_rt_fanout_free. */
void *netvm_rt_fanout_new(void);
void netvm_rt_fanout_free(void *rt);
/* Forgets the last batch (frees the copies): call after each netvm_run. */
void netvm_rt_fanout_clear(void *rt);
/* 1 if packet idx of the last batch was duplicated; its verdict is then its
 * last copy's, and what left is listed by netvm_rt_fanout_emitted. */
int32_t netvm_rt_fanout_fanned(const void *rt, uint32_t idx);
/* Buffers that left from duplicated packets in the last batch, in order. */
uint64_t netvm_rt_fanout_emitted_count(const void *rt);
/* The k-th: packet index, output port, bytes (*data == NULL: the packet's
 * own buffer, descs[idx]). Returns 0, or -1 if k is out of range. */
int32_t netvm_rt_fanout_emitted(const void *rt, uint64_t k, uint32_t *idx, uint16_t *port,
                                const uint8_t **data, uint64_t *len);

#ifdef __cplusplus
}
#endif

#endif /* NETVM_H */
