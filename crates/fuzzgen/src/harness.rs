//! Running a program on packets with any engine and recording everything the
//! program can observably do, so that runs can be compared: the same engine
//! twice (determinism) or two engines (differential testing against the
//! reference interpreter).

use netil::Module;
use netvm_vm::{ExchangeBuffer, Limits, Outcome, Packet, PeCode};

use crate::new_state;

/// What one `.push` invocation did, as far as a program's effects can be seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// How the handler ended.
    pub outcome: Outcome,
    /// The packet bytes afterwards (stores may have changed them).
    pub packet: Vec<u8>,
    /// The info memory afterwards.
    pub info: Vec<u8>,
    /// The NetPE's data memory afterwards (it persists across packets).
    pub data: Vec<u8>,
    /// Each coprocessor's state dump afterwards.
    pub copros: Vec<String>,
}

/// Runs `code` (prepared from `module` by some engine) the way the runtime
/// does for one NetPE: a fresh state ([`new_state`]), `.init` once, then
/// `.push` on every packet in order, each in a fresh exchange buffer with
/// zeroed info memory, arriving on NetPE input port `packet.in_port`.
///
/// Returns the outcome of `.init` ([`Outcome::Exit`] when there is none) and
/// one observation per packet; when `.init` does not exit, no packet is run
/// (the application would not start).
pub fn observe(code: &dyn PeCode, module: &Module, packets: &[Packet], limits: &Limits) -> (Outcome, Vec<Observation>) {
    let mut state = new_state(module);
    let init = code.init(&mut state, limits);
    if init != Outcome::Exit {
        return (init, Vec::new());
    }
    let obs = packets
        .iter()
        .map(|p| {
            let mut xb = ExchangeBuffer::new(p.clone(), module.info_size as usize);
            let outcome = code.push(&mut state, &mut xb.view(), p.in_port, limits);
            Observation {
                outcome,
                packet: xb.packet.data,
                info: xb.info,
                data: state.data.clone(),
                copros: state.copros.iter().map(|c| c.dump()).collect(),
            }
        })
        .collect();
    (init, obs)
}
