//! Command-line helpers the benchmark binaries share.

/// Prints `PROG: MSG` on stderr and ends the program with status 2.
pub fn die(prog: &str, msg: &str) -> ! {
    eprintln!("{prog}: {msg}");
    std::process::exit(2)
}

/// The value after the flag `name` in `args`, parsed; `default` where the
/// flag is absent. A value that does not parse ends the program with a
/// message naming the flag.
pub fn flag<T: std::str::FromStr>(prog: &str, args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().unwrap_or_else(|_| die(prog, &format!("{name} {v}?"))))
}
