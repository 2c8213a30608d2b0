//! `env`: the environment variables a capsule may read (WASP §3.1, SNAP's
//! core services): what the node tells the code about itself, set by the
//! operator, and what it knows of the packet, set per capsule by the node.
//! Read-only to the code: output registers only, no operation.
//!
//! | output | meaning |
//! |---|---|
//! | 0 | the node's IPv4 address |
//! | 1 … 4 | the node's IPv6 address, four big-endian words |
//! | 5 | the interface the packet came in on |
//! | 6 | congestion hint of the output queue: 0 (none) to 3 (heavy) |
//! | 7 | output queue depth, packets |
//! | 8 | interface speed, Mb/s |
//! | 9 | the packet's arrival time, milliseconds since the epoch (low 32 bits) |
//! | 10 | hops the capsule may still run on (after this node) |
//! | 11 | number of output queues (at most 8) |
//! | 12 | operation 0 (`queue`): the congestion status (0 to 3) of the queue input register 0 names (0 past the last) |
//!
//! Input register 0 is a queue index; operation 0 reads that queue's
//! status into output 12 (SNAP's `GETCS`, with output 11 its `GETNQ`).

use std::net::{Ipv4Addr, Ipv6Addr};

use netvm_vm::{CoproError, Coprocessor, InvokeContext, RegisterFile, Timestamp, UntrustedRun};

/// Output registers.
pub const REGISTERS: usize = 13;
/// Most output queues an environment describes.
pub const MAX_QUEUES: usize = 8;

/// What the operator sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvConfig {
    /// The node's IPv4 address.
    pub ipv4: Ipv4Addr,
    /// The node's IPv6 address.
    pub ipv6: Ipv6Addr,
    /// Congestion hint, 0 to 3.
    pub congestion: u8,
    /// Output queue depth in packets.
    pub queue_depth: u32,
    /// Interface speed, Mb/s.
    pub speed_mbps: u32,
    /// Congestion status (0 to 3) of each output queue (at most [`MAX_QUEUES`]).
    pub queues: [u8; MAX_QUEUES],
    /// How many of `queues` exist.
    pub nqueues: u8,
}

impl Default for EnvConfig {
    fn default() -> EnvConfig {
        EnvConfig {
            ipv4: Ipv4Addr::UNSPECIFIED,
            ipv6: Ipv6Addr::UNSPECIFIED,
            congestion: 0,
            queue_depth: 0,
            speed_mbps: 1000,
            queues: [0; MAX_QUEUES],
            nqueues: 1,
        }
    }
}

/// The `env` coprocessor.
#[derive(Clone, Debug, Default)]
pub struct Env {
    out: [u32; REGISTERS],
    queue: u32,
    queues: [u8; MAX_QUEUES],
}

impl Env {
    /// The environment of a node configured with `cfg`.
    pub fn new(cfg: &EnvConfig) -> Env {
        let mut e = Env::default();
        e.configure(cfg);
        e
    }

    /// Sets what the operator decides.
    pub fn configure(&mut self, cfg: &EnvConfig) {
        self.out[0] = u32::from(cfg.ipv4);
        for (w, c) in self.out[1..5].iter_mut().zip(cfg.ipv6.octets().chunks_exact(4)) {
            *w = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        self.out[6] = u32::from(cfg.congestion.min(3));
        self.out[7] = cfg.queue_depth;
        self.out[8] = cfg.speed_mbps;
        self.out[11] = u32::from(cfg.nqueues).min(MAX_QUEUES as u32);
        self.queues = cfg.queues.map(|q| q.min(3));
    }

    /// Sets what the node knows of the packet about to run.
    pub fn set_packet(&mut self, interface: u16, ts: Timestamp, hops_left: u8) {
        self.out[5] = u32::from(interface);
        self.out[9] = (ts.sec.wrapping_mul(1000).wrapping_add(u64::from(ts.nsec / 1_000_000))) as u32;
        self.out[10] = u32::from(hops_left);
    }

    /// The value of output register `r`.
    pub fn get(&self, r: usize) -> Option<u32> {
        self.out.get(r).copied()
    }
}

impl Coprocessor for Env {
    fn kind(&self) -> &str {
        "env"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        match reg {
            0 => self.queue = value,
            _ => return Err(CoproError::NoRegister(reg)),
        }
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.get(usize::from(reg)).ok_or(CoproError::NoRegister(reg))
    }

    fn invoke(&mut self, op: u8, _ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        match op {
            0 => {
                let q = self.queue as usize;
                self.out[12] = if q < self.out[11] as usize { u32::from(self.queues[q]) } else { 0 };
                Ok(())
            }
            _ => Err(CoproError::NoOperation(op)),
        }
    }

    fn registers(&mut self) -> RegisterFile {
        RegisterFile::new(std::slice::from_mut(&mut self.queue), 1, &mut self.out, u32::MAX)
    }

    /// The packet's interface, time and hops left.
    fn begin_untrusted(&mut self, run: &UntrustedRun) {
        self.set_packet(run.interface, run.ts, run.hops_left);
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_hold_the_environment() {
        let cfg = EnvConfig {
            ipv4: Ipv4Addr::new(10, 0, 0, 1),
            ipv6: "2001:db8::1".parse().unwrap(),
            congestion: 9,
            queue_depth: 17,
            speed_mbps: 10_000,
            queues: [0, 2, 9, 0, 0, 0, 0, 3],
            nqueues: 3,
        };
        let mut e = Env::new(&cfg);
        e.set_packet(3, Timestamp { sec: 2, nsec: 5_000_000 }, 4);
        let regs: Vec<u32> = (0..REGISTERS as u8).map(|r| e.read(r).unwrap()).collect();
        assert_eq!(regs, vec![0x0a00_0001, 0x2001_0db8, 0, 0, 1, 3, 3, 17, 10_000, 2005, 4, 3, 0]);
        assert!(e.read(13).is_err() && e.write(1, 1).is_err());
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
        let status = |e: &mut Env, q: u32| {
            e.write(0, q).unwrap();
            e.invoke(0, &ctx).unwrap();
            e.read(12).unwrap()
        };
        assert_eq!((status(&mut e, 1), status(&mut e, 2), status(&mut e, 7), status(&mut e, 99)), (2, 3, 0, 0));
        assert!(e.invoke(1, &ctx).is_err());
    }
}
