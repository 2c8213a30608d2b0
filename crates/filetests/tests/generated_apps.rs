//! Whole compiled applications (`--link direct`, `--link table`) and the
//! JIT without linking (`dispatch`) against the runtime's graph walk with
//! the reference interpreter, on generated applications (random DAGs of
//! generated NetPEs, with fan-out, unconnected ports, several sources and
//! input ports without one) × generated packets: the bounded version of the
//! fuzz target `linked_app`. Everything observable must be identical: each
//! packet's verdict, the exchange buffers that leave (port, bytes, order),
//! every counter of `--stats` (budget used included), and each NetPE's data
//! memory and coprocessor state at the end.
//!
//! `NETVM_LINK_APPS=N` runs N applications, `NETVM_LINK_SEED=S` changes the seed.

use netvm_filetests::differential::{check_generated, describe, manifest_of, observe_app, Checked};
use netvm_fuzzgen::app::generate_app;
use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, GenConfig};
use netvm_runtime::{Application, Engine, InterpEngine, JitEngine, LinkMode, Manifest, Verdict};
use netvm_traffic::SplitMix64;
use netvm_vm::Packet;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn linked_applications_agree_with_the_interpreter() {
    let apps = env_num("NETVM_LINK_APPS", 300);
    let seed = env_num("NETVM_LINK_SEED", 0x6c69_6e6b);
    let mut rng = SplitMix64::new(seed);
    let engines: [(&str, Box<dyn Engine>); 3] = [
        ("jit/direct", Box::new(JitEngine::with_link(Some(LinkMode::Direct)))),
        ("jit/table", Box::new(JitEngine::with_link(Some(LinkMode::Table)))),
        ("jit/dispatch", Box::new(JitEngine::with_link(None))),
    ];
    let (mut built, mut packets_run, mut fanned, mut used, mut one_path) = (0usize, 0usize, 0usize, 0usize, 0usize);
    for a in 0..apps {
        let cfg = GenConfig { max_insns: 80, max_ports: 4, max_info_size: 64, max_data_size: 64, ..GenConfig::default() };
        let Some(g) = generate_app(&mut rng, &cfg) else { continue };
        let pkt_bytes = rng.bytes(60 * 160);
        let Ok(packets) = generate_packets(&mut Unstructured::new(&pkt_bytes), 60) else { continue };
        let batch = 1 + (rng.next_u64() % 16) as usize;
        match check_generated(&g, &packets, batch, &engines) {
            Ok(Checked::Ran(verdicts)) => {
                built += 1;
                packets_run += packets.len();
                fanned += verdicts.iter().filter(|v| matches!(v, Verdict::Fanout { .. })).count();
                let mut app = Application::build(&manifest_of(&g).unwrap(), &InterpEngine, &netvm_copro::registry(), None).unwrap();
                // Without fan-out the walk takes its one-path loop.
                one_path += usize::from(!app.has_fanout());
                used += usize::from(observe_app(&mut app, &packets, batch).stats.netpes.iter().any(|n| n.flow.budget_used > 0));
            }
            Ok(Checked::InitFailed) => {}
            Err(e) => panic!("application {a} (seed {seed:#x}), batch {batch}: {e}\n{}", describe(&g)),
        }
    }
    println!(
        "{built} applications × 3 engines ({one_path} without fan-out), {packets_run} packets, {fanned} duplicated, {used} consumed budget"
    );
    if apps >= 300 {
        assert!(built >= 200, "only {built} applications built");
        assert!(fanned > 100, "only {fanned} packets duplicated: fan-out is not exercised");
        assert!(used > 20, "only {used} applications consumed budget: loops are not exercised");
        assert!(one_path > 15, "only {one_path} applications without fan-out: the walk's one-path loop is not exercised");
    }
}

/// Compiling on several threads changes nothing: every engine, each
/// function handed to a worker (`set_inline_insts(0)`), against the
/// interpreter on generated applications (netvm-jit's tests/parallel.rs
/// checks that the machine code is the same); and so does Cranelift's
/// single-pass register allocator, used by default on huge functions only
/// (`JitOptions::fast_regalloc_insts`), here on every function.
#[test]
fn linked_applications_compiled_on_several_threads_agree_with_the_interpreter() {
    netvm_jit::parallel::set_inline_insts(0);
    let seed = env_num("NETVM_LINK_SEED", 0x6c69_6e6b) ^ 0x7468_7265_6164;
    let mut rng = SplitMix64::new(seed);
    let opts = netvm_jit::JitOptions { threads: 4, ..netvm_jit::JitOptions::default() };
    let single_pass = netvm_jit::JitOptions { fast_regalloc_insts: 0, ..opts };
    let engines: [(&str, Box<dyn Engine>); 6] = [
        ("jit/direct, 4 threads", Box::new(JitEngine { link: Some(LinkMode::Direct), opts, batching: Default::default() })),
        ("jit/table, 4 threads", Box::new(JitEngine { link: Some(LinkMode::Table), opts, batching: Default::default() })),
        ("jit/dispatch, 4 threads", Box::new(JitEngine { link: None, opts, batching: Default::default() })),
        (
            "jit/direct, single-pass regalloc",
            Box::new(JitEngine { link: Some(LinkMode::Direct), opts: single_pass, batching: Default::default() }),
        ),
        (
            "jit/table, single-pass regalloc",
            Box::new(JitEngine { link: Some(LinkMode::Table), opts: single_pass, batching: Default::default() }),
        ),
        ("jit/dispatch, single-pass regalloc", Box::new(JitEngine { link: None, opts: single_pass, batching: Default::default() })),
    ];
    let mut built = 0usize;
    for a in 0..60 {
        let cfg = GenConfig { max_insns: 80, max_ports: 4, max_info_size: 64, max_data_size: 64, ..GenConfig::default() };
        let Some(g) = generate_app(&mut rng, &cfg) else { continue };
        let pkt_bytes = rng.bytes(60 * 160);
        let Ok(packets) = generate_packets(&mut Unstructured::new(&pkt_bytes), 60) else { continue };
        match check_generated(&g, &packets, 8, &engines) {
            Ok(Checked::Ran(_)) => built += 1,
            Ok(Checked::InitFailed) => {}
            Err(e) => panic!("application {a} (seed {seed:#x}): {e}\n{}", describe(&g)),
        }
    }
    assert!(built >= 30, "only {built} applications built");
}

/// Dead info stores: in a linked application, a store to info memory that
/// neither its NetPE nor any NetPE downstream reads is removed (info memory
/// never leaves the application); the results stay the interpreter's.
#[test]
fn dead_info_stores_are_removed_across_netpes() {
    let dir = tempfile::tempdir().unwrap();
    // `mark` stores the ethertype at info 0 (read downstream) and the
    // frame's first byte at info 4 (read by nobody); `route` forwards on
    // port 1 for IPv4, else port 0.
    let mark = ".infosize 8\nsegment .push\n    pop\n    push 0\n    push 12\n    upload.16\n    istore.32\n    push 4\n    push 0\n    upload.8\n    istore.32\n    ret 0\nends\n";
    let route = ".infosize 8\n.ports 2\nsegment .push\n    pop\n    push 0\n    iload.32\n    push 0x800\n    jcmp.eq ip\n    ret 0\nip:\n    ret 1\nends\n";
    std::fs::write(dir.path().join("mark.nil"), mark).unwrap();
    std::fs::write(dir.path().join("route.nil"), route).unwrap();
    let toml = "[[netpe]]\nname = \"mark\"\nprogram = \"mark.nil\"\n[[netpe]]\nname = \"route\"\nprogram = \"route.nil\"\n\
                [[source]]\nport = 0\nto = \"mark\"\n[[connect]]\nfrom = \"mark.0\"\nto = \"route\"\n\
                [[sink]]\nfrom = \"route.0\"\nport = 0\n[[sink]]\nfrom = \"route.1\"\nport = 1\n";
    let path = dir.path().join("app.toml");
    std::fs::write(&path, toml).unwrap();
    let manifest = Manifest::load(&path).unwrap();
    let registry = netvm_copro::registry();
    let mut packets: Vec<Packet> = Vec::new();
    for (len, et) in [(60usize, 0x0800u16), (60, 0x86dd), (13, 0x0800), (0, 0), (14, 0x0800)] {
        let mut d = vec![0xabu8; len];
        if len >= 14 {
            d[12..14].copy_from_slice(&et.to_be_bytes());
        }
        packets.push(Packet::from_bytes(d));
    }
    let mut reference = Application::build(&manifest, &InterpEngine, &registry, None).unwrap();
    let want = observe_app(&mut reference, &packets, 4);
    let stores = |dead_info_stores: bool| {
        let plan = Application::plan(&manifest, &registry, None).unwrap();
        let domain = netvm_jit::DomainOpts { dead_info_stores, ..netvm_jit::DomainOpts::ALL };
        let opts = netvm_jit::JitOptions { keep_text: true, domain, ..netvm_jit::JitOptions::default() };
        let app = netvm_jit::link::LinkedApp::compile(&plan.graph, &plan.verified, &plan.limits, LinkMode::Direct, opts).unwrap();
        let clif = app.text().clif.iter().find(|(n, _)| n == "netvm_run").unwrap().1.clone();
        // Stores of 32-bit values (info stores; the batch loop's own stores are other widths or through the ctx).
        clif.lines().filter(|l| l.contains(" store ") && l.contains("v")).count()
    };
    assert!(stores(false) > stores(true), "the dead store at info 4 was not removed ({} vs {})", stores(false), stores(true));
    let mut app = Application::build(&manifest, &JitEngine::default(), &registry, None).unwrap();
    assert_eq!(observe_app(&mut app, &packets, 4), want);
}

/// A table's walk compiled for the shape the graph expects (keys of 6
/// bytes, values of 4: the fields that follow from them as constants)
/// gives the interpreter's results; so does one compiled for a shape the
/// instance does not have (the compare sends every operation to the call:
/// without it, constants for 8-byte keys would hash the wrong bytes and
/// miss), and one for a shape no walk has (compiled as loads).
#[test]
fn walks_compiled_for_a_shape_compare_it_first() {
    let dir = tempfile::tempdir().unwrap();
    // Learn the source MAC's port, forward to the destination's (port 0 unknown).
    let learn = ".copro t table\n.ports 9\nsegment .push\n    locstore 0\n    push 6\n    copro.in t, 8\n    locload 0\n    copro.in t, 4\n    copro.invoke t, 4\n    push 0\n    copro.in t, 8\n    copro.invoke t, 3\n    copro.out t, 0\n    jz unknown\n    copro.out t, 1\n    ret.pop\nunknown:\n    ret 0\nends\n";
    std::fs::write(dir.path().join("learn.nil"), format!(".locals 1\n{learn}")).unwrap();
    let mut toml = String::from(
        "[[netpe]]\nname = \"learn\"\nprogram = \"learn.nil\"\ncopro.t = { key_size = 6, value_size = 4, capacity = 4096, seed = 7 }\n",
    );
    for p in 0..4 {
        toml += &format!("[[source]]\nport = {p}\nto = \"learn.{p}\"\n");
    }
    for p in 0..9 {
        toml += &format!("[[sink]]\nfrom = \"learn.{p}\"\nport = {p}\n");
    }
    let path = dir.path().join("app.toml");
    std::fs::write(&path, toml).unwrap();
    let manifest = Manifest::load(&path).unwrap();
    let registry = netvm_copro::registry();
    let mut rng = SplitMix64::new(3);
    let mac = |h: u64| [2u8, 0, 0, (h >> 8) as u8, h as u8, 0x33];
    let packets: Vec<Packet> = (0..600)
        .map(|_| {
            let (src, dst) = (rng.next_u64() % 40, rng.next_u64() % 48);
            let mut d = vec![0u8; 60];
            d[0..6].copy_from_slice(&mac(dst));
            d[6..12].copy_from_slice(&mac(src));
            let mut p = Packet::from_bytes(d);
            p.in_port = (src % 4) as u16;
            p
        })
        .collect();
    let mut reference = Application::build(&manifest, &InterpEngine, &registry, None).unwrap();
    let want = observe_app(&mut reference, &packets, 16);
    assert!(want.emitted.iter().filter(|(port, _)| *port > 0).count() > 300, "most frames find their host");
    let plan = Application::plan(&manifest, &registry, None).unwrap();
    assert_eq!(plan.graph.walk_shape(0, 0), netvm_vm::BucketWalk::shape_of(6, 4), "the runtime gives the table's shape");
    for shape in [netvm_vm::BucketWalk::shape_of(6, 4), netvm_vm::BucketWalk::shape_of(8, 4), 3] {
        for link in [LinkMode::Direct, LinkMode::Table] {
            let mut plan = Application::plan(&manifest, &registry, None).unwrap();
            plan.graph.walk_shapes = vec![vec![shape]];
            let mut app = Application::from_plan(plan, &JitEngine::with_link(Some(link))).unwrap();
            assert_eq!(observe_app(&mut app, &packets, 16), want, "shape {shape:#x}, {link:?}");
        }
    }
}
