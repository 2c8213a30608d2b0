//! The control socket (`netvm_runtime::socket`): a real round trip over the
//! Unix socket, its mode, and replies to hostile request lines.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use netvm_runtime::socket::{answer_line, request, request_to, ControlServer, Endpoint};
use netvm_runtime::{Application, Driver, DriverConfig, InterpEngine, Manifest, Rebuild};
use serde_json::json;

fn driver() -> Driver {
    let mut m =
        Manifest::parse("[[netpe]]\nname = \"a\"\nprogram = \"a.nil\"\n[[source]]\nto = \"a\"\n[[sink]]\nfrom = \"a.0\"\nport = 1\n")
            .unwrap();
    m.netpes[0].module = Some(
        netil::assemble(".copro c counters\n.datasize 4\n.global g 0 4\n.ports 1\nsegment .push\n    pop\n    ret 0\nends\n")
            .unwrap()
            .module,
    );
    let engine: Arc<dyn netvm_runtime::Engine> = Arc::new(InterpEngine);
    let registry = netvm_copro::registry();
    let app = Application::build(&m, engine.as_ref(), &registry, None).unwrap();
    let d = Driver::new(app, DriverConfig::default());
    d.allow_changes(Rebuild { manifest: m, engine, registry, budget: None, calibration: None });
    d
}

#[test]
fn a_request_over_the_socket_gets_its_reply_and_only_the_owner_may_connect() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctl.sock");
    let d = driver();
    let server = ControlServer::start(&path, d.control()).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let list = request(&path, &json!({"cmd": "list"})).unwrap();
    assert_eq!(list["ok"], true);
    assert_eq!(list["netpes"][0]["name"], "a");
    let set = request(&path, &json!({"cmd": "global-set", "netpe": "a", "var": "g", "value": 42})).unwrap();
    assert_eq!(set["ok"], true, "{set}");
    assert_eq!(request(&path, &json!({"cmd": "global-get", "netpe": "a", "var": "g"})).unwrap()["values"], json!([42]));
    // A second server on the same path is refused while the first serves.
    assert!(ControlServer::start(&path, d.control()).is_err());
    drop(server);
    assert!(!path.exists(), "the socket file goes with the server");
}

#[test]
fn a_loopback_tcp_port_serves_this_user_only() {
    let d = driver();
    let server = ControlServer::start_tcp(0, d.control()).unwrap();
    let Endpoint::Tcp(addr) = server.endpoint().clone() else { panic!("a TCP endpoint") };
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    assert_eq!(Endpoint::parse(&addr.to_string()), Endpoint::Tcp(addr));
    assert_eq!(Endpoint::parse(&format!("localhost:{}", addr.port())), Endpoint::Tcp(addr));
    assert_eq!(Endpoint::parse("/run/x.sock"), Endpoint::Unix("/run/x.sock".into()));
    let list = request_to(&Endpoint::Tcp(addr), &json!({"cmd": "list"})).unwrap();
    assert_eq!(list["ok"], true, "{list}");
    assert_eq!(list["netpes"][0]["name"], "a");
    // Another user's process (nobody's) is refused, where this test may switch users.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        let script = format!("exec 3<>/dev/tcp/127.0.0.1/{}; echo '{{\"cmd\": \"list\"}}' >&3; head -n 1 <&3", addr.port());
        let out = std::process::Command::new("bash").arg("-c").arg(&script).uid(65534).gid(65534).output().unwrap();
        let reply = String::from_utf8_lossy(&out.stdout);
        assert!(
            reply.contains("\"ok\":false") && reply.contains("user 65534 may not control"),
            "{reply} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(server);
    assert!(request_to(&Endpoint::Tcp(addr), &json!({"cmd": "list"})).is_err(), "nothing listens once the server is gone");
}

#[test]
fn hostile_requests_get_an_error_and_change_nothing() {
    let d = driver();
    let c = d.control();
    let before = format!("{:?}", c.list().unwrap());
    let deep = "[".repeat(100_000);
    let lines: Vec<String> = vec![
        String::new(),
        "not json".into(),
        "[1, 2]".into(),
        "{}".into(),
        r#"{"cmd": 7}"#.into(),
        r#"{"cmd": "format-disk"}"#.into(),
        r#"{"cmd": "replace", "name": "a"}"#.into(),
        r#"{"cmd": "replace", "name": "a", "program": "/nonexistent.nil", "module": "x"}"#.into(),
        r#"{"cmd": "replace", "name": "a", "program": "/dev/zero"}"#.into(),
        r#"{"cmd": "table-load", "instance": "c", "file": "/dev/zero"}"#.into(),
        r#"{"cmd": "replace-app", "manifest": "/dev/zero"}"#.into(),
        r#"{"cmd": "global-set", "netpe": "a", "var": "g", "value": 1e300}"#.into(),
        r#"{"cmd": "global-set", "netpe": "a", "var": "g", "value": 99999999999}"#.into(),
        r#"{"cmd": "add", "name": "b", "program": "/dev/null", "copro": [1]}"#.into(),
        r#"{"cmd": "connect", "from": "in:99999", "to": "a"}"#.into(),
        deep,
    ];
    for l in &lines {
        let r = answer_line(&c, l.as_bytes());
        assert_eq!(r["ok"], false, "{l:.80}: {r}");
        assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{l:.80}: {r}");
        assert_eq!(format!("{:?}", c.list().unwrap()), before, "{l:.80} changed the application");
    }
}
