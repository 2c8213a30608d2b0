/*
 * kernel_bpf.c: the Linux kernel's BPF JIT as a peer.
 *
 * The program is libpcap's classic BPF for the expression (the same program
 * the libpcap and DPDK peers run), translated here into eBPF for an XDP
 * program with direct packet access, then loaded with the bpf() syscall
 * (the kernel verifies and JIT-compiles it) and run with BPF_PROG_TEST_RUN.
 *
 * Why our own translation: DPDK's rte_bpf_convert output starts by clearing
 * two registers it never set (A and X through xor), which the kernel
 * verifier rejects, and it relies on LD_ABS/LD_IND, which the kernel only
 * allows in socket-filter/tc programs and rewrites into a helper call per
 * load. XDP with direct packet access is how packet filters are written for
 * the kernel today; the translation below is what a cBPF-to-XDP compiler
 * such as Cloudflare's cbpfc does:
 *
 *   r6 = xdp->data, r7 = xdp->data_end, w8 = A, w9 = X, M[] on the stack;
 *   ld{,h,b} [k]     -> r2 = r6 + k + size; if r2 > r7 goto reject;
 *                       w8 = *(u{size} *)(r6 + k); w8 = be{16,32} w8
 *   ld{,h,b} [x + k] -> r3 = r9 + k; if r3 > 0xffff - size goto reject;
 *                       r2 = r6 + r3; r4 = r2 + size; if r4 > r7 goto reject; w8 = *(r2); swap
 *   ldxb 4*([k]&0xf) -> bounds check; w9 = *(u8 *)(r6 + k); w9 &= 15; w9 <<= 2
 *   jeq/jgt/jge/jset -> jmp32 on w8 (with K or w9), then ja for the false branch
 *   alu              -> alu32 on w8 (division by X checks X != 0 first, as cBPF)
 *   ret #k           -> r0 = k ? XDP_PASS : XDP_DROP; exit     (accept = XDP_PASS)
 *   out of bounds    -> XDP_DROP, as bpf_filter returns 0
 *
 * One difference from bpf_filter, which cannot matter for libpcap's
 * programs: x + k is computed in 64 bits (bpf_filter wraps at 2^32).
 *
 * What a BPF_PROG_TEST_RUN figure includes: the kernel's test loop runs the
 * JIT-ed program `repeat` times on one xdp_buff and reports the average
 * duration in whole nanoseconds; it includes, per run, the loop and timer
 * bookkeeping of bpf_test_run() and the indirect call into the program
 * (with the retpoline/Spectre mitigations of this kernel). It does not
 * include the syscall, the copy of the packet or building the xdp_buff,
 * which happen once per call. The benchmark subtracts the figure of an
 * empty XDP program (r0 = XDP_PASS; exit) measured the same way.
 */
#include <errno.h>
#include <linux/bpf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "peers.h"

/* Classic BPF opcodes (from <pcap/bpf.h>, which cannot be included with <linux/bpf.h>). */
#define C_CLASS(c) ((c) & 0x07)
#define C_LD 0x00
#define C_LDX 0x01
#define C_ST 0x02
#define C_STX 0x03
#define C_ALU 0x04
#define C_JMP 0x05
#define C_RET 0x06
#define C_MISC 0x07
#define C_SIZE(c) ((c) & 0x18)
#define C_W 0x00
#define C_H 0x08
#define C_B 0x10
#define C_MODE(c) ((c) & 0xe0)
#define C_IMM 0x00
#define C_ABS 0x20
#define C_IND 0x40
#define C_MEM 0x60
#define C_LEN 0x80
#define C_MSH 0xa0
#define C_OP(c) ((c) & 0xf0)
#define C_SRC(c) ((c) & 0x08)
#define C_K 0x00
#define C_X 0x08
#define C_RVAL(c) ((c) & 0x18)
#define C_A 0x10
#define C_MISCOP(c) ((c) & 0xf8)
#define C_TAX 0x00
#define C_TXA 0x80

/* eBPF registers of the translation. */
enum { R0, R1, R2, R3, R4, R5, RDATA = 6, REND = 7, RA = 8, RX = 9, RFP = 10 };

/* Largest offset the verifier accepts into a packet. */
#define MAX_PKT_OFF 0xffff

struct out {
    struct bpf_insn *v;
    size_t n, cap;
    /* Pending jumps: instruction index -> target (a cBPF index, or -1 for reject). */
    size_t *jmp_at;
    long *jmp_to;
    size_t nj, capj;
};

static void emit(struct out *o, uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm)
{
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 256;
        o->v = realloc(o->v, o->cap * sizeof *o->v);
    }
    struct bpf_insn i = {.code = code, .dst_reg = dst, .src_reg = src, .off = off, .imm = imm};
    o->v[o->n++] = i;
}

/* Emits a jump whose offset is fixed later: to cBPF instruction `to`, or to the reject exit (-1). */
static void emit_jump(struct out *o, uint8_t code, uint8_t dst, uint8_t src, int32_t imm, long to)
{
    if (o->nj == o->capj) {
        o->capj = o->capj ? o->capj * 2 : 64;
        o->jmp_at = realloc(o->jmp_at, o->capj * sizeof *o->jmp_at);
        o->jmp_to = realloc(o->jmp_to, o->capj * sizeof *o->jmp_to);
    }
    o->jmp_at[o->nj] = o->n;
    o->jmp_to[o->nj++] = to;
    emit(o, code, dst, src, 0, imm);
}

static int size_bytes(uint16_t code) { return C_SIZE(code) == C_W ? 4 : C_SIZE(code) == C_H ? 2 : 1; }
static uint8_t ebpf_size(int n) { return n == 4 ? BPF_W : n == 2 ? BPF_H : BPF_B; }

/* After a load into `reg` of `n` bytes: network to host order. */
static void swap_loaded(struct out *o, uint8_t reg, int n)
{
    if (n > 1)
        emit(o, BPF_ALU | BPF_END | BPF_TO_BE, reg, 0, 0, n * 8);
}

/* reg = packet[k .. k + n) big-endian, or reject if out of bounds. */
static void load_abs(struct out *o, uint8_t reg, uint32_t k, int n)
{
    if ((uint64_t)k + n > MAX_PKT_OFF) {
        emit_jump(o, BPF_JMP | BPF_JA, 0, 0, 0, -1);
        return;
    }
    emit(o, BPF_ALU64 | BPF_MOV | BPF_X, R2, RDATA, 0, 0);
    emit(o, BPF_ALU64 | BPF_ADD | BPF_K, R2, 0, 0, (int32_t)(k + n));
    emit_jump(o, BPF_JMP | BPF_JGT | BPF_X, R2, REND, 0, -1);
    if (k + n <= 0x7fff) {
        emit(o, BPF_LDX | BPF_MEM | ebpf_size(n), reg, RDATA, (int16_t)k, 0);
    } else {
        emit(o, BPF_ALU64 | BPF_MOV | BPF_X, R3, RDATA, 0, 0);
        emit(o, BPF_ALU64 | BPF_ADD | BPF_K, R3, 0, 0, (int32_t)k);
        emit(o, BPF_LDX | BPF_MEM | ebpf_size(n), reg, R3, 0, 0);
    }
    swap_loaded(o, reg, n);
}

/* A = packet[X + k .. X + k + n), or reject. */
static void load_ind(struct out *o, uint32_t k, int n)
{
    if ((uint64_t)k + n > MAX_PKT_OFF) {
        emit_jump(o, BPF_JMP | BPF_JA, 0, 0, 0, -1);
        return;
    }
    emit(o, BPF_ALU64 | BPF_MOV | BPF_X, R3, RX, 0, 0); /* X is kept zero-extended (alu32) */
    emit(o, BPF_ALU64 | BPF_ADD | BPF_K, R3, 0, 0, (int32_t)k);
    emit_jump(o, BPF_JMP | BPF_JGT | BPF_K, R3, 0, MAX_PKT_OFF - n, -1);
    emit(o, BPF_ALU64 | BPF_MOV | BPF_X, R2, RDATA, 0, 0);
    emit(o, BPF_ALU64 | BPF_ADD | BPF_X, R2, R3, 0, 0);
    emit(o, BPF_ALU64 | BPF_MOV | BPF_X, R4, R2, 0, 0);
    emit(o, BPF_ALU64 | BPF_ADD | BPF_K, R4, 0, 0, n);
    emit_jump(o, BPF_JMP | BPF_JGT | BPF_X, R4, REND, 0, -1);
    emit(o, BPF_LDX | BPF_MEM | ebpf_size(n), RA, R2, 0, 0);
    swap_loaded(o, RA, n);
}

static int16_t mem_off(uint32_t k) { return (int16_t)(-4 * (16 - (int)k)); }

static uint8_t jmp_op(uint16_t code)
{
    switch (C_OP(code)) {
    case 0x10: return BPF_JEQ;
    case 0x20: return BPF_JGT;
    case 0x30: return BPF_JGE;
    case 0x40: return BPF_JSET;
    default: return 0xff;
    }
}

static uint8_t negated(uint8_t op)
{
    switch (op) {
    case BPF_JEQ: return BPF_JNE;
    case BPF_JGT: return BPF_JLE;
    case BPF_JGE: return BPF_JLT;
    default: return 0xff; /* JSET has no negation */
    }
}

static void emit_ret(struct out *o, int accept_reg_or_const, uint32_t k)
{
    if (accept_reg_or_const) { /* ret A */
        emit(o, BPF_ALU | BPF_MOV | BPF_K, R0, 0, 0, KBPF_REJECT);
        emit(o, BPF_JMP32 | BPF_JEQ | BPF_K, RA, 0, 1, 0);
        emit(o, BPF_ALU | BPF_MOV | BPF_K, R0, 0, 0, KBPF_ACCEPT);
    } else {
        emit(o, BPF_ALU | BPF_MOV | BPF_K, R0, 0, 0, k ? KBPF_ACCEPT : KBPF_REJECT);
    }
    emit(o, BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
}

/* Translates `prog`; returns 0 or -1 with a message for an unsupported instruction. */
static int translate(const struct cbpf_insn *prog, size_t len, struct out *o, char *err, size_t errlen)
{
    size_t *start = calloc(len + 1, sizeof *start);
    int uses_mem = 0;
    for (size_t i = 0; i < len; i++) {
        uint16_t c = prog[i].code;
        if ((C_CLASS(c) == C_LD || C_CLASS(c) == C_LDX) && C_MODE(c) == C_MEM)
            uses_mem = 1;
        if (C_CLASS(c) == C_ST || C_CLASS(c) == C_STX)
            uses_mem = 1;
    }
    /* Prologue. */
    emit(o, BPF_LDX | BPF_MEM | BPF_W, RDATA, R1, offsetof(struct xdp_md, data), 0);
    emit(o, BPF_LDX | BPF_MEM | BPF_W, REND, R1, offsetof(struct xdp_md, data_end), 0);
    emit(o, BPF_ALU | BPF_MOV | BPF_K, RA, 0, 0, 0);
    emit(o, BPF_ALU | BPF_MOV | BPF_K, RX, 0, 0, 0);
    if (uses_mem)
        for (int m = 0; m < 16; m++)
            emit(o, BPF_ST | BPF_MEM | BPF_W, RFP, 0, mem_off(m), 0);
    for (size_t i = 0; i < len; i++) {
        const struct cbpf_insn *in = &prog[i];
        uint16_t c = in->code;
        uint32_t k = in->k;
        start[i] = o->n;
        switch (C_CLASS(c)) {
        case C_LD:
            switch (C_MODE(c)) {
            case C_ABS: load_abs(o, RA, k, size_bytes(c)); break;
            case C_IND: load_ind(o, k, size_bytes(c)); break;
            case C_IMM: emit(o, BPF_ALU | BPF_MOV | BPF_K, RA, 0, 0, (int32_t)k); break;
            case C_MEM: emit(o, BPF_LDX | BPF_MEM | BPF_W, RA, RFP, mem_off(k & 15), 0); break;
            case C_LEN: /* A = data_end - data (root may subtract packet pointers) */
                emit(o, BPF_ALU64 | BPF_MOV | BPF_X, RA, REND, 0, 0);
                emit(o, BPF_ALU64 | BPF_SUB | BPF_X, RA, RDATA, 0, 0);
                break;
            default: goto unsupported;
            }
            break;
        case C_LDX:
            switch (C_MODE(c)) {
            case C_IMM: emit(o, BPF_ALU | BPF_MOV | BPF_K, RX, 0, 0, (int32_t)k); break;
            case C_MEM: emit(o, BPF_LDX | BPF_MEM | BPF_W, RX, RFP, mem_off(k & 15), 0); break;
            case C_LEN:
                emit(o, BPF_ALU64 | BPF_MOV | BPF_X, RX, REND, 0, 0);
                emit(o, BPF_ALU64 | BPF_SUB | BPF_X, RX, RDATA, 0, 0);
                break;
            case C_MSH:
                load_abs(o, RX, k, 1);
                emit(o, BPF_ALU | BPF_AND | BPF_K, RX, 0, 0, 0xf);
                emit(o, BPF_ALU | BPF_LSH | BPF_K, RX, 0, 0, 2);
                break;
            default: goto unsupported;
            }
            break;
        case C_ST: emit(o, BPF_STX | BPF_MEM | BPF_W, RFP, RA, mem_off(k & 15), 0); break;
        case C_STX: emit(o, BPF_STX | BPF_MEM | BPF_W, RFP, RX, mem_off(k & 15), 0); break;
        case C_ALU: {
            uint8_t op = C_OP(c); /* cBPF and eBPF share the ALU op encodings */
            if (op == BPF_NEG) {
                emit(o, BPF_ALU | BPF_NEG, RA, 0, 0, 0);
            } else if (C_SRC(c) == C_X) {
                if (op == BPF_DIV || op == BPF_MOD) /* cBPF returns 0 on division by zero */
                    emit_jump(o, BPF_JMP32 | BPF_JEQ | BPF_K, RX, 0, 0, -1);
                emit(o, BPF_ALU | op | BPF_X, RA, RX, 0, 0);
            } else {
                emit(o, BPF_ALU | op | BPF_K, RA, 0, 0, (int32_t)k);
            }
            break;
        }
        case C_JMP: {
            if (C_OP(c) == 0x00) { /* ja */
                emit_jump(o, BPF_JMP | BPF_JA, 0, 0, 0, (long)(i + 1 + k));
                break;
            }
            uint8_t op = jmp_op(c);
            if (op == 0xff)
                goto unsupported;
            uint8_t s = C_SRC(c) == C_X ? BPF_X : BPF_K;
            uint8_t src = s == BPF_X ? RX : 0; /* with K, src_reg must be 0; with X, imm must be 0 */
            int32_t imm = s == BPF_X ? 0 : (int32_t)k;
            long t = (long)(i + 1 + in->jt), f = (long)(i + 1 + in->jf);
            if (in->jt == 0 && in->jf == 0)
                break;
            if (in->jf == 0) {
                emit_jump(o, BPF_JMP32 | op | s, RA, src, imm, t);
            } else if (in->jt == 0 && negated(op) != 0xff) {
                emit_jump(o, BPF_JMP32 | negated(op) | s, RA, src, imm, f);
            } else {
                emit_jump(o, BPF_JMP32 | op | s, RA, src, imm, t);
                emit_jump(o, BPF_JMP | BPF_JA, 0, 0, 0, f);
            }
            break;
        }
        case C_RET:
            if (C_RVAL(c) == C_A)
                emit_ret(o, 1, 0);
            else if (C_RVAL(c) == C_K)
                emit_ret(o, 0, k);
            else
                goto unsupported;
            break;
        case C_MISC:
            if (C_MISCOP(c) == C_TAX)
                emit(o, BPF_ALU | BPF_MOV | BPF_X, RX, RA, 0, 0);
            else if (C_MISCOP(c) == C_TXA)
                emit(o, BPF_ALU | BPF_MOV | BPF_X, RA, RX, 0, 0);
            else
                goto unsupported;
            break;
        default:
            goto unsupported;
        }
        continue;
    unsupported:
        snprintf(err, errlen, "classic BPF instruction %zu (code %#x) is not translated", i, c);
        free(start);
        return -1;
    }
    /* The reject exit, for out-of-bounds loads and division by zero. */
    size_t reject = o->n;
    emit_ret(o, 0, 0);
    for (size_t j = 0; j < o->nj; j++) {
        long to = o->jmp_to[j];
        if (to >= (long)len) {
            snprintf(err, errlen, "jump beyond the program's end");
            free(start);
            return -1;
        }
        size_t target = to < 0 ? reject : start[to];
        long off = (long)target - (long)(o->jmp_at[j] + 1);
        if (off < 0 || off > 0x7fff) {
            snprintf(err, errlen, "jump offset %ld out of range", off);
            free(start);
            return -1;
        }
        o->v[o->jmp_at[j]].off = (int16_t)off;
    }
    free(start);
    return 0;
}

static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

static int load_insns(const struct bpf_insn *v, size_t n, const char *name, char *err, size_t errlen)
{
    static char log[1 << 20];
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.prog_type = BPF_PROG_TYPE_XDP;
    a.insns = (uintptr_t)v;
    a.insn_cnt = (uint32_t)n;
    a.license = (uintptr_t) "GPL";
    strncpy(a.prog_name, name, sizeof a.prog_name - 1);
    int fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
    if (fd >= 0)
        return fd;
    int e = errno;
    /* Load again with the verifier's log (log_level 0 needs log_size 0). */
    memset(&a, 0, sizeof a);
    a.prog_type = BPF_PROG_TYPE_XDP;
    a.insns = (uintptr_t)v;
    a.insn_cnt = (uint32_t)n;
    a.license = (uintptr_t) "GPL";
    a.log_level = 1;
    a.log_buf = (uintptr_t)log;
    a.log_size = sizeof log;
    log[0] = 0;
    sys_bpf(BPF_PROG_LOAD, &a);
    size_t l = strlen(log);
    snprintf(err, errlen, "BPF_PROG_LOAD: %s; verifier: %s", strerror(e), l > 600 ? log + l - 600 : log);
    return -e;
}

int kbpf_load(const struct cbpf_insn *prog, size_t len, char *err, size_t errlen)
{
    struct out o = {0};
    int r = translate(prog, len, &o, err, errlen);
    if (r == 0)
        r = load_insns(o.v, o.n, "netvm_peer", err, errlen);
    if (getenv("KBPF_DUMP")) {
        for (size_t i = 0; i < o.n; i++)
            fprintf(stderr, "%3zu: code %02x dst r%d src r%d off %d imm %d\n", i, o.v[i].code, o.v[i].dst_reg, o.v[i].src_reg,
                    o.v[i].off, o.v[i].imm);
    }
    free(o.v);
    free(o.jmp_at);
    free(o.jmp_to);
    return r;
}

int kbpf_load_empty(char *err, size_t errlen)
{
    struct bpf_insn v[2] = {
        {.code = BPF_ALU | BPF_MOV | BPF_K, .dst_reg = R0, .imm = KBPF_ACCEPT},
        {.code = BPF_JMP | BPF_EXIT},
    };
    return load_insns(v, 2, "netvm_empty", err, errlen);
}

int kbpf_test_run(int fd, const uint8_t *data, uint32_t len, uint32_t repeat, uint32_t *duration_ns, uint32_t *retval)
{
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.test.prog_fd = (uint32_t)fd;
    a.test.data_in = (uintptr_t)data;
    a.test.data_size_in = len;
    a.test.repeat = repeat;
    if (sys_bpf(BPF_PROG_TEST_RUN, &a) < 0)
        return -errno;
    *duration_ns = a.test.duration;
    *retval = a.test.retval;
    return 0;
}
