/*
 * The libpcap oracle of the netvm-pfl differential test (crates/pfl/tests/libpcap.rs).
 *
 *   oracle EXPRS_FILE PCAP...
 *
 * Reads every capture file once into memory (pcap_open_offline /
 * pcap_next_ex), then compiles each expression of EXPRS_FILE (one per line;
 * blank lines and lines whose first non-blank character is '#' are skipped)
 * exactly as `tcpdump -r` does: on a dead DLT_EN10MB handle with snaplen
 * 262144, optimizer on, netmask 0. Each filter is run with
 * pcap_offline_filter() over every packet of every file.
 *
 * Output (stdout), line-oriented; fields are separated by one space, and the
 * last field of FILE, EXPR and ERROR lines is the rest of the line:
 *
 *   ORACLE <pcap_lib_version()>
 *   FILE <f> <npackets> <hash> <linktype> ok <path>
 *   FILE <f> <npackets> <hash> <linktype> error <path>
 *   ...                                  (one per file, f = 0, 1, ... in argument order)
 *   EXPR <e> <expression>                (e = 0, 1, ... over the kept lines)
 *   ERROR <message>                      (pcap_compile failed: the only line for e)
 *   MATCH <f> <count> <i> <i> ...        (one per file when it compiled: the
 *                                         0-based indices of the matching packets)
 *   ...
 *   END <nexprs>
 *
 * <hash> is the FNV-1a 64 hash (16 hex digits) over, for every packet read,
 * caplen and len (each 4 bytes, little-endian) and then the caplen captured
 * bytes: the test computes the same over what netvm-io read, to be sure that
 * both sides see the same packets. A file that cannot be opened has 0
 * packets and linktype -1; "error" means reading stopped at an error (the
 * packets read before it are kept, as netvm-io's read_capture keeps them);
 * the error message goes to stderr.
 *
 * Exit status: 0 on success, 2 on a usage or I/O error, 3 when compiling
 * or running one expression takes more than EXPR_TIMEOUT seconds (libpcap's
 * filter machine allows backward jumps: `protochain` loops forever on some
 * IPv6 packets with 1.10.3), with a message naming it on stderr.
 */
#include <pcap/pcap.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPR_TIMEOUT 60

static char timeout_msg[1024];

static void on_alarm(int sig)
{
    (void)sig;
    ssize_t r = write(2, timeout_msg, strlen(timeout_msg));
    (void)r;
    _exit(3);
}

struct pkt {
    struct pcap_pkthdr hdr;
    u_char *data;
};

struct capture {
    struct pkt *pkts;
    size_t n, cap;
};

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL) {
        fprintf(stderr, "oracle: out of memory\n");
        exit(2);
    }
    return q;
}

static uint64_t fnv(uint64_t h, const u_char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t fnv32(uint64_t h, uint32_t v)
{
    u_char b[4] = {(u_char)v, (u_char)(v >> 8), (u_char)(v >> 16), (u_char)(v >> 24)};
    return fnv(h, b, 4);
}

static void read_file(const char *path, size_t index, struct capture *c)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    uint64_t h = 0xcbf29ce484222325ULL;
    int linktype = -1, ok = 1;
    memset(c, 0, sizeof *c);
    errbuf[0] = 0;
    pcap_t *p = pcap_open_offline(path, errbuf);
    if (p == NULL) {
        fprintf(stderr, "oracle: %s: %s\n", path, errbuf);
        ok = 0;
    } else {
        linktype = pcap_datalink(p);
        for (;;) {
            struct pcap_pkthdr *hdr;
            const u_char *data;
            int r = pcap_next_ex(p, &hdr, &data);
            if (r == 1) {
                if (c->n == c->cap) {
                    c->cap = c->cap ? 2 * c->cap : 64;
                    c->pkts = xrealloc(c->pkts, c->cap * sizeof *c->pkts);
                }
                struct pkt *k = &c->pkts[c->n++];
                k->hdr = *hdr;
                k->data = xrealloc(NULL, hdr->caplen);
                memcpy(k->data, data, hdr->caplen);
                h = fnv32(h, hdr->caplen);
                h = fnv32(h, hdr->len);
                h = fnv(h, data, hdr->caplen);
            } else if (r == PCAP_ERROR_BREAK) {
                break; /* end of file */
            } else {
                fprintf(stderr, "oracle: %s: %s\n", path, pcap_geterr(p));
                ok = 0;
                break;
            }
        }
        pcap_close(p);
    }
    printf("FILE %zu %zu %016llx %d %s %s\n", index, c->n, (unsigned long long)h, linktype, ok ? "ok" : "error", path);
}

/* Strips the trailing newline and surrounding blanks; returns NULL for a line to skip. */
static char *expression(char *line)
{
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
        line[--n] = 0;
    while (*line == ' ' || *line == '\t')
        line++;
    if (*line == 0 || *line == '#')
        return NULL;
    return line;
}

/* Error messages on one line, whatever libpcap put in them. */
static void print_oneline(const char *s)
{
    for (; *s; s++)
        putchar(*s == '\n' || *s == '\r' ? ' ' : *s);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s EXPRS_FILE [PCAP...]\n", argv[0]);
        return 2;
    }
    FILE *ef = fopen(argv[1], "r");
    if (ef == NULL) {
        perror(argv[1]);
        return 2;
    }
    size_t nfiles = (size_t)(argc - 2);
    struct capture *caps = xrealloc(NULL, nfiles * sizeof *caps);
    printf("ORACLE %s\n", pcap_lib_version());
    for (size_t f = 0; f < nfiles; f++)
        read_file(argv[f + 2], f, &caps[f]);

    signal(SIGALRM, on_alarm);
    pcap_t *dead = pcap_open_dead(DLT_EN10MB, 262144);
    if (dead == NULL) {
        fprintf(stderr, "oracle: pcap_open_dead failed\n");
        return 2;
    }
    char *line = NULL;
    size_t linecap = 0;
    size_t e = 0;
    size_t *idx = NULL;
    while (getline(&line, &linecap, ef) != -1) {
        char *expr = expression(line);
        if (expr == NULL)
            continue;
        printf("EXPR %zu %s\n", e, expr);
        snprintf(timeout_msg, sizeof timeout_msg, "oracle: expression %zu `%s` took more than %d s\n", e, expr, EXPR_TIMEOUT);
        alarm(EXPR_TIMEOUT);
        struct bpf_program prog;
        if (pcap_compile(dead, &prog, expr, 1, 0) != 0) {
            printf("ERROR ");
            print_oneline(pcap_geterr(dead));
            putchar('\n');
        } else {
            for (size_t f = 0; f < nfiles; f++) {
                size_t m = 0;
                idx = xrealloc(idx, (caps[f].n ? caps[f].n : 1) * sizeof *idx);
                for (size_t i = 0; i < caps[f].n; i++)
                    if (pcap_offline_filter(&prog, &caps[f].pkts[i].hdr, caps[f].pkts[i].data) != 0)
                        idx[m++] = i;
                printf("MATCH %zu %zu", f, m);
                for (size_t i = 0; i < m; i++)
                    printf(" %zu", idx[i]);
                putchar('\n');
            }
            pcap_freecode(&prog);
        }
        alarm(0);
        e++;
    }
    printf("END %zu\n", e);
    if (ferror(ef) || fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "oracle: I/O error\n");
        return 2;
    }
    fclose(ef);
    free(line);
    free(idx);
    pcap_close(dead);
    for (size_t f = 0; f < nfiles; f++) {
        for (size_t i = 0; i < caps[f].n; i++)
            free(caps[f].pkts[i].data);
        free(caps[f].pkts);
    }
    free(caps);
    return 0;
}
