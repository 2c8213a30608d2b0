//! Fuzzes the control socket's requests (`netvm ctl`'s protocol): any bytes
//! as a request line to a small running application's control plane get a
//! JSON reply, `ok` or an `error`; never a panic or a hang. The application
//! stays usable: a packet still runs through it after every request.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use netvm_runtime::{Application, Driver, DriverConfig, InterpEngine, Manifest, Rebuild};

const APP: &str = r#"
[[netpe]]
name = "a"
program = "a.nil"
copro = { c = { size = 4 } }
[[netpe]]
name = "b"
program = "b.nil"
[[source]]
to = "a"
[[connect]]
from = "a.0"
to = "b"
[[sink]]
from = "b.0"
port = 1
"#;

fn driver() -> Driver {
    let mut m = Manifest::parse(APP).expect("the manifest parses");
    let a = netil::assemble(".copro c counters\n.datasize 4\n.global g 0 4\n.outport out 0\nsegment .push\n    pop\n    push 0\n    copro.in c, 0\n    push 1\n    copro.in c, 1\n    copro.invoke c, 0\n    ret 0\nends\n");
    let b = netil::assemble(".ports 1\nsegment .push\n    pop\n    ret 0\nends\n");
    m.netpes[0].module = Some(a.expect("a assembles").module);
    m.netpes[1].module = Some(b.expect("b assembles").module);
    let engine: Arc<dyn netvm_runtime::Engine> = Arc::new(InterpEngine);
    let registry = netvm_copro::registry();
    let app = Application::build(&m, engine.as_ref(), &registry, Some(1000)).expect("the application builds");
    let d = Driver::new(app, DriverConfig::default());
    d.allow_changes(Rebuild { manifest: m, engine, registry, budget: Some(1000), calibration: None });
    d
}

thread_local! {
    /// One application for the whole run: requests change it in turn.
    static DRIVER: Driver = driver();
}

fuzz_target!(|data: &[u8]| DRIVER.with(|d| {
    let reply = netvm_runtime::socket::answer_line(&d.control(), data);
    match reply.get("ok") {
        Some(serde_json::Value::Bool(true)) => {}
        Some(serde_json::Value::Bool(false)) => assert!(reply.get("error").and_then(|e| e.as_str()).is_some_and(|e| !e.is_empty())),
        _ => panic!("a reply without ok: {reply}"),
    }
    let mut packets = vec![netvm_vm::Packet::from_bytes(vec![0; 64])];
    let mut verdicts = Vec::new();
    d.app().process_batch(&mut packets, &mut verdicts, &mut |_, _| {});
    assert_eq!(verdicts.len(), 1);
}));
