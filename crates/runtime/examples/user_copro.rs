//! Adding a coprocessor of your own: a Bloom filter that tells a NetIL
//! program whether it has (probably) seen a flow before.
//!
//! Three steps, all shown below:
//!
//! 1. implement [`netvm_vm::Coprocessor`] (`write` input registers, `read`
//!    output registers, `invoke` operations; optionally the control plane:
//!    `dump`, `load`, `clear`, `tick`, `stats`; and `registers`, the inline
//!    register file, so that JIT-compiled code stores and loads plain
//!    registers without a call: see its contract);
//! 2. write a factory `fn(&CoproConfig) -> Result<Box<dyn Coprocessor>, String>`
//!    that reads the instance's settings from the application manifest;
//! 3. register it under a kind name in a [`netvm_vm::CoproRegistry`] (start
//!    from `netvm_copro::registry()` to keep the built-in kinds) and build
//!    the application with that registry. NetIL declares an instance with
//!    `.copro NAME KIND` and reaches it with `copro.in`, `copro.invoke`,
//!    `copro.out`; the interpreter and the JIT call it the same way.
//!
//! The program below sends the first packet of each IPv4 source/destination
//! pair to port 1 and the others to port 0.
//!
//! Run it: `cargo run -p netvm-runtime --example user_copro [-- TRACE.pcap]`

use netvm_runtime::manifest::NetPeSpec;
use netvm_runtime::{Application, InterpEngine, JitEngine, Manifest};
use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, Packet, RegisterFile};

/// A Bloom filter over 64-bit keys with `k` hash functions (double hashing).
///
/// Registers: in 0 and in 1, the key's high and low words; out 0, 1 if the
/// key was (probably) present before the operation. Operations: 0 test,
/// 1 test-and-insert. Configuration: `bits` (a power of two, default 2^20),
/// `hashes` (1 to 16, default 4).
pub struct Bloom {
    bits: Vec<u64>,
    mask: u64,
    hashes: u32,
    key: [u32; 2],
    seen: u32,
    inserted: u64,
}

impl Bloom {
    /// `bits` bits (a power of two) and `hashes` hash functions.
    pub fn new(bits: u64, hashes: u32) -> Bloom {
        Bloom { bits: vec![0; (bits / 64).max(1) as usize], mask: bits - 1, hashes, key: [0; 2], seen: 0, inserted: 0 }
    }

    fn positions(&self) -> impl Iterator<Item = u64> + '_ {
        let key = u64::from(self.key[0]) << 32 | u64::from(self.key[1]);
        // Two independent 64-bit mixes (splitmix64 finalizers), combined.
        let mix = |mut z: u64| {
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let (h1, h2) = (mix(key), mix(key ^ 0x9e37_79b9_7f4a_7c15) | 1);
        (0..u64::from(self.hashes)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) & self.mask)
    }
}

/// The factory: settings come from the manifest (`copro.NAME = { bits = ..., hashes = ... }`).
pub fn create_bloom(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    let num = |k: &str, d: u64| cfg.get(k).map_or(Ok(d), |v| v.parse::<u64>().map_err(|_| format!("bloom: {k} `{v}` is not a number")));
    let bits = num("bits", 1 << 20)?;
    let hashes = num("hashes", 4)?;
    if !bits.is_power_of_two() || !(64..=1 << 32).contains(&bits) {
        return Err("bloom: bits must be a power of two from 64 to 2^32".into());
    }
    if !(1..=16).contains(&hashes) {
        return Err("bloom: hashes must be 1 to 16".into());
    }
    if let Some(k) = cfg.keys().find(|k| !matches!(k.as_str(), "bits" | "hashes")) {
        return Err(format!("bloom: unknown setting `{k}`"));
    }
    Ok(Box::new(Bloom::new(bits, hashes as u32)))
}

impl Coprocessor for Bloom {
    fn kind(&self) -> &str {
        "bloom"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        *self.key.get_mut(reg as usize).ok_or(CoproError::NoRegister(reg))? = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        match reg {
            0 => Ok(self.seen),
            _ => Err(CoproError::NoRegister(reg)),
        }
    }

    /// Both key words and the answer are plain memory: compiled code reaches them without a call.
    fn registers(&mut self) -> RegisterFile {
        RegisterFile::new(&mut self.key, 0b11, std::slice::from_mut(&mut self.seen), 0b1)
    }

    fn invoke(&mut self, op: u8, _ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        if op > 1 {
            return Err(CoproError::NoOperation(op));
        }
        let pos: Vec<u64> = self.positions().collect();
        self.seen = u32::from(pos.iter().all(|p| self.bits[(p / 64) as usize] & (1 << (p % 64)) != 0));
        if op == 1 && self.seen == 0 {
            for p in pos {
                self.bits[(p / 64) as usize] |= 1 << (p % 64);
            }
            self.inserted += 1;
        }
        Ok(())
    }

    fn clear(&mut self) {
        self.bits.fill(0);
        self.inserted = 0;
    }

    fn stats(&self) -> Vec<(String, u64)> {
        vec![("inserted".into(), self.inserted)]
    }
}

/// First packet of each IPv4 address pair to port 1, the rest to port 0.
pub const FIRST_SEEN: &str = "
.copro flows bloom
.ports 2
segment .push
    pop
    pktlen
    push 34
    jcmp.lt other
    push 12
    upload.16
    push 0x0800
    jcmp.neq other
    push 26
    upload.32
    copro.in flows, 0       ; key: source address ...
    push 30
    upload.32
    copro.in flows, 1       ; ... and destination address
    copro.invoke flows, 1   ; test and insert
    copro.out flows, 0
    jnz other
    ret 1
other:
    ret 0
ends
";

/// Runs [`FIRST_SEEN`] on `packets` with `engine` (`interp` or `jit`);
/// returns the packets out of ports 0 and 1 and the filter's insert count.
pub fn first_seen(packets: &[Packet], engine: &str) -> Result<(u64, u64, u64), String> {
    let module = netil::assemble(FIRST_SEEN).map_err(|e| e.to_string())?.module;
    let mut manifest = Manifest::single(std::path::Path::new("first-seen"), &[0], 2, None);
    manifest.netpes[0] = NetPeSpec { module: Some(module), ..manifest.netpes[0].clone() };
    manifest.netpes[0].copro.insert("flows".into(), [("bits".to_string(), toml::Value::Integer(1 << 16))].into_iter().collect());

    let mut registry = netvm_copro::registry();
    registry.register("bloom", create_bloom);
    let mut app = match engine {
        "interp" => Application::build(&manifest, &InterpEngine, &registry, None),
        _ => Application::build(&manifest, &JitEngine::default(), &registry, None),
    }
    .map_err(|e| e.to_string())?;

    let mut batch = packets.to_vec();
    let mut verdicts = Vec::new();
    app.process_batch(&mut batch, &mut verdicts, &mut |_, _| {});
    let stats = app.stats();
    let port = |p: u16| stats.ports.get(&p).copied().unwrap_or(0);
    let inserted = app.copro("flows")?.stats()[0].1;
    Ok((port(0), port(1), inserted))
}

fn main() {
    let trace = std::env::args().nth(1).unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/traces/mixed.pcap").into());
    let (packets, err) = netvm_io::read_capture(std::path::Path::new(&trace), 0);
    if let Some(e) = err {
        eprintln!("{trace}: {e}");
    }
    for engine in ["interp", "jit"] {
        match first_seen(&packets, engine) {
            Ok((rest, first, inserted)) => {
                println!("{engine}: {first} first packets of a pair, {rest} others ({inserted} pairs in the filter)")
            }
            Err(e) => eprintln!("{engine}: {e}"),
        }
    }
}
