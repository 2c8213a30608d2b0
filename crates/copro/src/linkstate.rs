//! `linkstate`: which application ports are up.
//!
//! A data path that floods (a learning bridge) must not send copies to ports
//! with no link. The runtime owns that knowledge: `netvm run` marks up the
//! input ports that have a capture or interface attached (`-r PORT=FILE`),
//! through [`Coprocessor::load`]; the control plane can do the same. Until
//! then every port is up.
//!
//! | register | meaning |
//! |----------|---------|
//! | in 0     | port number |
//! | out 0    | 1 if the port is up, else 0 |
//!
//! | op | name  | effect |
//! |----|-------|--------|
//! | 0  | query | `out0` = state of port `in0` |
//!
//! Configuration: `up`, a comma-separated list of the ports up at start
//! (default: all). Table file (`load` replaces the state, `dump` writes
//! it): the up ports, decimal, single or as ranges `A-B`, separated by
//! spaces, commas or newlines, `#` comments. Statistics: `up`, the number of ports up (65,536 when all are).
//!
//! Several workers: one state that every worker reads (`Shared`); a fork
//! has its own registers. While several handles exist the state cannot
//! change: `load` returns an error and `clear` does nothing (mark ports up
//! before the run starts, as `netvm run` does).

use std::collections::BTreeSet;
use std::sync::Arc;

use netvm_vm::{CoproConfig, CoproError, Coprocessor, DirectOp, InvokeContext, RegisterFile, WorkerShare};

/// A set of ports as a bitmap of all 65,536: a query is one load and a bit
/// test (a data path asks once per frame it sends).
#[derive(Clone)]
struct Ports {
    bits: Box<[u64; 1024]>,
    len: usize,
}

impl Ports {
    fn contains(&self, p: u16) -> bool {
        self.bits[usize::from(p >> 6)] >> (p & 63) & 1 == 1
    }

    /// The ports, ascending.
    fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..=u16::MAX).filter(|&p| self.contains(p))
    }
}

/// The ports, not the 1,024 words that hold them.
impl std::fmt::Debug for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<u16> for Ports {
    fn from_iter<I: IntoIterator<Item = u16>>(ports: I) -> Ports {
        let mut set = Ports { bits: Box::new([0; 1024]), len: 0 };
        for p in ports {
            let w = &mut set.bits[usize::from(p >> 6)];
            set.len += usize::from(*w >> (p & 63) & 1 == 0);
            *w |= 1 << (p & 63);
        }
        set
    }
}

/// The `linkstate` coprocessor.
#[derive(Debug, Default)]
pub struct LinkState {
    /// `None`: every port is up. Shared by the handles of every worker.
    up: Arc<Option<Ports>>,
    port: u32,
    state: u32,
    /// The direct entry of `is_up` for compiled code (filled by `registers`).
    direct: [DirectOp; 1],
}

/// An independent copy (not another worker's handle: see `fork`).
impl Clone for LinkState {
    fn clone(&self) -> LinkState {
        LinkState { up: Arc::new((*self.up).clone()), port: self.port, state: self.state, direct: [DirectOp::NONE] }
    }
}

impl LinkState {
    /// Every port up.
    pub fn all_up() -> LinkState {
        LinkState::default()
    }

    /// Exactly `ports` up.
    pub fn with_up(ports: impl IntoIterator<Item = u16>) -> LinkState {
        LinkState { up: Arc::new(Some(ports.into_iter().collect())), ..LinkState::default() }
    }

    /// Whether `port` is up.
    pub fn is_up(&self, port: u32) -> bool {
        match (&*self.up, u16::try_from(port)) {
            (None, Ok(_)) => true,
            (Some(set), Ok(p)) => set.contains(p),
            (_, Err(_)) => false,
        }
    }
}

/// Parses a list of ports (`1 2,3\n4 # comment`).
fn parse_ports(text: &str) -> Result<BTreeSet<u16>, String> {
    let mut set = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for w in line.split(|c: char| c == ',' || c.is_whitespace()).filter(|w| !w.is_empty()) {
            let port = |s: &str| s.parse::<u16>().map_err(|_| format!("line {}: `{w}` is not a port number (0 to 65535) or range", n + 1));
            let (a, b) = match w.split_once('-') {
                Some((a, b)) => (port(a)?, port(b)?),
                None => (port(w)?, port(w)?),
            };
            if a > b {
                return Err(format!("line {}: empty range `{w}`", n + 1));
            }
            set.extend(a..=b);
        }
    }
    Ok(set)
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) = cfg.keys().find(|k| k.as_str() != "up") {
        return Err(format!("linkstate: unknown setting `{k}` (known: up)"));
    }
    Ok(Box::new(match cfg.get("up") {
        Some(list) => LinkState::with_up(parse_ports(list).map_err(|e| format!("linkstate: up: {e}"))?),
        None => LinkState::all_up(),
    }))
}

impl Coprocessor for LinkState {
    fn kind(&self) -> &str {
        "linkstate"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        match reg {
            0 => self.port = value,
            _ => return Err(CoproError::NoRegister(reg)),
        }
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        match reg {
            0 => Ok(self.state),
            _ => Err(CoproError::NoRegister(reg)),
        }
    }

    fn registers(&mut self) -> RegisterFile {
        // is_up reads nothing but the port register.
        self.direct = [DirectOp::of::<Self, 0>(self)];
        RegisterFile::new(std::slice::from_mut(&mut self.port), 1, std::slice::from_mut(&mut self.state), 1).with_direct(&self.direct)
    }

    #[inline(always)]
    fn invoke(&mut self, op: u8, _ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        match op {
            0 => self.state = u32::from(self.is_up(self.port)),
            _ => return Err(CoproError::NoOperation(op)),
        }
        Ok(())
    }

    /// The up ports, one port or range per line.
    fn dump(&self) -> String {
        let Some(set) = &*self.up else { return "0-65535\n".into() };
        let mut out = String::new();
        let mut ports = set.iter().peekable();
        while let Some(a) = ports.next() {
            let mut b = a;
            while ports.peek().is_some_and(|&n| u32::from(n) == u32::from(b) + 1) {
                b = ports.next().unwrap_or(b);
            }
            out += &if a == b { format!("{a}\n") } else { format!("{a}-{b}\n") };
        }
        out
    }

    /// Replaces the state: exactly the listed ports are up.
    fn load(&mut self, text: &str) -> Result<usize, String> {
        let set: Ports = parse_ports(text)?.into_iter().collect();
        let n = set.len;
        let up = Arc::get_mut(&mut self.up)
            .ok_or("the port state cannot change while several workers share it; load it before the run starts")?;
        *up = Some(set);
        Ok(n)
    }

    /// Every port down (nothing while several workers share the state).
    fn clear(&mut self) {
        if let Some(up) = Arc::get_mut(&mut self.up) {
            *up = Some(Ports::from_iter([]));
        }
    }

    fn stats(&self) -> Vec<(String, u64)> {
        vec![("up".into(), self.up.as_ref().as_ref().map_or(1 << 16, |s| s.len as u64))]
    }

    /// Another handle on the same state.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(LinkState { up: Arc::clone(&self.up), port: 0, state: 0, direct: [DirectOp::NONE] }))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::Shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvm_vm::Timestamp;

    #[test]
    fn the_port_bitmap_holds_exactly_its_ports() {
        let want: BTreeSet<u16> = [0, 1, 62, 63, 64, 65, 4095, 4096, 65_534, 65_535].into();
        let set: Ports = want.iter().copied().chain([63, 0, 65_535]).collect();
        assert_eq!(set.len, want.len(), "duplicates counted once");
        assert_eq!(set.iter().collect::<BTreeSet<u16>>(), want);
        for p in 0..=u16::MAX {
            assert_eq!(set.contains(p), want.contains(&p), "port {p}");
        }
    }

    #[test]
    fn query_load_dump() {
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
        let mut l = create(&CoproConfig::new()).unwrap();
        let q = |l: &mut Box<dyn Coprocessor>, p: u32| {
            l.write(0, p).unwrap();
            l.invoke(0, &ctx).unwrap();
            l.read(0).unwrap()
        };
        assert_eq!(q(&mut l, 7), 1, "all up by default");
        assert_eq!(q(&mut l, 70_000), 0, "no such port");
        assert_eq!(l.load("1, 2\n# comment\n4").unwrap(), 3);
        assert_eq!((q(&mut l, 1), q(&mut l, 3), q(&mut l, 4)), (1, 0, 1));
        assert_eq!(l.dump(), "1-2\n4\n");
        assert_eq!(l.load("10-12 3").unwrap(), 4);
        assert_eq!(l.dump(), "3\n10-12\n");
        assert!(l.load("5-4").is_err());
        l.load("1 2 4").unwrap();
        assert_eq!(l.stats(), vec![("up".to_string(), 3)]);
        l.clear();
        assert_eq!(q(&mut l, 1), 0);
        let e = l.load("1\n2 x").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        assert!(l.write(1, 0).is_err() && l.read(1).is_err() && l.invoke(1, &ctx).is_err());
        let l = create(&CoproConfig::from([("up".to_string(), "3,5".to_string())])).unwrap();
        assert_eq!(l.dump(), "3\n5\n");
        assert!(create(&CoproConfig::from([("up".to_string(), "-1".to_string())])).is_err());
        assert!(create(&CoproConfig::from([("x".to_string(), "1".to_string())])).is_err());
    }

    #[test]
    fn forks_share_the_state_which_is_then_fixed() {
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
        let mut a = create(&CoproConfig::new()).unwrap();
        a.load("1 3").unwrap();
        let mut b = a.fork().unwrap();
        assert_eq!(b.share(), WorkerShare::Shared);
        let q = move |l: &mut Box<dyn Coprocessor>, p: u32| {
            l.write(0, p).unwrap();
            l.invoke(0, &ctx).unwrap();
            l.read(0).unwrap()
        };
        let t = std::thread::spawn(move || {
            let r = (q(&mut b, 1), q(&mut b, 2), q(&mut b, 3));
            (b, r)
        });
        let (mut b, r) = t.join().unwrap();
        assert_eq!(r, (1, 0, 1));
        assert!(a.load("2").unwrap_err().contains("several workers"));
        a.clear();
        assert_eq!((q(&mut a, 1), q(&mut b, 2)), (1, 0), "nothing changed");
        drop(b);
        assert_eq!(a.load("2").unwrap(), 1, "a sole handle changes it again");
        assert_eq!(q(&mut a, 2), 1);
    }
}
