#!/usr/bin/env python3
"""Generate a small, deterministic Ethernet pcap for netvm's examples and tests.

The mix: IPv4 TCP/UDP/ICMP (some with IP options, some fragments), 802.1Q
tagged IPv4, IPv6 TCP/UDP, ARP, and hostile frames (bad IHL, truncated
headers, runts, captures shorter than the wire length). Same seed, same
bytes: the committed examples/traces/mixed.pcap is this script's output.

usage: gen_trace.py [-n PACKETS] [--seed N] [--nanosecond] OUT.pcap
"""
import argparse
import random
import struct


def csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def mac(r):
    return bytes([0x02] + [r.randrange(256) for _ in range(5)])


def ipv4(r, proto, payload, options=b"", frag=0, ttl=64, src=None, dst=None):
    ihl = 5 + len(options) // 4
    src = src or bytes([10, r.randrange(4), r.randrange(256), r.randrange(1, 255)])
    dst = dst or bytes([10, r.randrange(4), r.randrange(256), r.randrange(1, 255)])
    hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 20 + len(options) + len(payload),
                      r.randrange(65536), frag, ttl, proto, 0, src, dst) + options
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return hdr + payload


def tcp(r, sport, dport, data=b""):
    return struct.pack("!HHIIBBHHH", sport, dport, r.randrange(1 << 32), 0, 5 << 4, 0x18, 65535, 0, 0) + data


def udp(sport, dport, data=b""):
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def ipv6(r, nh, payload):
    src = bytes([0x20, 0x01, 0x0d, 0xb8] + [r.randrange(256) for _ in range(12)])
    dst = bytes([0x20, 0x01, 0x0d, 0xb8] + [r.randrange(256) for _ in range(12)])
    return struct.pack("!IHBB", 6 << 28, len(payload), nh, 64) + src + dst + payload


def eth(r, ethertype, payload, vlan=None):
    hdr = mac(r) + mac(r)
    if vlan is not None:
        hdr += struct.pack("!HH", 0x8100, vlan)
    return hdr + struct.pack("!H", ethertype) + payload


def frame(r):
    """One frame and its wire length (None: same as captured)."""
    kind = r.choices(
        ["tcp", "udp", "icmp", "tcp_opts", "frag", "vlan", "ip6_tcp", "ip6_udp", "arp", "bad_ihl", "trunc_ip",
         "runt", "snap"],
        weights=[30, 20, 6, 3, 3, 6, 8, 5, 6, 3, 3, 3, 4])[0]
    data = bytes(r.randrange(256) for _ in range(r.choice([0, 0, 6, 18, 100])))
    port = r.choice([20, 22, 53, 80, 443, 8080, r.randrange(1024, 65536)])
    if kind == "tcp":
        return eth(r, 0x0800, ipv4(r, 6, tcp(r, r.randrange(1024, 65536), port, data))), None
    if kind == "udp":
        return eth(r, 0x0800, ipv4(r, 17, udp(r.randrange(1024, 65536), port, data))), None
    if kind == "icmp":
        return eth(r, 0x0800, ipv4(r, 1, struct.pack("!BBHHH", 8, 0, 0, 1, 1) + data)), None
    if kind == "tcp_opts":
        return eth(r, 0x0800, ipv4(r, 6, tcp(r, 1234, port, data), options=b"\x01\x01\x01\x00")), None
    if kind == "frag":
        return eth(r, 0x0800, ipv4(r, 17, data or b"x" * 8, frag=0x2000 | r.randrange(1, 100))), None
    if kind == "vlan":
        return eth(r, 0x8100, b"", vlan=None)[:-2] + struct.pack("!HH", 0x8100, r.randrange(1, 4095)) + \
            struct.pack("!H", 0x0800) + ipv4(r, 6, tcp(r, 5555, port, data)), None
    if kind == "ip6_tcp":
        return eth(r, 0x86DD, ipv6(r, 6, tcp(r, 40000, port, data))), None
    if kind == "ip6_udp":
        return eth(r, 0x86DD, ipv6(r, 17, udp(40001, port, data))), None
    if kind == "arp":
        return eth(r, 0x0806, struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac(r) + bytes(4) + bytes(6) + bytes(4)), None
    if kind == "bad_ihl":
        p = bytearray(ipv4(r, 6, tcp(r, 1, 2)))
        p[0] = 0x43  # IHL 3: invalid
        return eth(r, 0x0800, bytes(p)), None
    if kind == "trunc_ip":
        full = eth(r, 0x0800, ipv4(r, 6, tcp(r, 1, port, data)))
        cut = r.randrange(15, 40)
        return full[:cut], len(full)
    if kind == "runt":
        return bytes(r.randrange(256) for _ in range(r.randrange(0, 14))), None
    # 802.3 length field + LLC/SNAP
    return eth(r, 46, b"\xaa\xaa\x03\x00\x00\x00\x08\x00" + bytes(38)), None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("-n", type=int, default=300, help="number of packets (default 300)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--nanosecond", action="store_true", help="write a nanosecond-resolution pcap")
    a = ap.parse_args()
    r = random.Random(a.seed)
    magic = 0xA1B23C4D if a.nanosecond else 0xA1B2C3D4
    t = 1_700_000_000 * 10**9
    with open(a.out, "wb") as f:
        f.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 65535, 1))
        for _ in range(a.n):
            pkt, wire = frame(r)
            t += r.randrange(1_000, 2_000_000_000 // max(a.n, 1))
            sec, ns = divmod(t, 10**9)
            frac = ns if a.nanosecond else ns // 1000
            f.write(struct.pack("<IIII", sec, frac, len(pkt), wire or len(pkt)) + pkt)


if __name__ == "__main__":
    main()
