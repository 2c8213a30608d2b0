//! The control socket: a Unix domain socket over which `netvm ctl` (or any
//! client) drives a running application's [`Control`].
//!
//! The protocol is one JSON object per line each way: a request
//! `{"cmd": "...", ...}`, then its reply, `{"ok": true, ...}` or
//! `{"ok": false, "error": "..."}`; a connection may send several requests
//! in turn. The commands and their fields are documented in
//! docs/applications.md ("Changing a running application").
//!
//! Access: the socket file is created with mode 0600 (only its owner may
//! connect), and every connection's peer is checked (`SO_PEERCRED`): a
//! process of another user than the server's (root aside) is refused.
//! Nothing listens on the network unless asked: [`ControlServer::start_tcp`]
//! listens on a TCP port of the loopback interface only, and serves a
//! connection only if the kernel's socket table names this user (or root)
//! as the owner of its other end. A request line is at most
//! [`MAX_REQUEST`] bytes; a client that sends nothing for
//! [`IDLE_TIMEOUT`] is disconnected.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::live::{Change, Control, ControlError, Installed, Listing, ProgramRef};
use crate::stats::AppStats;
use crate::Manifest;

/// The longest request line accepted.
pub const MAX_REQUEST: usize = 1 << 20;
/// How long a connection may stay silent.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest table file `table-load` reads.
pub const MAX_TABLE_FILE: u64 = 1 << 30;
/// How long a change's reply waits for the first batch on the new version.
const WAIT_RUNNING: Duration = Duration::from_secs(2);

/// Where a [`ControlServer`] listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket file.
    Unix(PathBuf),
    /// A TCP port on the loopback interface.
    Tcp(SocketAddr),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "{a}"),
        }
    }
}

impl Endpoint {
    /// What `netvm ctl` names: `HOST:PORT` (an IP address, or `localhost`)
    /// is a TCP endpoint, anything else a socket file.
    pub fn parse(s: &str) -> Endpoint {
        let tcp = s.parse::<SocketAddr>().ok().or_else(|| {
            s.strip_prefix("localhost:").and_then(|p| p.parse::<u16>().ok()).map(|p| SocketAddr::from((Ipv4Addr::LOCALHOST, p)))
        });
        match tcp {
            Some(a) => Endpoint::Tcp(a),
            None => Endpoint::Unix(PathBuf::from(s)),
        }
    }
}

/// A control socket being served (on a thread of its own); dropping it
/// stops the server and removes the socket file.
#[derive(Debug)]
pub struct ControlServer {
    endpoint: Endpoint,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    /// Creates the socket at `path` (mode 0600; an existing socket file
    /// there is replaced only if nothing answers on it) and serves
    /// `control` on it.
    pub fn start(path: &Path, control: Control) -> Result<ControlServer, String> {
        let what = |e: std::io::Error| format!("control socket {}: {e}", path.display());
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(format!("control socket {}: another process serves it", path.display()));
            }
            std::fs::remove_file(path).map_err(what)?;
        }
        // The socket is created with the mode the umask leaves: none for
        // group and others (set around the bind, so the file never exists
        // with wider access).
        // SAFETY: umask only changes the process's file-creation mask.
        let old = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(path);
        // SAFETY: as above, restoring the previous mask.
        unsafe { libc::umask(old) };
        let listener = bound.map_err(what)?;
        ControlServer::spawn(
            Endpoint::Unix(path.to_path_buf()),
            move |control, stop| {
                for conn in listener.incoming() {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    // One client at a time: control requests are applied in turn anyway.
                    let _ = handle_unix(conn, &control, stop);
                }
            },
            control,
        )
    }

    /// Listens on TCP port `port` of the loopback interface (127.0.0.1;
    /// 0 for a port the system picks, see [`ControlServer::endpoint`]) and
    /// serves `control` there. Nothing off this machine can connect, and a
    /// connection is served only if the process at its other end belongs
    /// to the user running netvm (or root): the owner of its socket, as the
    /// kernel lists it in /proc/net/tcp.
    pub fn start_tcp(port: u16, control: Control) -> Result<ControlServer, String> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map_err(|e| format!("control port 127.0.0.1:{port}: {e}"))?;
        let local = listener.local_addr().map_err(|e| format!("control port: {e}"))?;
        ControlServer::spawn(
            Endpoint::Tcp(local),
            move |control, stop| {
                for conn in listener.incoming() {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let _ = handle_tcp(conn, local, &control, stop);
                }
            },
            control,
        )
    }

    fn spawn(
        endpoint: Endpoint,
        serve: impl FnOnce(Control, &AtomicBool) + Send + 'static,
        control: Control,
    ) -> Result<ControlServer, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("netvm-control".into())
                .spawn(move || serve(control, &stop))
                .map_err(|e| format!("control socket: cannot start its thread: {e}"))?
        };
        Ok(ControlServer { endpoint, stop, thread: Some(thread) })
    }

    /// Where it listens.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept.
        match &self.endpoint {
            Endpoint::Unix(p) => drop(UnixStream::connect(p)),
            Endpoint::Tcp(a) => drop(TcpStream::connect_timeout(a, Duration::from_secs(1))),
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Endpoint::Unix(p) = &self.endpoint {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The user id of the process at the other end of `s`.
fn peer_uid(s: &UnixStream) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a ucred
    // of that size, for the socket descriptor `s` keeps open.
    let r = unsafe { libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &raw mut len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// The user id owning the TCP socket at `peer` connected to `local` on
/// this machine, from the kernel's table of IPv4 TCP sockets
/// (/proc/net/tcp: addresses as hexadecimal `ADDR:PORT`, the address in
/// the host's byte order; the uid in the eighth column).
fn tcp_owner(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let hex = |a: SocketAddr| -> Option<String> {
        let SocketAddr::V4(v4) = a else { return None };
        Some(format!("{:08X}:{:04X}", u32::from_ne_bytes(v4.ip().octets()), v4.port()))
    };
    let (want_local, want_remote) = (hex(peer)?, hex(local)?);
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 7 && f[1] == want_local && f[2] == want_remote).then(|| f[7].parse().ok()).flatten()
    })
}

/// Refuses a peer of another user than this process's (root aside): the reply to send, if refused.
fn refusal(peer: Option<u32>) -> Option<Value> {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    match peer {
        Some(p) if p == me || p == 0 => None,
        Some(p) => Some(json!({"ok": false, "error": format!("user {p} may not control this application (its owner is user {me})")})),
        None => Some(json!({"ok": false, "error": "the connecting process's user could not be told: refused"})),
    }
}

/// How long a refused connection's request is read (and dropped) after
/// the refusal: closing with unread bytes would reset the connection, and
/// a reset can discard the refusal before the client reads it.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(200);

/// Reads what a refused Unix-socket client still sends (at most one
/// request, for at most [`DRAIN_TIMEOUT`]) and drops it.
fn drain(conn: UnixStream) -> std::io::Result<()> {
    conn.set_read_timeout(Some(DRAIN_TIMEOUT))?;
    let _ = std::io::copy(&mut (&conn).take(MAX_REQUEST as u64), &mut std::io::sink());
    Ok(())
}

fn handle_unix(conn: UnixStream, control: &Control, stop: &AtomicBool) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    if let Some(reply) = refusal(peer_uid(&conn).ok()) {
        writeln!(out, "{reply}")?;
        out.shutdown(std::net::Shutdown::Write)?;
        return drain(conn);
    }
    conn.set_read_timeout(Some(IDLE_TIMEOUT))?;
    session(BufReader::new(conn), out, control, stop)
}

fn handle_tcp(conn: TcpStream, local: SocketAddr, control: &Control, stop: &AtomicBool) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    let peer = conn.peer_addr()?;
    let owner = if peer.ip().is_loopback() { tcp_owner(peer, local) } else { None };
    if let Some(reply) = refusal(owner) {
        writeln!(out, "{reply}")?;
        out.shutdown(std::net::Shutdown::Write)?;
        conn.set_read_timeout(Some(DRAIN_TIMEOUT))?;
        let _ = std::io::copy(&mut (&conn).take(MAX_REQUEST as u64), &mut std::io::sink());
        return Ok(());
    }
    conn.set_read_timeout(Some(IDLE_TIMEOUT))?;
    session(BufReader::new(conn), out, control, stop)
}

/// Answers request lines from `input` on `out` until the client closes,
/// goes silent, or the server stops.
fn session(mut input: impl BufRead, mut out: impl Write, control: &Control, stop: &AtomicBool) -> std::io::Result<()> {
    let mut line = Vec::new();
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(());
        }
        line.clear();
        let n = (&mut input).take(MAX_REQUEST as u64 + 1).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.len() > MAX_REQUEST {
            writeln!(out, "{}", json!({"ok": false, "error": format!("request longer than {MAX_REQUEST} bytes")}))?;
            return Ok(());
        }
        writeln!(out, "{}", answer_line(control, &line))?;
    }
}

/// The reply to one request line (what the server sends back for it):
/// `{"ok": true, ...}` or `{"ok": false, "error": "..."}`.
pub fn answer_line(control: &Control, line: &[u8]) -> Value {
    let reply = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(req)) => answer(control, &req),
        Ok(_) => Err("a request is a JSON object".to_string()),
        Err(e) => Err(format!("not JSON: {e}")),
    };
    match reply {
        Ok(Value::Object(mut m)) => {
            m.insert("ok".into(), Value::Bool(true));
            Value::Object(m)
        }
        Ok(v) => json!({"ok": true, "result": v}),
        Err(e) => json!({"ok": false, "error": e}),
    }
}

fn field<'a>(req: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    req.get(key).and_then(Value::as_str).ok_or_else(|| format!("missing string field `{key}`"))
}

fn program(req: &Map<String, Value>) -> Result<ProgramRef, String> {
    match (req.get("program").and_then(Value::as_str), req.get("module").and_then(Value::as_str)) {
        (Some(p), None) => Ok(ProgramRef::File(PathBuf::from(p))),
        (None, Some(m)) => Ok(ProgramRef::Module(m.to_string())),
        _ => Err("give exactly one of `program` (a file) and `module` (a loaded module's name)".into()),
    }
}

/// A JSON object as a TOML table (a manifest's `copro` or `args`).
fn toml_table(v: Option<&Value>, what: &str) -> Result<toml::Table, String> {
    match v {
        None => Ok(toml::Table::new()),
        Some(v) => {
            let t: toml::Value = serde_json::from_value(v.clone()).map_err(|e| format!("`{what}`: {e}"))?;
            match t {
                toml::Value::Table(t) => Ok(t),
                _ => Err(format!("`{what}` must be an object")),
            }
        }
    }
}

fn answer(control: &Control, req: &Map<String, Value>) -> Result<Value, String> {
    let err = |e: ControlError| e.to_string();
    let cmd = field(req, "cmd")?;
    let change = |c: Change| -> Result<Value, String> {
        let installed = control.apply(c).map_err(err)?;
        let running = control.wait_running(installed.first, WAIT_RUNNING);
        Ok(installed_json(&installed, running))
    };
    match cmd {
        "list" => Ok(listing_json(&control.list().map_err(err)?)),
        "stats" => {
            let mut reply = json!({"stats": stats_json(&control.stats().map_err(err)?)});
            let dps = control.datapath_stats().map_err(err)?;
            if !dps.is_empty() {
                reply["datapaths"] = datapaths_json(&dps);
            }
            Ok(reply)
        }
        "load-module" => {
            control.load_module(field(req, "name")?, Path::new(field(req, "path")?)).map_err(err)?;
            Ok(json!({}))
        }
        "add" => {
            let copro: std::collections::BTreeMap<String, std::collections::BTreeMap<String, toml::Value>> =
                toml_table(req.get("copro"), "copro")?
                    .into_iter()
                    .map(|(k, v)| match v {
                        toml::Value::Table(t) => Ok((k, t.into_iter().collect())),
                        _ => Err(format!("`copro.{k}` must be an object")),
                    })
                    .collect::<Result<_, _>>()?;
            let args = toml_table(req.get("args"), "args")?.into_iter().collect();
            change(Change::AddNetPe { name: field(req, "name")?.to_string(), program: program(req)?, copro, args })
        }
        "remove" => change(Change::RemoveNetPe { name: field(req, "name")?.to_string() }),
        "connect" => change(Change::Connect { from: field(req, "from")?.to_string(), to: field(req, "to")?.to_string() }),
        "disconnect" => change(Change::Disconnect { from: field(req, "from")?.to_string(), to: field(req, "to")?.to_string() }),
        "replace" => change(Change::Replace { name: field(req, "name")?.to_string(), program: program(req)? }),
        "replace-app" => {
            let manifest = Manifest::load(Path::new(field(req, "manifest")?)).map_err(|e| e.to_string())?;
            change(Change::ReplaceApp { manifest })
        }
        "add-datapath" => {
            let port = |k: &str| -> Result<Option<u16>, String> {
                req.get(k).map(|v| v.as_u64().and_then(|p| u16::try_from(p).ok()).ok_or(format!("`{k}` must be a port number"))).transpose()
            };
            let spec = crate::datapath::DataPathSpec {
                name: field(req, "name")?.to_string(),
                manifest: PathBuf::from(field(req, "manifest")?),
                inport: port("inport")?,
                select: port("select")?,
                outport: port("outport")?.unwrap_or(0),
                admission: None,
                placed: crate::datapath::Placed::default(),
            };
            change(Change::AddDataPath { spec })
        }
        "remove-datapath" => change(Change::RemoveDataPath { name: field(req, "name")?.to_string() }),
        "replace-datapath" => {
            change(Change::ReplaceDataPath { name: field(req, "name")?.to_string(), manifest: PathBuf::from(field(req, "manifest")?) })
        }
        "table-load" => {
            let text = match (req.get("file").and_then(Value::as_str), req.get("text").and_then(Value::as_str)) {
                (Some(f), None) => read_bounded(Path::new(f), MAX_TABLE_FILE)?,
                (None, Some(t)) => t.to_string(),
                _ => return Err("give exactly one of `file` and `text`".into()),
            };
            let n = control.table_load(field(req, "instance")?, &text).map_err(err)?;
            Ok(json!({"entries": n}))
        }
        "table-dump" => Ok(json!({"table": control.table_dump(field(req, "instance")?).map_err(err)?})),
        "table-clear" => {
            control.table_clear(field(req, "instance")?).map_err(err)?;
            Ok(json!({}))
        }
        "global-get" => Ok(json!({"values": control.global_get(field(req, "netpe")?, field(req, "var")?).map_err(err)?})),
        "global-set" => {
            let value = req.get("value").and_then(Value::as_i64).ok_or("missing integer field `value`")?;
            control.global_set(field(req, "netpe")?, field(req, "var")?, value).map_err(err)?;
            Ok(json!({}))
        }
        other => Err(format!(
            "unknown command `{other}` (list, stats, load-module, add, remove, connect, disconnect, replace, replace-app, \
             add-datapath, remove-datapath, replace-datapath, table-load, table-dump, table-clear, global-get, global-set)"
        )),
    }
}

/// A text file of at most `max` bytes (a device or a pipe included).
fn read_bounded(path: &Path, max: u64) -> Result<String, String> {
    let what = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut bytes = Vec::new();
    std::fs::File::open(path).map_err(what)?.take(max + 1).read_to_end(&mut bytes).map_err(what)?;
    if bytes.len() as u64 > max {
        return Err(format!("{}: larger than {max} bytes", path.display()));
    }
    String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))
}

fn installed_json(i: &Installed, running: Option<Duration>) -> Value {
    json!({
        "epoch": i.epoch,
        "first_epoch": i.first,
        "netpes": i.netpes,
        "build_us": i.build.as_micros() as u64,
        "first_batch_us": running.map(|d| d.as_micros() as u64),
        "compiled_us": i.compiled.as_ref().and_then(|c| c.as_ref().ok()).map(|d| d.as_micros() as u64),
        "compile_error": i.compiled.as_ref().and_then(|c| c.as_ref().err()),
        "data_carried": i.data_carried,
        "copros_carried": i.copros_carried,
    })
}

/// Counters as `netvm run --stats json` names them.
pub fn stats_json(s: &AppStats) -> Value {
    let netpes: Vec<Value> = s
        .netpes
        .iter()
        .map(|n| {
            json!({
                "name": n.name,
                "packets_in": n.flow.packets_in,
                "packets_out": n.flow.packets_out,
                "dropped": n.flow.dropped,
                "unconnected": n.flow.unconnected,
                "faults": n.flow.faults.total(),
                "budget_used": n.flow.budget_used,
            })
        })
        .collect();
    let ports: Map<String, Value> = s.ports.iter().map(|(p, n)| (p.to_string(), json!(n))).collect();
    json!({
        "packets": s.packets,
        "ports": ports,
        "dropped": s.dropped,
        "faults": s.total_faults(),
        "netpes": netpes,
    })
}

/// Each data path's counters ([`crate::datapath::stats`]), as `netvm ctl`
/// and `netvm run --stats json` print them.
pub fn datapaths_json(dps: &[crate::datapath::DataPathStats]) -> Value {
    dps.iter()
        .map(|d| {
            let ports: Map<String, Value> = d.ports.iter().map(|(p, n)| (p.to_string(), json!(n))).collect();
            json!({
                "name": d.name,
                "select": d.selector,
                "netpes": d.netpes,
                "packets": d.packets,
                "ports": ports,
                "dropped": d.dropped,
                "faults": d.faults,
            })
        })
        .collect()
}

fn listing_json(l: &Listing) -> Value {
    let netpes: Vec<Value> = l
        .netpes
        .iter()
        .map(|n| {
            let counters = l.stats.netpes.iter().find(|c| c.name == n.name);
            json!({
                "name": n.name,
                "program": n.program,
                "out_ports": n.out_ports,
                "copros": n.copros.iter().map(|(name, kind)| json!({"name": name, "kind": kind})).collect::<Vec<_>>(),
                "packets_in": counters.map_or(0, |c| c.flow.packets_in.iter().sum::<u64>()),
                "packets_out": counters.map(|c| c.flow.packets_out.clone()).unwrap_or_default(),
                "dropped": counters.map_or(0, |c| c.flow.dropped + c.flow.unconnected),
                "faults": counters.map_or(0, |c| c.flow.faults.total()),
            })
        })
        .collect();
    let pairs = |v: &[(String, String)]| v.iter().map(|(f, t)| json!({"from": f, "to": t})).collect::<Vec<_>>();
    json!({
        "name": l.name,
        "epoch": l.epoch,
        "workers": l.workers,
        "netpes": netpes,
        "connections": pairs(&l.connections),
        "sources": pairs(&l.sources),
        "sinks": pairs(&l.sinks),
        "stats": stats_json(&l.stats),
        "datapaths": datapaths_json(&l.datapaths),
    })
}

/// Sends one request to the control socket at `path` and returns the reply
/// (what `netvm ctl` does).
pub fn request(path: &Path, req: &Value) -> Result<Value, String> {
    request_to(&Endpoint::Unix(path.to_path_buf()), req)
}

/// Sends one request to a control socket or port and returns the reply.
pub fn request_to(to: &Endpoint, req: &Value) -> Result<Value, String> {
    let what = |e: std::io::Error| format!("control socket {to}: {e}");
    let timeout = Some(Duration::from_secs(120));
    let (mut w, r): (Box<dyn Write>, Box<dyn Read>) = match to {
        Endpoint::Unix(p) => {
            let s = UnixStream::connect(p).map_err(what)?;
            s.set_read_timeout(timeout).map_err(what)?;
            (Box::new(s.try_clone().map_err(what)?), Box::new(s))
        }
        Endpoint::Tcp(a) => {
            let s = TcpStream::connect(a).map_err(what)?;
            s.set_read_timeout(timeout).map_err(what)?;
            (Box::new(s.try_clone().map_err(what)?), Box::new(s))
        }
    };
    writeln!(w, "{req}").map_err(what)?;
    let mut line = String::new();
    BufReader::new(r).take(64 << 20).read_line(&mut line).map_err(what)?;
    serde_json::from_str(&line).map_err(|e| format!("control socket {to}: a reply that is not JSON ({e})"))
}
