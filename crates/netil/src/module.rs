//! NetIL modules and their versioned binary format (`.nvm` files).
//!
//! A module is one NetPE's program: its declarations (stack depth, locals,
//! memory sizes, output ports, coprocessors) and up to two code segments,
//! `.init` and `.push`. The byte layout is specified in docs/netil.md,
//! section "Binary module format". [`Module::from_bytes`] reads every 1.x
//! file; [`Module::to_bytes`] writes 1.0, so for every module this version
//! wrote, `to_bytes(from_bytes(b)) == b`. `to_bytes` expects a module within
//! [`limits`] (as the loader and the assembler produce; the verifier checks
//! modules built in memory).

use std::fmt;

/// The eight magic bytes that open every binary module.
pub const MAGIC: [u8; 8] = *b"\x89NIL\r\n\x1a\n";
/// Major version of the binary format this crate reads and writes.
pub const VERSION_MAJOR: u16 = 1;
/// Minor version of the binary format this crate writes.
pub const VERSION_MINOR: u16 = 0;

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
        out.extend_from_slice(&VERSION_MINOR.to_le_bytes());
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
        if r.pos != bytes.len() {
            return Err(LoadError::TrailingBytes { offset: r.pos });
        }
        Ok(m)
    }
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
