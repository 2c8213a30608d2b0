//! `netvm ctl`: argument parsing over the control socket's protocol
//! (`netvm_runtime::socket`): one request, its reply on stdout.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use crate::{EXIT_ERROR, EXIT_USAGE};

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The control socket (`netvm run --control PATH`), or `127.0.0.1:PORT`
    /// (`netvm run --control-tcp PORT`).
    socket: String,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Subcommand, Debug)]
enum CtlCommand {
    /// The data path (NetPEs, connections, sources, sinks) with its counters, as JSON.
    List,
    /// The application's counters, as JSON.
    Stats,
    /// Read and verify a program, kept under NAME for `add` and `replace` (`module:NAME`).
    LoadModule {
        /// The name to keep it under.
        name: String,
        /// The program (.nil or .nvm).
        file: PathBuf,
    },
    /// Add a NetPE (connected to nothing yet).
    Add {
        /// Its name.
        netpe: String,
        /// Its program: a file, or `module:NAME` for a loaded module.
        program: String,
        /// A coprocessor setting, `INSTANCE.KEY=VALUE` (as the manifest's `copro`).
        #[arg(long = "copro", value_name = "INSTANCE.KEY=VALUE")]
        copro: Vec<String>,
        /// An input argument, `NAME=INTEGER` (as the manifest's `args`).
        #[arg(long = "arg", value_name = "NAME=INTEGER")]
        args: Vec<String>,
    },
    /// Remove a NetPE and every connection, source and sink that touches it.
    Remove {
        /// The NetPE.
        netpe: String,
    },
    /// Connect `NETPE.PORT` (or `in:PORT`) to `NETPE[.PORT]` (or `out:PORT`); ports may be the names a program gives them.
    Connect {
        /// `NETPE.PORT` or `in:PORT`.
        from: String,
        /// `NETPE[.PORT]` or `out:PORT`.
        to: String,
    },
    /// Remove a connection.
    Disconnect {
        /// `NETPE.PORT` or `in:PORT`.
        from: String,
        /// `NETPE[.PORT]` or `out:PORT`.
        to: String,
    },
    /// Give a NetPE another program (a file, or `module:NAME`), without stopping the packets.
    Replace {
        /// The NetPE.
        netpe: String,
        /// The program.
        program: String,
    },
    /// Replace the whole application by another manifest's.
    ReplaceApp {
        /// The manifest.
        manifest: PathBuf,
    },
    /// Add a data path to an engine of several ([[datapath]]): its manifest, selected by input port or by the classifier.
    AddDatapath {
        /// Its name (its NetPEs are `NAME/NETPE`).
        name: String,
        /// Its application manifest.
        manifest: PathBuf,
        /// Selected by input port: its input port P is the engine's `--inport` + P.
        #[arg(long, conflicts_with = "select", required_unless_present = "select")]
        inport: Option<u16>,
        /// Selected by the classifier's output port.
        #[arg(long)]
        select: Option<u16>,
        /// Its output port P is the engine's `--outport` + P.
        #[arg(long, default_value_t = 0)]
        outport: u16,
    },
    /// Remove a data path: its NetPEs and their connections.
    RemoveDatapath {
        /// The data path.
        name: String,
    },
    /// Replace a data path by another manifest's, selected as before (NetPEs that keep their names keep their state).
    ReplaceDatapath {
        /// The data path.
        name: String,
        /// The new manifest.
        manifest: PathBuf,
    },
    /// A coprocessor instance's table: `load INSTANCE FILE`, `dump INSTANCE`, `clear INSTANCE`.
    Table {
        /// `load`, `dump` or `clear`.
        action: String,
        /// `INSTANCE` or `NETPE.INSTANCE`.
        instance: String,
        /// The table file (`load`).
        file: Option<PathBuf>,
    },
    /// A NetPE's global variable (`.global`): `get NETPE.VAR` (one value per worker), `set NETPE.VAR VALUE`.
    Global {
        /// `get` or `set`.
        action: String,
        /// `NETPE.VAR`.
        var: String,
        /// The value (`set`).
        value: Option<i64>,
    },
}

pub fn cmd_ctl(args: CtlArgs) -> u8 {
    let req = match request(args.command) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("netvm ctl: {e}");
            return EXIT_USAGE;
        }
    };
    let raw_table = req.get("cmd").and_then(Value::as_str) == Some("table-dump");
    match netvm_runtime::socket::request_to(&netvm_runtime::socket::Endpoint::parse(&args.socket), &req) {
        Ok(reply) if reply.get("ok") == Some(&Value::Bool(true)) => {
            let out = match (raw_table, reply.get("table").and_then(Value::as_str)) {
                (true, Some(t)) => {
                    let mut t = t.to_string();
                    if !t.is_empty() && !t.ends_with('\n') {
                        t.push('\n');
                    }
                    t
                }
                _ => format!("{reply}\n"),
            };
            crate::common::stdout_write(&out).map_or_else(|code| code, |_| 0)
        }
        Ok(reply) => {
            eprintln!("netvm ctl: {}", reply.get("error").and_then(Value::as_str).unwrap_or("the request failed"));
            let _ = crate::common::stdout_write(&format!("{reply}\n"));
            EXIT_ERROR
        }
        Err(e) => {
            eprintln!("netvm ctl: {e}");
            EXIT_ERROR
        }
    }
}

/// A path the server (another process, another working directory) can open.
fn absolute(p: &Path) -> String {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string()
}

/// `program`'s fields of a request: `module:NAME` or a file.
fn program(p: &str, req: &mut Map<String, Value>) {
    match p.strip_prefix("module:") {
        Some(m) => req.insert("module".into(), json!(m)),
        None => req.insert("program".into(), json!(absolute(Path::new(p)))),
    };
}

/// A setting's value as the manifest would have it: an integer, a boolean, or text.
fn scalar(v: &str) -> Value {
    if let Ok(i) = v.parse::<i64>() {
        json!(i)
    } else if let Ok(b) = v.parse::<bool>() {
        json!(b)
    } else {
        json!(v)
    }
}

fn request(c: CtlCommand) -> Result<Value, String> {
    let mut req = Map::new();
    let cmd = match c {
        CtlCommand::List => "list",
        CtlCommand::Stats => "stats",
        CtlCommand::LoadModule { name, file } => {
            req.insert("name".into(), json!(name));
            req.insert("path".into(), json!(absolute(&file)));
            "load-module"
        }
        CtlCommand::Add { netpe, program: p, copro, args } => {
            req.insert("name".into(), json!(netpe));
            program(&p, &mut req);
            let mut c = Map::new();
            for s in copro {
                let (k, v) = s.split_once('=').ok_or(format!("--copro {s}: expected INSTANCE.KEY=VALUE"))?;
                let (inst, key) = k.split_once('.').ok_or(format!("--copro {s}: expected INSTANCE.KEY=VALUE"))?;
                let e = c.entry(inst.to_string()).or_insert_with(|| json!({}));
                e[key] = scalar(v);
            }
            req.insert("copro".into(), Value::Object(c));
            let mut a = Map::new();
            for s in args {
                let (k, v) = s.split_once('=').ok_or(format!("--arg {s}: expected NAME=INTEGER"))?;
                let v: i64 = v.parse().map_err(|_| format!("--arg {s}: `{v}` is not an integer"))?;
                a.insert(k.to_string(), json!(v));
            }
            req.insert("args".into(), Value::Object(a));
            "add"
        }
        CtlCommand::Remove { netpe } => {
            req.insert("name".into(), json!(netpe));
            "remove"
        }
        CtlCommand::Connect { from, to } => {
            req.insert("from".into(), json!(from));
            req.insert("to".into(), json!(to));
            "connect"
        }
        CtlCommand::Disconnect { from, to } => {
            req.insert("from".into(), json!(from));
            req.insert("to".into(), json!(to));
            "disconnect"
        }
        CtlCommand::Replace { netpe, program: p } => {
            req.insert("name".into(), json!(netpe));
            program(&p, &mut req);
            "replace"
        }
        CtlCommand::ReplaceApp { manifest } => {
            req.insert("manifest".into(), json!(absolute(&manifest)));
            "replace-app"
        }
        CtlCommand::AddDatapath { name, manifest, inport, select, outport } => {
            req.insert("name".into(), json!(name));
            req.insert("manifest".into(), json!(absolute(&manifest)));
            if let Some(p) = inport {
                req.insert("inport".into(), json!(p));
            }
            if let Some(k) = select {
                req.insert("select".into(), json!(k));
            }
            req.insert("outport".into(), json!(outport));
            "add-datapath"
        }
        CtlCommand::RemoveDatapath { name } => {
            req.insert("name".into(), json!(name));
            "remove-datapath"
        }
        CtlCommand::ReplaceDatapath { name, manifest } => {
            req.insert("name".into(), json!(name));
            req.insert("manifest".into(), json!(absolute(&manifest)));
            "replace-datapath"
        }
        CtlCommand::Table { action, instance, file } => {
            req.insert("instance".into(), json!(instance));
            match (action.as_str(), file) {
                ("load", Some(f)) => {
                    req.insert("file".into(), json!(absolute(&f)));
                    "table-load"
                }
                ("dump", None) => "table-dump",
                ("clear", None) => "table-clear",
                _ => return Err(format!("table {action}: expected `load INSTANCE FILE`, `dump INSTANCE` or `clear INSTANCE`")),
            }
        }
        CtlCommand::Global { action, var, value } => {
            let (netpe, v) = var.rsplit_once('.').ok_or(format!("global {action} {var}: expected NETPE.VAR"))?;
            req.insert("netpe".into(), json!(netpe));
            req.insert("var".into(), json!(v));
            match (action.as_str(), value) {
                ("get", None) => "global-get",
                ("set", Some(x)) => {
                    req.insert("value".into(), json!(x));
                    "global-set"
                }
                _ => return Err(format!("global {action}: expected `get NETPE.VAR` or `set NETPE.VAR VALUE`")),
            }
        }
    };
    req.insert("cmd".into(), json!(cmd));
    Ok(Value::Object(req))
}
