//! The control plane of every built-in kind, on valid files and garbage:
//! `load` accepts or refuses (never panics), and what loaded dumps to text
//! that loads back into a fresh instance and dumps identically. The
//! `copro_load` fuzz target runs the same property on any text.

#[path = "support/small_config.rs"]
mod support;

use support::small_config as config;

const TEXTS: &[&str] = &[
    "",
    "# only a comment\n\n",
    "0 1000 1500 1500\n3 1 2 3\n",
    "aa:bb:cc:dd:ee:ff 7\n02-00-00-00-00-01 0x00000002\n",
    "10.0.0.0/8 1\n10.1.0.0/16 2\n0.0.0.0/0 3\n192.168.1.1 4\n",
    "1 2 3\n10-12\n",
    "1 1 \"GET |20|\" nocase\n2 1 \"abc\"\n3 2 \"|00 01 02|\"\n",
    "1 /a+b/i\n2 /^x[0-9]{2}/s\n",
    "\u{0}\u{1}garbage \u{7f} ((( ))) ||| //\n",
    "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
    "99999999999999999999 1\n",
];

#[test]
fn every_kind_loads_dumps_and_reloads() {
    let registry = netvm_copro::registry();
    let kinds: Vec<String> = registry.kinds().map(str::to_string).collect();
    let mut loaded = 0;
    for text in TEXTS {
        for kind in &kinds {
            let mut c = registry.create(kind, &config(kind)).unwrap();
            if c.load(text).is_err() {
                continue;
            }
            loaded += 1;
            let dump = c.dump();
            let mut fresh = registry.create(kind, &config(kind)).unwrap();
            fresh.load(&dump).unwrap_or_else(|e| panic!("{kind}: dump of {text:?} does not load back: {e}\n{dump}"));
            assert_eq!(fresh.dump(), dump, "{kind}: {text:?}");
        }
    }
    assert!(loaded >= 10, "too few texts loaded anywhere ({loaded}): the test would prove little");
}
