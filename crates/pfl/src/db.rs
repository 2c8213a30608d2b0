//! The protocol database: protocols, their fields, header lengths and
//! encapsulations, named constants and names, read from TOML
//! (`crates/pfl/protocols.toml` is built in; more stanzas can be added at
//! run time with [`ProtocolDb::extend`]).

use crate::parser::{Arith, Expr};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// The link layer of the capture.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkLayer {
    /// Name of the link-layer protocol (`ether`).
    pub protocol: String,
    /// Offset of the type field that names the payload.
    pub type_offset: u32,
    /// Offset of the payload.
    pub payload_offset: u32,
    /// Type values up to this are 802.3 lengths.
    pub length_max: u32,
    /// LLC SAPs for which `ether proto N` tests both DSAP and SSAP.
    #[serde(default)]
    pub llc_pair_saps: Vec<u32>,
    /// `ether proto N` for particular `N` (decimal keys): raw expressions in
    /// the link header's terms, for encapsulations libpcap recognises
    /// besides the type field (IPX).
    #[serde(default)]
    pub rules: BTreeMap<String, String>,
}

/// A field of a protocol header.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    /// Byte offset from the start of the header.
    pub offset: u32,
    /// Bytes: 1, 2 or 4 for a number; 6 or 16 for an address.
    pub size: u32,
    /// Bits kept after loading (before the shift).
    #[serde(default)]
    pub mask: Option<u32>,
    /// Right shift after masking.
    #[serde(default)]
    pub shift: Option<u32>,
}

/// How a protocol is reached from the one below it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// The protocol below.
    pub parent: String,
    /// The value of the parent's type field (ethertype) or `next` selector.
    #[serde(default)]
    pub value: Option<u32>,
    /// A test in the parent's header, instead of its selector.
    #[serde(default)]
    pub parent_test: Option<String>,
    /// A further test in this protocol's own header.
    #[serde(default)]
    pub test: Option<String>,
    /// The test used before reading this protocol's fields (default: the selector).
    #[serde(default)]
    pub access: Option<String>,
    /// A test in the parent's header required before reading this protocol's fields.
    #[serde(default)]
    pub guard: Option<String>,
    /// Where this header starts, from the parent's start (default: the parent's `header`).
    #[serde(default)]
    pub offset: Option<String>,
    /// Whether `proto[...]` and `proto.field` read through this link.
    #[serde(default = "yes")]
    pub fields: bool,
}

fn yes() -> bool {
    true
}

/// Which fields hold a protocol's source and destination addresses.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Addresses {
    /// `mac`, `ipv4` or `ipv6`.
    pub family: String,
    /// Source address field.
    pub src: String,
    /// Destination address field.
    pub dst: String,
}

/// Which fields hold a protocol's ports.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ports {
    /// Source port field.
    pub src: String,
    /// Destination port field.
    pub dst: String,
}

/// One protocol.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// How it is reached, tried in order.
    #[serde(default)]
    pub over: Vec<Link>,
    /// Header length (raw expression), the default offset of what it carries.
    #[serde(default)]
    pub header: Option<String>,
    /// Selector of the protocol it carries (raw expression with `$v`).
    #[serde(default)]
    pub next: Option<String>,
    /// A shim header (vlan, mpls) of this many bytes: later offsets shift.
    #[serde(default)]
    pub shim: Option<u32>,
    /// The test of `proto N` for a shim (raw expression with `$v`).
    #[serde(default)]
    pub id: Option<String>,
    /// The largest id.
    #[serde(default)]
    pub id_max: Option<u32>,
    /// Address fields for `host` and `net`.
    #[serde(default)]
    pub addresses: Option<Addresses>,
    /// Port fields for `port` and `portrange`.
    #[serde(default)]
    pub ports: Option<Ports>,
    /// `proto broadcast` (raw expression).
    #[serde(default)]
    pub broadcast: Option<String>,
    /// `proto multicast` (raw expression).
    #[serde(default)]
    pub multicast: Option<String>,
    /// Named fields.
    #[serde(default)]
    pub fields: BTreeMap<String, Field>,
}

/// A named port.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Port number.
    pub port: u32,
    /// Transport protocols it is defined for.
    pub protocols: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Names {
    #[serde(default)]
    ethertype: BTreeMap<String, u32>,
    #[serde(default)]
    ipproto: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    link: Option<LinkLayer>,
    #[serde(default)]
    constants: BTreeMap<String, u32>,
    #[serde(default)]
    names: Names,
    #[serde(default)]
    services: BTreeMap<String, Service>,
    #[serde(default)]
    protocol: BTreeMap<String, Protocol>,
}

/// Database expressions already parsed (they are parsed once per database, not per use).
#[derive(Debug, Default)]
pub(crate) struct ParsedCache {
    pub(crate) preds: Mutex<HashMap<String, Expr>>,
    pub(crate) values: Mutex<HashMap<String, Arith>>,
}

impl Clone for ParsedCache {
    fn clone(&self) -> Self {
        ParsedCache::default()
    }
}

/// The protocol database.
#[derive(Debug, Clone)]
pub struct ProtocolDb {
    /// The link layer.
    pub link: LinkLayer,
    /// Named constants.
    pub constants: BTreeMap<String, u32>,
    /// Ethertype names.
    pub ethertypes: BTreeMap<String, u32>,
    /// IP protocol names.
    pub ipprotos: BTreeMap<String, u32>,
    /// Port names.
    pub services: BTreeMap<String, Service>,
    /// Protocols by name, in the order they were declared.
    pub protocols: Vec<(String, Protocol)>,
    pub(crate) parsed: ParsedCache,
}

/// The built-in database, `crates/pfl/protocols.toml`.
pub const BUILTIN: &str = include_str!("../protocols.toml");

impl ProtocolDb {
    /// The built-in database.
    pub fn builtin() -> ProtocolDb {
        ProtocolDb::from_toml(BUILTIN).expect("the built-in protocol database is valid")
    }

    /// A database from TOML text.
    pub fn from_toml(text: &str) -> Result<ProtocolDb, String> {
        let f = parse_file(text)?;
        let link = f.link.clone().ok_or("the database has no [link] section")?;
        let mut db = ProtocolDb {
            link,
            constants: BTreeMap::new(),
            ethertypes: BTreeMap::new(),
            ipprotos: BTreeMap::new(),
            services: BTreeMap::new(),
            protocols: Vec::new(),
            parsed: ParsedCache::default(),
        };
        db.merge(f, text)?;
        Ok(db)
    }

    /// Adds the stanzas of `text` (protocols, constants, names); a protocol
    /// of the same name is replaced.
    pub fn extend(&mut self, text: &str) -> Result<(), String> {
        let f = parse_file(text)?;
        if let Some(l) = f.link.clone() {
            self.link = l;
        }
        self.merge(f, text)
    }

    fn merge(&mut self, f: File, text: &str) -> Result<(), String> {
        self.parsed = ParsedCache::default();
        self.constants.extend(f.constants);
        self.ethertypes.extend(f.names.ethertype);
        self.ipprotos.extend(f.names.ipproto);
        self.services.extend(f.services);
        // Keep the file's order of stanzas: it is the order of alternatives.
        let mut order: Vec<(usize, String)> =
            f.protocol.keys().map(|k| (text.find(&format!("[protocol.{k}]")).unwrap_or(usize::MAX), k.clone())).collect();
        order.sort();
        let mut protos = f.protocol;
        for (_, name) in order {
            let p = protos.remove(&name).unwrap();
            if let Some(slot) = self.protocols.iter_mut().find(|(n, _)| *n == name) {
                slot.1 = p;
            } else {
                self.protocols.push((name, p));
            }
        }
        self.check()
    }

    fn check(&self) -> Result<(), String> {
        if self.protocol(&self.link.protocol).is_none() {
            return Err(format!("the link protocol `{}` has no stanza", self.link.protocol));
        }
        for (name, p) in &self.protocols {
            for l in &p.over {
                if self.protocol(&l.parent).is_none() {
                    return Err(format!("protocol `{name}` is over `{}`, which has no stanza", l.parent));
                }
                if l.value.is_none() && l.parent_test.is_none() && l.test.is_none() {
                    return Err(format!("protocol `{name}` over `{}`: give a value or a test", l.parent));
                }
            }
            for (fname, f) in &p.fields {
                if !matches!(f.size, 1 | 2 | 4 | 6 | 16) {
                    return Err(format!("field {name}.{fname}: size must be 1, 2, 4, 6 or 16"));
                }
            }
            if *name != self.link.protocol && p.over.is_empty() {
                return Err(format!("protocol `{name}` says nothing of how it is reached (`over`)"));
            }
        }
        Ok(())
    }

    /// A protocol by name.
    pub fn protocol(&self, name: &str) -> Option<&Protocol> {
        self.protocols.iter().find(|(n, _)| n == name).map(|(_, p)| p)
    }
}

fn parse_file(text: &str) -> Result<File, String> {
    toml::from_str(text).map_err(|e| format!("protocol database: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_loads() {
        let db = super::ProtocolDb::builtin();
        assert!(db.protocol("tcp").unwrap().ports.is_some());
        assert_eq!(db.constants["tcp-syn"], 2);
        assert_eq!(db.protocols[0].0, "ether");
    }
}
