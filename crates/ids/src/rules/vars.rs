//! Snort's standard rule variables, with the values of Snort's default
//! configuration.
//!
//! Sources:
//! - Snort 2.9 `etc/snort.conf` ("Step #1: Set the network variables"):
//!   `ipvar HOME_NET any`, `ipvar EXTERNAL_NET any`, every `*_SERVERS`
//!   `$HOME_NET`, `portvar HTTP_PORTS [80,81,311,…,55555]`,
//!   `SHELLCODE_PORTS !80`, `ORACLE_PORTS 1024:`, `SSH_PORTS 22`,
//!   `FTP_PORTS [21,2100,3535]`, `SIP_PORTS [5060,5061,5600]`,
//!   `FILE_DATA_PORTS [$HTTP_PORTS,110,143]`, `GTP_PORTS [2123,2152,3386]`,
//!   `AIM_SERVERS [64.12.24.0/23,…]`.
//! - Snort 3 `lua/snort_defaults.lua` ("default networks", "default
//!   ports"): the same servers and ports, and `MAIL_PORTS ' 110 143'`.
//! - The SCADA variables of the Digital Bond Quickdraw rules, which
//!   snort.conf setups add (`ipvar MODBUS_CLIENT $HOME_NET`, …,
//!   `portvar DNP3_PORTS 20000`).
//!
//! Values are in Snort 2 syntax (Snort 3's space-separated port strings
//! written as lists).

use std::collections::HashMap;

/// Snort 2.9 snort.conf's `HTTP_PORTS` (equal to snort_defaults.lua's).
pub const HTTP_PORTS: &str = "[80,81,311,383,591,593,901,1220,1414,1741,1830,2301,2381,2809,3037,3128,3702,4343,4848,5250,6988,7000,7001,7144,7145,7510,7777,7779,8000,8008,8014,8028,8080,8085,8088,8090,8118,8123,8180,8181,8243,8280,8300,8800,8888,8899,9000,9060,9080,9090,9091,9443,9999,11371,34443,34444,41080,50002,55555]";

/// (name, value) of every default variable.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("HOME_NET", "any"),
    ("EXTERNAL_NET", "any"),
    ("DNS_SERVERS", "$HOME_NET"),
    ("SMTP_SERVERS", "$HOME_NET"),
    ("HTTP_SERVERS", "$HOME_NET"),
    ("SQL_SERVERS", "$HOME_NET"),
    ("TELNET_SERVERS", "$HOME_NET"),
    ("SSH_SERVERS", "$HOME_NET"),
    ("FTP_SERVERS", "$HOME_NET"),
    ("SIP_SERVERS", "$HOME_NET"),
    ("HTTP_PORTS", HTTP_PORTS),
    ("SHELLCODE_PORTS", "!80"),
    ("ORACLE_PORTS", "1024:"),
    ("SSH_PORTS", "22"),
    ("FTP_PORTS", "[21,2100,3535]"),
    ("SIP_PORTS", "[5060,5061,5600]"),
    ("MAIL_PORTS", "[110,143]"),
    ("FILE_DATA_PORTS", "[$HTTP_PORTS,110,143]"),
    ("GTP_PORTS", "[2123,2152,3386]"),
    (
        "AIM_SERVERS",
        "[64.12.24.0/23,64.12.28.0/23,64.12.161.0/24,64.12.163.0/24,64.12.200.0/24,205.188.3.0/24,205.188.5.0/24,205.188.7.0/24,205.188.9.0/24,205.188.153.0/24,205.188.179.0/24,205.188.248.0/24]",
    ),
    ("MODBUS_CLIENT", "$HOME_NET"),
    ("MODBUS_SERVER", "$HOME_NET"),
    ("ENIP_CLIENT", "$HOME_NET"),
    ("ENIP_SERVER", "$HOME_NET"),
    ("DNP3_CLIENT", "$HOME_NET"),
    ("DNP3_SERVER", "$HOME_NET"),
    ("DNP3_PORTS", "20000"),
];

/// The default variables, as a map.
pub fn defaults() -> HashMap<String, String> {
    DEFAULTS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}
