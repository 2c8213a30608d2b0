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

use std::collections::BTreeSet;

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext};

/// The `linkstate` coprocessor.
#[derive(Clone, Debug, Default)]
pub struct LinkState {
    /// `None`: every port is up.
    up: Option<BTreeSet<u16>>,
    port: u32,
    state: u32,
}

impl LinkState {
    /// Every port up.
    pub fn all_up() -> LinkState {
        LinkState::default()
    }

    /// Exactly `ports` up.
    pub fn with_up(ports: impl IntoIterator<Item = u16>) -> LinkState {
        LinkState { up: Some(ports.into_iter().collect()), ..LinkState::default() }
    }

    /// Whether `port` is up.
    pub fn is_up(&self, port: u32) -> bool {
        match (&self.up, u16::try_from(port)) {
            (None, Ok(_)) => true,
            (Some(set), Ok(p)) => set.contains(&p),
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

    fn invoke(&mut self, op: u8, _ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        match op {
            0 => self.state = u32::from(self.is_up(self.port)),
            _ => return Err(CoproError::NoOperation(op)),
        }
        Ok(())
    }

    /// The up ports, one port or range per line.
    fn dump(&self) -> String {
        let Some(set) = &self.up else { return "0-65535\n".into() };
        let mut out = String::new();
        let mut ports = set.iter().copied().peekable();
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
        let set = parse_ports(text)?;
        let n = set.len();
        self.up = Some(set);
        Ok(n)
    }

    /// Every port down.
    fn clear(&mut self) {
        self.up = Some(BTreeSet::new());
    }

    fn stats(&self) -> Vec<(String, u64)> {
        vec![("up".into(), self.up.as_ref().map_or(1 << 16, |s| s.len() as u64))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvm_vm::Timestamp;

    #[test]
    fn query_load_dump() {
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default() };
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
}
