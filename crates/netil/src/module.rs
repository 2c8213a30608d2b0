//! NetIL modules and their versioned binary format (`.nvm` files).
//!
//! A module is one NetPE's program: its declarations (stack depth, locals,
//! memory sizes, output ports, coprocessors) and up to two code segments,
//! `.init` and `.push`, and the binding interface NetBind's modules declare
//! ([`Interface`]: named ports, arguments, globals, the data-memory
//! layout). The byte layout is specified in docs/netil.md, section "Binary
//! module format". [`Module::from_bytes`] reads every 1.x file;
//! [`Module::to_bytes`] writes 1.1 when the module has an interface and 1.0
//! otherwise (a module without one is the same bytes as before 1.1), so for
//! every module this version wrote, `to_bytes(from_bytes(b)) == b`. `to_bytes` expects a module within
//! [`limits`] (as the loader and the assembler produce; the verifier checks
//! modules built in memory).

use std::fmt;

/// The eight magic bytes that open every binary module.
pub const MAGIC: [u8; 8] = *b"\x89NIL\r\n\x1a\n";
/// Major version of the binary format this crate reads and writes.
pub const VERSION_MAJOR: u16 = 1;
/// Minor version of the binary format this crate writes (for a module
/// with an [`Interface`]; 0 for one without).
pub const VERSION_MINOR: u16 = 1;

/// The tag byte that opens the interface section (format 1.1).
pub const INTERFACE_TAG: u8 = 0x49;

/// Hard limits of the module format. Anything larger is rejected by the loader.
pub mod limits {
    /// Largest `.maxstacksize`.
    pub const MAX_STACK: u16 = 1024;
    /// Largest number of local slots.
    pub const MAX_LOCALS: u16 = 1024;
    /// Largest info memory, in bytes.
    pub const MAX_INFO_SIZE: u32 = 65_536;
    /// Largest data memory, in bytes.
    pub const MAX_DATA_SIZE: u32 = 64 << 20;
    /// Largest number of output ports.
    pub const MAX_PORTS: u16 = 1024;
    /// Largest number of coprocessor declarations.
    pub const MAX_COPROS: u16 = 64;
    /// Longest coprocessor name or kind.
    pub const MAX_NAME: usize = 64;
    /// Largest code segment, in bytes.
    pub const MAX_CODE: u32 = 1 << 20;
    /// Most interface declarations (ports, arguments, globals, layout versions) in all.
    pub const MAX_INTERFACE: usize = 1024;
}

/// Which handler a segment holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SegmentKind {
    /// Runs once when the application starts, without an exchange buffer.
    Init = 1,
    /// Runs once per exchange buffer.
    Push = 2,
}

impl SegmentKind {
    /// The assembler name (`.init`, `.push`).
    pub const fn name(self) -> &'static str {
        match self {
            SegmentKind::Init => ".init",
            SegmentKind::Push => ".push",
        }
    }
}

impl fmt::Display for SegmentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A coprocessor instance the module uses: a local name and a kind resolved by the runtime.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CoproDecl {
    /// Name of the instance, used by the manifest to configure it.
    pub name: String,
    /// Kind of coprocessor (for example `counters`), looked up in the runtime's registry.
    pub kind: String,
}

/// A named data-memory variable: an argument or a global.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Var {
    /// Its name (an identifier).
    pub name: String,
    /// Byte offset in data memory.
    pub offset: u32,
    /// Size in bytes (1 to 8: a big-endian integer).
    pub size: u32,
}

/// A data-memory layout: a name, its version, and the earlier versions of
/// the same layout this module's data memory can start from (their bytes
/// keep their meaning; anything past them starts zeroed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The layout's name (an identifier).
    pub name: String,
    /// This module's version of it.
    pub version: u32,
    /// Earlier versions whose memory this module takes over.
    pub accepts: Vec<u32>,
}

/// What a module declares for binding it into data paths (the NetBind
/// paper's module interface, §III-A): named entry and exit points, input
/// arguments the binding sets, global variables the control plane reads
/// and writes, and its data-memory layout. All optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Interface {
    /// Named input ports (`.inport NAME PORT`).
    pub inputs: Vec<(String, u16)>,
    /// Named output ports (`.outport NAME PORT`).
    pub outputs: Vec<(String, u16)>,
    /// Input arguments (`.arg NAME OFFSET SIZE`): set before `.init` runs.
    pub args: Vec<Var>,
    /// Global variables (`.global NAME OFFSET SIZE`).
    pub globals: Vec<Var>,
    /// The data-memory layout (`.layout NAME VERSION [accepts V...]`).
    pub layout: Option<Layout>,
}

impl Interface {
    /// True if nothing is declared.
    pub fn is_empty(&self) -> bool {
        *self == Interface::default()
    }

    /// Declarations in all (what [`limits::MAX_INTERFACE`] bounds).
    pub fn len(&self) -> usize {
        self.inputs.len()
            + self.outputs.len()
            + self.args.len()
            + self.globals.len()
            + self.layout.as_ref().map_or(0, |l| 1 + l.accepts.len())
    }

    /// Whether data memory written by a module with layout `old` can be
    /// taken over by this one: the same layout name, and this version
    /// accepts `old`'s (or is it).
    pub fn accepts_layout(&self, old: &Interface) -> bool {
        match (&self.layout, &old.layout) {
            (Some(n), Some(o)) => n.name == o.name && (n.version == o.version || n.accepts.contains(&o.version)),
            _ => false,
        }
    }

    /// Checks the declarations against a module's ports and data memory:
    /// the first problem, in words.
    pub fn check(&self, out_ports: u16, data_size: u32) -> Result<(), String> {
        if self.len() > limits::MAX_INTERFACE {
            return Err(format!("{} interface declarations, above {}", self.len(), limits::MAX_INTERFACE));
        }
        let unique = |names: &mut dyn Iterator<Item = &String>, what: &str| -> Result<(), String> {
            let mut seen = std::collections::HashSet::new();
            for n in names {
                if !seen.insert(n) {
                    return Err(format!("{what} `{n}` declared twice"));
                }
            }
            Ok(())
        };
        unique(&mut self.inputs.iter().map(|(n, _)| n), "input port")?;
        unique(&mut self.outputs.iter().map(|(n, _)| n), "output port")?;
        unique(&mut self.args.iter().chain(&self.globals).map(|v| &v.name), "variable")?;
        for (n, p) in &self.outputs {
            if *p >= out_ports {
                return Err(format!("output port `{n}` is port {p}, but the module has {out_ports}"));
            }
        }
        for v in self.args.iter().chain(&self.globals) {
            if !(1..=8).contains(&v.size) {
                return Err(format!("variable `{}` of {} bytes (1 to 8)", v.name, v.size));
            }
            if u64::from(v.offset) + u64::from(v.size) > u64::from(data_size) {
                return Err(format!(
                    "variable `{}` at {}..{} lies past the data memory ({data_size} bytes)",
                    v.name,
                    v.offset,
                    u64::from(v.offset) + u64::from(v.size)
                ));
            }
        }
        if let Some(l) = &self.layout {
            if l.accepts.contains(&l.version) {
                return Err(format!("layout `{}` version {} accepts itself", l.name, l.version));
            }
        }
        Ok(())
    }
}

/// A NetIL module: one NetPE's declarations and code.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Module {
    /// Maximum operand stack depth (`.maxstacksize`).
    pub max_stack: u16,
    /// Number of 32-bit local slots (`.locals`).
    pub locals: u16,
    /// Info memory size in bytes (`.infosize`).
    pub info_size: u32,
    /// Data memory size in bytes (`.datasize`).
    pub data_size: u32,
    /// Number of output ports (`.ports`); `ret N` requires N below it.
    pub out_ports: u16,
    /// Coprocessor declarations (`.copro NAME KIND`), indexed by `copro.*` instructions.
    pub copros: Vec<CoproDecl>,
    /// Code of the `.init` segment, if any.
    pub init: Option<Vec<u8>>,
    /// Code of the `.push` segment, if any (the verifier requires one).
    pub push: Option<Vec<u8>>,
    /// The binding interface (format 1.1; empty in a 1.0 module).
    pub interface: Interface,
}

impl Module {
    /// The code of a segment, if present.
    pub fn segment(&self, kind: SegmentKind) -> Option<&[u8]> {
        match kind {
            SegmentKind::Init => self.init.as_deref(),
            SegmentKind::Push => self.push.as_deref(),
        }
    }

    /// Present segments in canonical order.
    pub fn segments(&self) -> impl Iterator<Item = (SegmentKind, &[u8])> {
        [SegmentKind::Init, SegmentKind::Push].into_iter().filter_map(|k| self.segment(k).map(|c| (k, c)))
    }

    /// Serializes to the binary format.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.push.as_ref().map_or(0, Vec::len));
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION_MAJOR.to_le_bytes());
        let minor = if self.interface.is_empty() { 0 } else { VERSION_MINOR };
        out.extend_from_slice(&minor.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes()); // flags
        out.extend_from_slice(&self.max_stack.to_le_bytes());
        out.extend_from_slice(&self.locals.to_le_bytes());
        out.extend_from_slice(&self.out_ports.to_le_bytes());
        out.extend_from_slice(&(self.copros.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.info_size.to_le_bytes());
        out.extend_from_slice(&self.data_size.to_le_bytes());
        for c in &self.copros {
            out.push(c.name.len() as u8);
            out.extend_from_slice(c.name.as_bytes());
            out.push(c.kind.len() as u8);
            out.extend_from_slice(c.kind.as_bytes());
        }
        let segs: Vec<_> = self.segments().collect();
        out.push(segs.len() as u8);
        for (kind, code) in segs {
            out.push(kind as u8);
            out.extend_from_slice(&(code.len() as u32).to_le_bytes());
            out.extend_from_slice(code);
        }
        if !self.interface.is_empty() {
            write_interface(&self.interface, &mut out);
        }
        out
    }

    /// Parses the binary format, checking every field against [`limits`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Module, LoadError> {
        let mut r = ByteReader { b: bytes, pos: 0 };
        let magic = r.take(8, "magic")?;
        if magic != MAGIC {
            return Err(LoadError::BadMagic);
        }
        let major = r.u16("version")?;
        let minor = r.u16("version")?;
        if major != VERSION_MAJOR {
            return Err(LoadError::UnsupportedVersion { major, minor });
        }
        let flags = r.u32("flags")?;
        if flags != 0 {
            return Err(LoadError::Invalid { offset: 12, what: format!("unknown flags {flags:#x}") });
        }
        let mut m = Module::default();
        let field_at = r.pos;
        m.max_stack = r.u16("max stack size")?;
        m.locals = r.u16("locals")?;
        m.out_ports = r.u16("ports")?;
        let ncopros = r.u16("coprocessor count")?;
        m.info_size = r.u32("info size")?;
        m.data_size = r.u32("data size")?;
        let check = |ok: bool, off: usize, what: String| if ok { Ok(()) } else { Err(LoadError::Invalid { offset: off, what }) };
        check(m.max_stack <= limits::MAX_STACK, field_at, format!("max stack size {} above {}", m.max_stack, limits::MAX_STACK))?;
        check(m.locals <= limits::MAX_LOCALS, field_at + 2, format!("{} locals above {}", m.locals, limits::MAX_LOCALS))?;
        check(m.out_ports <= limits::MAX_PORTS, field_at + 4, format!("{} ports above {}", m.out_ports, limits::MAX_PORTS))?;
        check(ncopros <= limits::MAX_COPROS, field_at + 6, format!("{ncopros} coprocessors above {}", limits::MAX_COPROS))?;
        check(m.info_size <= limits::MAX_INFO_SIZE, field_at + 8, format!("info size {} above {}", m.info_size, limits::MAX_INFO_SIZE))?;
        check(m.data_size <= limits::MAX_DATA_SIZE, field_at + 12, format!("data size {} above {}", m.data_size, limits::MAX_DATA_SIZE))?;
        for _ in 0..ncopros {
            let name = r.name("coprocessor name")?;
            let kind = r.name("coprocessor kind")?;
            if m.copros.iter().any(|c| c.name == name) {
                return Err(LoadError::Invalid { offset: r.pos, what: format!("coprocessor `{name}` declared twice") });
            }
            m.copros.push(CoproDecl { name, kind });
        }
        let nseg = r.u8("segment count")?;
        for _ in 0..nseg {
            let at = r.pos;
            let kind = match r.u8("segment kind")? {
                1 => SegmentKind::Init,
                2 => SegmentKind::Push,
                k => return Err(LoadError::Invalid { offset: at, what: format!("unknown segment kind {k}") }),
            };
            let len = r.u32("segment length")?;
            if len > limits::MAX_CODE {
                return Err(LoadError::Invalid { offset: at + 1, what: format!("segment of {len} bytes above {}", limits::MAX_CODE) });
            }
            let code = r.take(len as usize, "segment code")?.to_vec();
            if m.segment(kind).is_some() {
                return Err(LoadError::Invalid { offset: at, what: format!("duplicate {kind} segment") });
            }
            if kind == SegmentKind::Init && m.push.is_some() {
                return Err(LoadError::Invalid { offset: at, what: "segments out of order (.init must precede .push)".into() });
            }
            match kind {
                SegmentKind::Init => m.init = Some(code),
                SegmentKind::Push => m.push = Some(code),
            }
        }
        if r.pos < bytes.len() && minor >= 1 && bytes[r.pos] == INTERFACE_TAG {
            let at = r.pos;
            m.interface = read_interface(&mut r)?;
            m.interface.check(m.out_ports, m.data_size).map_err(|what| LoadError::Invalid { offset: at, what })?;
        }
        if r.pos != bytes.len() {
            return Err(LoadError::TrailingBytes { offset: r.pos });
        }
        Ok(m)
    }
}

/// Record kinds of the interface section.
const REC_INPORT: u8 = 1;
const REC_OUTPORT: u8 = 2;
const REC_ARG: u8 = 3;
const REC_GLOBAL: u8 = 4;
const REC_LAYOUT: u8 = 5;

fn write_name(out: &mut Vec<u8>, name: &str) {
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
}

fn write_interface(i: &Interface, out: &mut Vec<u8>) {
    out.push(INTERFACE_TAG);
    let records = i.inputs.len() + i.outputs.len() + i.args.len() + i.globals.len() + usize::from(i.layout.is_some());
    out.extend_from_slice(&(records as u16).to_le_bytes());
    for (kind, ports) in [(REC_INPORT, &i.inputs), (REC_OUTPORT, &i.outputs)] {
        for (name, port) in ports {
            out.push(kind);
            write_name(out, name);
            out.extend_from_slice(&port.to_le_bytes());
        }
    }
    for (kind, vars) in [(REC_ARG, &i.args), (REC_GLOBAL, &i.globals)] {
        for v in vars {
            out.push(kind);
            write_name(out, &v.name);
            out.extend_from_slice(&v.offset.to_le_bytes());
            out.extend_from_slice(&v.size.to_le_bytes());
        }
    }
    if let Some(l) = &i.layout {
        out.push(REC_LAYOUT);
        write_name(out, &l.name);
        out.extend_from_slice(&l.version.to_le_bytes());
        out.extend_from_slice(&(l.accepts.len() as u16).to_le_bytes());
        for v in &l.accepts {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

fn read_interface(r: &mut ByteReader<'_>) -> Result<Interface, LoadError> {
    r.u8("interface tag")?;
    let at = r.pos;
    let n = r.u16("interface record count")? as usize;
    if n > limits::MAX_INTERFACE {
        return Err(LoadError::Invalid { offset: at, what: format!("{n} interface records above {}", limits::MAX_INTERFACE) });
    }
    let mut i = Interface::default();
    for _ in 0..n {
        let at = r.pos;
        match r.u8("interface record kind")? {
            k @ (REC_INPORT | REC_OUTPORT) => {
                let name = r.name("port name")?;
                let port = r.u16("port")?;
                if k == REC_INPORT { &mut i.inputs } else { &mut i.outputs }.push((name, port));
            }
            k @ (REC_ARG | REC_GLOBAL) => {
                let name = r.name("variable name")?;
                let offset = r.u32("variable offset")?;
                let size = r.u32("variable size")?;
                if k == REC_ARG { &mut i.args } else { &mut i.globals }.push(Var { name, offset, size });
            }
            REC_LAYOUT => {
                if i.layout.is_some() {
                    return Err(LoadError::Invalid { offset: at, what: "layout declared twice".into() });
                }
                let name = r.name("layout name")?;
                let version = r.u32("layout version")?;
                let n = r.u16("accepted version count")? as usize;
                if n > limits::MAX_INTERFACE {
                    return Err(LoadError::Invalid { offset: at, what: format!("{n} accepted versions above {}", limits::MAX_INTERFACE) });
                }
                let accepts = (0..n).map(|_| r.u32("accepted version")).collect::<Result<_, _>>()?;
                i.layout = Some(Layout { name, version, accepts });
            }
            k => return Err(LoadError::Invalid { offset: at, what: format!("unknown interface record kind {k}") }),
        }
    }
    Ok(i)
}

/// Why a binary module cannot be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The file does not start with the NetIL magic.
    #[error("not a NetIL module (bad magic)")]
    BadMagic,
    /// A format version this loader does not read.
    #[error("unsupported module format version {major}.{minor} (this netvm reads {VERSION_MAJOR}.x)")]
    UnsupportedVersion {
        /// Major version in the module header.
        major: u16,
        /// Minor version in the module header.
        minor: u16,
    },
    /// The file ends in the middle of a field.
    #[error("module truncated at byte {offset} while reading {what}")]
    Truncated {
        /// Byte offset of the field that runs past the end of the file.
        offset: usize,
        /// The field being read.
        what: &'static str,
    },
    /// A field with a value outside its range.
    #[error("invalid module at byte {offset}: {what}")]
    Invalid {
        /// Byte offset of the field in the file.
        offset: usize,
        /// What is wrong with it.
        what: String,
    },
    /// Bytes after the last segment.
    #[error("trailing bytes after the last segment, at byte {offset}")]
    TrailingBytes {
        /// Byte offset of the first trailing byte.
        offset: usize,
    },
}

struct ByteReader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], LoadError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.b.len());
        match end {
            Some(end) => {
                let s = &self.b[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(LoadError::Truncated { offset: self.pos, what }),
        }
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, LoadError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, LoadError> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, LoadError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    fn name(&mut self, what: &'static str) -> Result<String, LoadError> {
        let at = self.pos;
        let len = self.u8(what)? as usize;
        let bytes = self.take(len, what)?;
        if len == 0 || len > limits::MAX_NAME || !is_ident(bytes) {
            return Err(LoadError::Invalid {
                offset: at,
                what: format!("{what} is not an identifier of 1..={} characters", limits::MAX_NAME),
            });
        }
        Ok(String::from_utf8(bytes.to_vec()).expect("ASCII checked"))
    }
}

/// True if `s` is an assembler identifier: ASCII letter or `_`, then letters, digits, `_`, `-`.
pub fn is_ident(s: &[u8]) -> bool {
    match s.split_first() {
        Some((f, rest)) => {
            (f.is_ascii_alphabetic() || *f == b'_') && rest.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_truncation() {
        let m = Module {
            max_stack: 8,
            locals: 2,
            info_size: 16,
            data_size: 64,
            out_ports: 3,
            copros: vec![CoproDecl { name: "c".into(), kind: "counters".into() }],
            init: Some(vec![0x52]),
            push: Some(vec![0x02, 0x51]),
            interface: Interface::default(),
        };
        let b = m.to_bytes();
        assert_eq!(Module::from_bytes(&b).unwrap(), m);
        for n in 0..b.len() {
            assert!(Module::from_bytes(&b[..n]).is_err(), "prefix {n} accepted");
        }
        let mut extra = b.clone();
        extra.push(0);
        assert!(matches!(Module::from_bytes(&extra), Err(LoadError::TrailingBytes { .. })));
    }
}
