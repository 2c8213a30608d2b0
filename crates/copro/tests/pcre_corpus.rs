//! Every `pcre` of the public rule sets in ../shared/corpus/rules, built
//! the way the `regex` coprocessor builds it, against PCRE2 itself: where a
//! pattern runs on regex-automata (translated), both engines must find the
//! same match on subjects generated from the pattern and on real frames
//! from the tcpdump captures. Prints how many patterns go to each engine,
//! why they go to PCRE2, and which fail on both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use netvm_copro::regex::{compile_check, compile_pcre2, parse_pcre, validate, Engine, Search};
use netvm_traffic::SplitMix64;
use regex_automata::util::syntax;
use regex_syntax::hir::{Class, Hir, HirKind};

const CORPUS: &str = "../../../shared/corpus";

/// The `pcre:"..."` values of a rules file (disabled rules too): as Snort
/// reads them, from the first to the last `"` before the `;` that ends the
/// option (some ET patterns hold a bare `"`).
fn pcres(text: &str, out: &mut BTreeSet<String>) {
    for line in text.lines() {
        let mut rest = line;
        while let Some(i) = rest.find("pcre:") {
            let v = &rest[i + 5..];
            let mut end = v.len();
            let mut esc = false;
            for (k, c) in v.char_indices() {
                match c {
                    _ if esc => esc = false,
                    '\\' => esc = true,
                    ';' => {
                        end = k;
                        break;
                    }
                    _ => {}
                }
            }
            let value = v[..end].trim().trim_start_matches('!').trim();
            if let Some(body) = value.strip_prefix('"').and_then(|b| b.strip_suffix('"')) {
                out.insert(body.to_string());
            }
            rest = &v[end..];
        }
    }
}

/// A subject the expression probably matches: a random walk of its HIR.
fn generate(h: &Hir, r: &mut SplitMix64, out: &mut Vec<u8>) {
    if out.len() > 4096 {
        return;
    }
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(l) => out.extend_from_slice(&l.0),
        HirKind::Class(Class::Bytes(c)) => {
            let rs = c.ranges();
            if !rs.is_empty() {
                let x = rs[(r.next_u64() as usize) % rs.len()];
                let span = u64::from(x.end() - x.start()) + 1;
                out.push(x.start() + (r.next_u64() % span) as u8);
            }
        }
        HirKind::Class(Class::Unicode(c)) => {
            if let Some(x) = c.ranges().first() {
                out.extend(x.start().to_string().bytes());
            }
        }
        HirKind::Repetition(rep) => {
            let extra = rep.max.map_or(3, |m| (m - rep.min).min(3));
            let n = rep.min.min(300) + (r.next_u64() % (u64::from(extra) + 1)) as u32;
            for _ in 0..n {
                generate(&rep.sub, r, out);
            }
        }
        HirKind::Capture(c) => generate(&c.sub, r, out),
        HirKind::Concat(v) => v.iter().for_each(|x| generate(x, r, out)),
        HirKind::Alternation(v) => generate(&v[(r.next_u64() as usize) % v.len()], r, out),
    }
}

/// Frames from the classic-pcap files of the corpus (up to `max`).
fn frames(max: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(Path::new(CORPUS).join("tcpdump-tests")) else { return out };
    let mut files: Vec<_> = dir.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "pcap")).collect();
    files.sort();
    for f in files {
        let Ok(b) = std::fs::read(&f) else { continue };
        if b.len() < 24 || b[..4] != [0xd4, 0xc3, 0xb2, 0xa1] {
            continue;
        }
        let mut at = 24;
        let mut taken = 0;
        while at + 16 <= b.len() && taken < 8 {
            let len = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
            let Some(data) = b.get(at + 16..at + 16 + len) else { break };
            if len > 40 {
                out.push(data.to_vec());
                taken += 1;
            }
            at += 16 + len;
        }
        if out.len() >= max {
            break;
        }
    }
    out
}

#[test]
fn corpus_pcres_agree_with_pcre2() {
    let rules = Path::new(CORPUS).join("rules");
    let mut texts = Vec::new();
    if let Ok(t) = std::fs::read_to_string(rules.join("snort3-community.rules")) {
        texts.push(t);
    }
    if let Ok(dir) = std::fs::read_dir(rules.join("et-open-2017")) {
        for e in dir.flatten() {
            texts.extend(std::fs::read_to_string(e.path()));
        }
    }
    if texts.is_empty() {
        eprintln!("skipped: no rule sets under {CORPUS}/rules");
        return;
    }
    let mut all = BTreeSet::new();
    texts.iter().for_each(|t| pcres(t, &mut all));
    let real = frames(400);
    let mut r = SplitMix64::new(15);
    let (mut automata, mut pcre2, mut subjects) = (0, 0, 0);
    let mut why: BTreeMap<String, usize> = BTreeMap::new();
    let mut both_fail = Vec::new();
    let mut disagree = Vec::new();
    for text in &all {
        let spec = match parse_pcre(text) {
            Ok(s) => s,
            Err(e) => {
                both_fail.push(format!("{text}: {e}"));
                continue;
            }
        };
        // `validate` (what the IDS checks rules with) agrees with building.
        assert_eq!(validate(&spec).is_ok(), compile_check(&spec).is_ok(), "{}", spec.pattern);
        let engine = match compile_check(&spec) {
            Ok(e) => e,
            Err(e) => {
                both_fail.push(e);
                continue;
            }
        };
        let Engine::Automata(a) = &engine else {
            pcre2 += 1;
            if let Engine::Pcre2(_, w) = &engine {
                *why.entry(w.clone()).or_default() += 1;
            }
            continue;
        };
        automata += 1;
        let reference = compile_pcre2(&spec).expect("PCRE2 builds what regex-automata builds");
        let hir = syntax::parse_with(&a.translated, &syntax::Config::new().unicode(false).utf8(false)).unwrap();
        let mut hays: Vec<Vec<u8>> = real.iter().step_by(7).take(40).cloned().collect();
        for k in 0..12 {
            let mut g = Vec::new();
            generate(&hir, &mut r, &mut g);
            match k % 4 {
                1 => g.push(b'\n'),
                2 => g = [b"GET /x?a=1 HTTP/1.1\r\n".to_vec(), g, b"\r\n\r\n".to_vec()].concat(),
                3 => g.make_ascii_uppercase(),
                _ => {}
            }
            hays.push(g);
        }
        for h in &hays {
            subjects += 1;
            let (got, want) = (engine.find(h), reference.find(h));
            if got != want && want != Search::Limit {
                disagree.push(format!("{spec} -> {}: {got:?} vs PCRE2 {want:?} on {:?}", a.translated, String::from_utf8_lossy(h)));
            }
        }
    }
    eprintln!(
        "{} distinct pcres: {automata} on regex-automata, {pcre2} on PCRE2, {} fail on both; {subjects} subjects compared",
        all.len(),
        both_fail.len()
    );
    for (w, n) in &why {
        eprintln!("  PCRE2 because of {w}: {n}");
    }
    for f in &both_fail {
        eprintln!("  fails on both: {f}");
    }
    for d in disagree.iter().take(30) {
        eprintln!("  DISAGREE {d}");
    }
    assert!(disagree.is_empty(), "{} disagreements", disagree.len());
    assert!(automata > 5 * pcre2, "most patterns run on regex-automata");
}
