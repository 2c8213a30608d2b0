//! `CaptureSource` → `PcapSink` writes what `tcpdump -r IN -w OUT` writes,
//! byte for byte, for every Ethernet capture of the tcpdump test corpus
//! (shared/corpus/tcpdump-tests, pcap and pcapng) that tcpdump reads; with
//! `--time-stamp-precision nano` for nanosecond inputs.
//!
//! Skipped, with a message, when tcpdump is not installed, unless
//! `NETVM_REQUIRE_TCPDUMP=1`. The files whose outputs differ are listed
//! with the reason (see `EXPECTED`); any other difference fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use netvm_io::{CaptureSource, PcapSink, TsPrecision, LINKTYPE_ETHERNET, MIN_BLOCK_SIZE};
use netvm_vm::buffer::{Batch, BlockPool};
use netvm_vm::port::{Fill, OutPacket, Sink};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/corpus/tcpdump-tests");

/// Files whose output differs from tcpdump's by design, and why.
const EXPECTED: &[(&str, &str)] = &[(
    "rx_serviceid_oobr.pcap",
    "a record's microsecond field is 3841916976 (out of range): netvm carries whole seconds into the seconds, libpcap passes the field through",
)];

fn tcpdump() -> Option<PathBuf> {
    let found = ["/usr/bin/tcpdump", "/usr/sbin/tcpdump", "/usr/local/bin/tcpdump", "/usr/local/sbin/tcpdump"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        assert!(std::env::var("NETVM_REQUIRE_TCPDUMP").as_deref() != Ok("1"), "NETVM_REQUIRE_TCPDUMP=1 but tcpdump is not installed");
        println!("skipping: tcpdump is not installed (set NETVM_REQUIRE_TCPDUMP=1 to make this an error)");
    }
    found
}

/// Our output for `input`: `None` if it is not an Ethernet capture we open;
/// else the error that ended the read, if any.
fn ours(input: &Path, output: &Path, pool: &BlockPool) -> Option<(TsPrecision, Option<String>)> {
    let mut src = CaptureSource::open(input, 0, pool).ok()?;
    if src.link_type() != Some(LINKTYPE_ETHERNET) {
        return None;
    }
    let mut sink = PcapSink::create(output, src.header()).unwrap();
    let mut batch = Batch::with_capacity(256);
    let mut err = None;
    loop {
        match src.fill_batch(&mut batch, 256, None) {
            Ok(Fill::Packets(_)) => {}
            Ok(Fill::End) => break,
            Ok(Fill::Starved) => panic!("starved with every batch retired"),
            Err(e) => {
                err = Some(e.to_string());
                break;
            }
        }
        for d in &batch.descs {
            // SAFETY: the batch holds the blocks its descriptors point into.
            let data = unsafe { d.bytes() };
            let p = OutPacket { data, wire_len: d.wirelen, ts: d.ts(), in_port: d.in_port, seq: d.seq };
            if let Err(e) = sink.write(&p) {
                err = Some(e.to_string());
            }
        }
        batch.clear();
    }
    sink.finish().unwrap();
    Some((src.precision(), err))
}

/// Records of a pcap file (after its 24-byte header), as (offset, header, data).
fn records(b: &[u8]) -> Vec<(usize, [u32; 4])> {
    let mut out = Vec::new();
    let mut p = 24;
    while p + 16 <= b.len() {
        let h: [u32; 4] = std::array::from_fn(|i| u32::from_ne_bytes(b[p + 4 * i..p + 4 * i + 4].try_into().unwrap()));
        out.push((p, h));
        p += 16 + h[2] as usize;
    }
    out
}

/// Why two outputs differ, in a line.
fn explain(a: &[u8], b: &[u8]) -> String {
    if a.len() < 24 || b.len() < 24 {
        return format!("ours {} bytes, tcpdump's {} bytes", a.len(), b.len());
    }
    if a[..24] != b[..24] {
        return format!("file headers differ: ours {:02x?}, tcpdump's {:02x?}", &a[..24], &b[..24]);
    }
    let (ra, rb) = (records(a), records(b));
    for (i, (x, y)) in ra.iter().zip(&rb).enumerate() {
        if x.1 != y.1 {
            return format!("record {i}: ours [sec frac caplen len] {:?}, tcpdump's {:?}", x.1, y.1);
        }
        let (da, db) = (&a[x.0 + 16..], &b[y.0 + 16..]);
        let n = (x.1[2] as usize).min(da.len()).min(db.len());
        if da[..n] != db[..n] {
            return format!("record {i}: data differ");
        }
    }
    format!("ours {} records, tcpdump's {}", ra.len(), rb.len())
}

#[test]
fn sink_output_is_tcpdumps() {
    let Some(tcpdump) = tcpdump() else { return };
    let Ok(entries) = std::fs::read_dir(CORPUS) else {
        println!("skipping: corpus directory {CORPUS} is absent");
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect();
    paths.sort();
    let dir = std::env::temp_dir().join(format!("netvm-io-tcpdump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // tcpdump may write as its own user.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let pool = BlockPool::new(MIN_BLOCK_SIZE, 4);
    let (mut same, mut unread, mut nano, mut stopped) = (0, 0, 0, 0);
    let mut differ: Vec<(String, String)> = Vec::new();
    for path in &paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mine = dir.join("ours.pcap");
        let theirs = dir.join("tcpdump.pcap");
        let _ = std::fs::remove_file(&theirs);
        let Some((precision, our_err)) = ours(path, &mine, &pool) else {
            // Not an Ethernet capture we open: tcpdump must not read one either.
            let out = Command::new(&tcpdump).arg("-r").arg(path).arg("-w").arg(&theirs).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            if stderr.contains("link-type EN10MB") {
                let why = match CaptureSource::open(path, 0, &pool) {
                    Err(e) => format!("we do not open it ({e}); tcpdump: {}", stderr.trim().replace('\n', " / ")),
                    Ok(s) => format!("we read link type {:?}; tcpdump reads Ethernet", s.link_type()),
                };
                differ.push((name, why));
            }
            continue;
        };
        let mut cmd = Command::new(&tcpdump);
        if precision == TsPrecision::Nano {
            cmd.args(["--time-stamp-precision", "nano"]);
            nano += 1;
        }
        let out = cmd.arg("-r").arg(path).arg("-w").arg(&theirs).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).trim().replace('\n', " / ");
        let Ok(theirs) = std::fs::read(&theirs) else {
            // tcpdump could not open it.
            unread += 1;
            println!("{name}: tcpdump does not read it ({stderr}); ours: {}", our_err.as_deref().unwrap_or("read to the end"));
            continue;
        };
        let mine = std::fs::read(&mine).unwrap();
        if mine == theirs {
            same += 1;
            if our_err.is_some() || !out.status.success() {
                stopped += 1;
            }
            continue;
        }
        let why = format!(
            "{}; ours: {}; tcpdump: {}",
            explain(&mine, &theirs),
            our_err.as_deref().unwrap_or("read to the end"),
            if out.status.success() { "read to the end".to_string() } else { stderr }
        );
        differ.push((name, why));
    }
    std::fs::remove_dir_all(&dir).unwrap();
    println!(
        "tcpdump -w comparison: {same} Ethernet captures identical ({nano} nanosecond; {stopped} of them end in an error, \
         with the same packets before it), {} differ, {unread} not read by tcpdump",
        differ.len()
    );
    let mut unexpected = Vec::new();
    for (name, why) in &differ {
        let known = EXPECTED.iter().find(|(n, _)| n == name);
        println!("  {name}: {why}{}", known.map(|(_, r)| format!(" [expected: {r}]")).unwrap_or_default());
        if known.is_none() {
            unexpected.push(name.clone());
        }
    }
    assert!(same > 300, "only {same} identical");
    assert!(unexpected.is_empty(), "outputs differ from tcpdump's: {unexpected:?}");
}

mod common;

use common::{frame, Pcap, PcapNg};

/// Small files made here that exercise what the corpus does not: every pcap
/// version, byte order and precision, snapshot cuts, lengths at and past the
/// maximum, link-type ext bits, pcapng resolutions, offsets and block kinds,
/// and files cut at every byte (tcpdump stops at the bad record too: the
/// packets before it must be the same).
fn handmade() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for be in [false, true] {
        for nano in [false, true] {
            let mut p = Pcap::new(be, nano, 1);
            p.record(1_700_000_000, 123_456, &frame(60, 1), 60).record(1_700_000_001, 999_999, &frame(14, 2), 1514).record(5, 0, &[], 0);
            p.record(7, 1, &frame(100, 3), 50); // wire length below the captured length
            out.push((format!("basic-be{be}-nano{nano}.pcap"), p.bytes));
        }
        for version in [(2, 0), (2, 1), (2, 2), (2, 3), (2, 4), (543, 0)] {
            let mut p = Pcap::with_header(be, false, 1, 65535, version);
            p.raw_record(1, 2, 60, 1500, &frame(60, 1)).raw_record(3, 4, 1500, 60, &frame(60, 2)).raw_record(5, 6, 60, 60, &frame(60, 3));
            out.push((format!("version-{}.{}-be{be}.pcap", version.0, version.1), p.bytes));
        }
        for snaplen in [0, 64, 96, 262_208, u32::MAX, 0x8000_0000] {
            let mut p = Pcap::with_header(be, true, 1, snaplen, (2, 4));
            p.record(1, 2, &frame(100, 1), 1500).record(3, 4, &frame(64, 2), 64).record(5, 6, &frame(1514, 3), 1514);
            out.push((format!("snaplen-{snaplen}-be{be}.pcap"), p.bytes));
        }
    }
    let mut p = Pcap::with_header(false, false, 0x3000_0001, 128, (2, 4));
    p.bytes[8..16].copy_from_slice(&[0x10, 0x0e, 0, 0, 6, 0, 0, 0]); // thiszone 3600, sigfigs 6
    p.record(1, 2, &frame(60, 1), 64);
    out.push(("ext-bits.pcap".to_string(), p.bytes));
    let mut p = Pcap::with_header(false, false, 1, 0, (2, 4));
    p.record(1, 2, &frame(60, 1), 60).record(3, 4, &vec![0xAB; netvm_io::MAX_CAPLEN as usize], 300_000);
    p.raw_record(5, 6, netvm_io::MAX_CAPLEN + 1, netvm_io::MAX_CAPLEN + 1, &frame(64, 0));
    out.push(("caplen-max.pcap".to_string(), p.bytes));
    let mut p = Pcap::new(false, false, 1);
    p.record(1, 2, &frame(60, 1), 60).record(3, 4, &frame(20, 2), 1500).record(5, 6, &frame(30, 3), 30);
    for n in 24..p.bytes.len() {
        out.push((format!("cut-{n}.pcap"), p.bytes[..n].to_vec()));
    }

    for be in [false, true] {
        let mut ng = PcapNg::new(be);
        ng.idb(1, 0, None, None)
            .epb(0, 1_700_000_000_123_456, &frame(60, 1), 60)
            .isb()
            .epb(0, 2_000_001, &frame(14, 2), 100)
            .spb(&frame(33, 3), 33)
            .block(0x0BAD, &[1, 2, 3, 4, 5], common::Kind::Other)
            .shb(be)
            .idb(1, 0, None, Some(1000))
            .epb(0, 7_000_005, &frame(20, 4), 20);
        out.push((format!("ng-micro-be{be}.pcapng"), ng.bytes));
        for (res, name) in [(9u8, "nano"), (0x80 | 20, "bin20"), (3, "milli"), (0, "sec"), (12, "pico")] {
            let mut ng = PcapNg::new(be);
            ng.idb(1, 0, Some(res), None)
                .epb(0, 1_700_000_000_123_456_789, &frame(60, 1), 60)
                .epb(0, 123_456_789_012, &frame(61, 2), 61)
                .epb(0, 1_048_577, &frame(62, 3), 62);
            out.push((format!("ng-{name}-be{be}.pcapng"), ng.bytes));
        }
        let mut ng = PcapNg::new(be);
        ng.idb(1, 64, None, None).spb(&frame(100, 1), 1500).epb(0, 5, &frame(60, 2), 1500);
        out.push((format!("ng-snaplen-be{be}.pcapng"), ng.bytes));
    }
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, Some(9), None)
        .epb(0, 1_000_000_001, &frame(60, 1), 60)
        .isb()
        .epb(0, 2_000_000_002, &frame(20, 2), 1500)
        .spb(&frame(33, 3), 33);
    for n in 1..ng.bytes.len() {
        if !ng.blocks.iter().any(|b| b.1 == n) {
            out.push((format!("ng-cut-{n}.pcapng"), ng.bytes[..n].to_vec()));
        }
    }
    out
}

#[test]
fn handmade_files_match_tcpdump() {
    let Some(tcpdump) = tcpdump() else { return };
    let dir = std::env::temp_dir().join(format!("netvm-io-tcpdump-handmade-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let pool = BlockPool::new(MIN_BLOCK_SIZE, 4);
    let (mut same, mut stopped, mut total, mut neither) = (0, 0, 0, 0);
    let mut differ = Vec::new();
    for (name, bytes) in handmade() {
        let input = dir.join(&name);
        std::fs::write(&input, &bytes).unwrap();
        let mine = dir.join("ours.pcap");
        let theirs = dir.join("tcpdump.pcap");
        let _ = std::fs::remove_file(&theirs);
        let _ = std::fs::remove_file(&mine);
        let opened = ours(&input, &mine, &pool);
        let mut cmd = Command::new(&tcpdump);
        if matches!(opened, Some((TsPrecision::Nano, _))) {
            cmd.args(["--time-stamp-precision", "nano"]);
        }
        let out = cmd.arg("-r").arg(&input).arg("-w").arg(&theirs).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).trim().replace('\n', " / ");
        std::fs::remove_file(&input).unwrap();
        total += 1;
        let Some((_, our_err)) = opened else {
            if theirs.exists() {
                differ.push(format!("{name}: we do not open it; tcpdump does ({stderr})"));
            } else {
                neither += 1;
            }
            continue;
        };
        let Ok(theirs) = std::fs::read(&theirs) else {
            differ.push(format!("{name}: tcpdump does not open it ({stderr}); we do ({our_err:?})"));
            continue;
        };
        let mine = std::fs::read(&mine).unwrap();
        if mine == theirs {
            same += 1;
            if our_err.is_some() {
                stopped += 1;
            }
            continue;
        }
        differ.push(format!(
            "{name}: {}; ours: {}; tcpdump: {}",
            explain(&mine, &theirs),
            our_err.as_deref().unwrap_or("read to the end"),
            if out.status.success() { "read to the end".to_string() } else { stderr }
        ));
    }
    std::fs::remove_dir_all(&dir).unwrap();
    println!(
        "handmade files: {same} of {total} identical to tcpdump's output ({stopped} of them end in an error); \
         {neither} opened by neither"
    );
    for d in &differ {
        println!("  {d}");
    }
    assert!(differ.is_empty(), "{} differ", differ.len());
}
