//! Parallel code generation.
//!
//! Most of the time spent compiling a large application goes to Cranelift
//! compiling each function (optimisation, instruction selection, register
//! allocation, emission: `Context::compile`), and the functions are
//! independent: each NetPE's function in `--link table`, `netvm_run`,
//! `netvm_init`, a module's `.init` and `.push`, each NetPE's module in
//! `dispatch`. So:
//!
//! - `with_codegen`: the functions of one Cranelift module are built
//!   (NetIL → Cranelift IR) on the calling thread, in order, and handed to a
//!   bounded pool of worker threads that compile them to machine code; the
//!   calling thread defines the bytes in the module
//!   (`Module::define_function_bytes`) in the order the functions were
//!   built. Small functions are compiled on the calling thread (starting a
//!   thread costs more than they do; see [`set_inline_insts`]);
//! - `map_ordered`: independent jobs (each NetPE's module in `dispatch`,
//!   [`JitEngine`](crate::JitEngine)'s `prepare_all`) run on a bounded pool,
//!   with their results in order.
//!
//! Cranelift's compilation is a pure function of the IR and the ISA, so the
//! machine code is the same for every number of threads, and so is the
//! module (the same definitions in the same order; tests/parallel.rs checks
//! it, objects byte for byte). Errors are those of a serial compilation: the
//! first failing function (or job), in order, is reported; functions after
//! a failure may be skipped. Which ISA compiles a function depends on its
//! size only ([`JitOptions::fast_regalloc_insts`]).
//!
//! The number of threads is [`JitOptions::threads`] if not zero, else the
//! environment variable `NETVM_JIT_THREADS` (a positive integer; `1`
//! compiles everything on the calling thread, as a serial compiler; other
//! values are ignored), else the host's available parallelism. Peak memory
//! grows with it: each thread holds the function it compiles.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::Context;
use cranelift_module::{FuncId, Module, ModuleError, ModuleReloc};

use crate::{Isas, JitError, JitOptions};

/// The environment variable that sets the number of compiling threads.
pub const THREADS_VAR: &str = "NETVM_JIT_THREADS";

/// Functions with fewer Cranelift instructions than this are compiled on the
/// calling thread: starting workers costs more than compiling them (a few
/// tens of microseconds; a function of 1000 instructions takes about a
/// millisecond).
static INLINE_INSTS: AtomicUsize = AtomicUsize::new(1000);

/// Sets the size (in Cranelift instructions) under which a function is
/// compiled on the calling thread rather than by a worker (1000 by
/// default). Only where the work runs depends on it, never the code: tests
/// set 0 to send every function to the workers.
pub fn set_inline_insts(n: usize) {
    INLINE_INSTS.store(n, Ordering::Relaxed);
}

/// The size under which work stays on the calling thread (see [`set_inline_insts`]).
pub(crate) fn inline_insts() -> usize {
    INLINE_INSTS.load(Ordering::Relaxed)
}

/// The number of compiling threads `opts` asks for (see the module documentation).
pub fn threads(opts: &JitOptions) -> usize {
    if opts.threads > 0 {
        return opts.threads;
    }
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        std::env::var(THREADS_VAR)
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

/// A function defined by [`Codegen`], for the caller's records.
#[derive(Debug)]
pub(crate) struct Defined {
    /// Its name.
    pub name: String,
    /// Bytes of machine code.
    pub size: usize,
    /// Cranelift IR after optimisation (`keep_text`).
    pub clif: Option<String>,
    /// Machine code as text (`keep_text`).
    pub asm: Option<String>,
}

/// A function built, to compile.
struct Job {
    /// Its position in the order of definition.
    index: usize,
    id: FuncId,
    name: String,
    ctx: Box<Context>,
}

/// A function's machine code, to define.
struct Compiled {
    id: FuncId,
    align: u64,
    bytes: Vec<u8>,
    relocs: Vec<ModuleReloc>,
    defined: Defined,
}

/// The outcome of a job: its index and its code, or why not.
type Done = (usize, Result<Compiled, JitError>);

/// Compiles one function to machine code (see [`Codegen::submit`]).
fn compile(isas: &Isas, job: Job, keep_text: bool) -> Result<Compiled, JitError> {
    let Job { id, name, mut ctx, .. } = job;
    ctx.set_disasm(keep_text);
    let isa = isas.for_size(ctx.func.dfg.num_insts());
    let align = match ctx.compile(isa, &mut ControlPlane::default()) {
        Ok(code) => u64::from(code.buffer.alignment),
        Err(e) => return Err(JitError::Codegen(format!("{name}: {:?}", ModuleError::from(e)))),
    };
    let code = ctx.compiled_code().expect("just compiled");
    let relocs = code.buffer.relocs().iter().map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, id)).collect();
    let bytes = code.code_buffer().to_vec();
    let (clif, asm) = if keep_text { (Some(ctx.func.display().to_string()), code.vcode.clone()) } else { (None, None) };
    Ok(Compiled { id, align, defined: Defined { name, size: bytes.len(), clif, asm }, bytes, relocs })
}

/// The worker threads of a [`Codegen`] (started by the first large function).
struct Workers {
    /// Jobs, taken by whichever worker is free (a rendezvous channel: the
    /// caller builds the next function while the workers compile, and waits
    /// when they are all busy, so at most one built function waits).
    jobs: mpsc::SyncSender<Job>,
    /// Their outcomes, in the order they finish.
    done: mpsc::Receiver<Done>,
}

/// Compiles the functions of one module: [`Codegen::submit`] each in the
/// order they are to be defined (see the module documentation).
pub(crate) struct Codegen<'scope, 'env> {
    scope: &'scope thread::Scope<'scope, 'env>,
    isas: &'env Isas,
    threads: usize,
    keep_text: bool,
    /// No job after this index needs compiling: the lowest that failed.
    stop: &'env AtomicUsize,
    workers: Option<Workers>,
    /// Jobs submitted.
    submitted: usize,
    /// Jobs handed to the workers whose outcome has not come back.
    pending: usize,
    /// Outcomes that came back, waiting for the jobs before them.
    ready: BTreeMap<usize, Result<Compiled, JitError>>,
    /// Jobs defined in the module (all those before this index).
    next: usize,
    /// What was defined, in order.
    defined: Vec<Defined>,
}

impl<'scope, 'env> Codegen<'scope, 'env> {
    /// Compiles the function built in `ctx` and defines it in `module` as
    /// `id` (now or later, in the order of submission).
    pub fn submit<M: Module>(&mut self, module: &mut M, id: FuncId, name: &str, ctx: Context) -> Result<(), JitError> {
        let index = self.submitted;
        self.submitted += 1;
        let job = Job { index, id, name: name.to_string(), ctx: Box::new(ctx) };
        if self.threads <= 1 || job.ctx.func.dfg.num_insts() < inline_insts() {
            let r = self.run(job);
            self.ready.insert(index, r);
        } else {
            if self.workers.is_none() {
                self.workers = Some(self.spawn());
            }
            let workers = self.workers.as_mut().expect("started");
            workers.jobs.send(job).map_err(|_| JitError::Codegen("a compiling thread failed".into()))?;
            self.pending += 1;
            while let Ok((i, r)) = workers.done.try_recv() {
                self.pending -= 1;
                self.ready.insert(i, r);
            }
        }
        self.define_ready(module)
    }

    /// Waits for every job and defines the rest; returns what was defined, in order.
    fn finish<M: Module>(mut self, module: &mut M) -> Result<Vec<Defined>, JitError> {
        if let Some(w) = self.workers.take() {
            drop(w.jobs);
            while self.pending > 0 {
                let (i, r) = w.done.recv().map_err(|_| JitError::Codegen("a compiling thread failed".into()))?;
                self.pending -= 1;
                self.ready.insert(i, r);
                self.define_ready(module)?;
            }
        }
        self.define_ready(module)?;
        debug_assert_eq!(self.next, self.submitted);
        Ok(self.defined)
    }

    /// Compiles `job` unless a job before it failed.
    fn run(&self, job: Job) -> Result<Compiled, JitError> {
        run_job(self.isas, self.stop, self.keep_text, job)
    }

    /// Defines the jobs whose outcome came back and all jobs before them
    /// did, in order; the first failure is the error.
    fn define_ready<M: Module>(&mut self, module: &mut M) -> Result<(), JitError> {
        while let Some(r) = self.ready.remove(&self.next) {
            let c = r?;
            module
                .define_function_bytes(c.id, c.align, &c.bytes, &c.relocs)
                .map_err(|e| JitError::Codegen(format!("{}: {e:?}", c.defined.name)))?;
            self.defined.push(c.defined);
            self.next += 1;
        }
        Ok(())
    }

    /// Starts the workers.
    fn spawn(&self) -> Workers {
        let (jobs, rx) = mpsc::sync_channel::<Job>(0);
        let (tx, done) = mpsc::channel::<Done>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..self.threads {
            let (rx, tx) = (Arc::clone(&rx), tx.clone());
            let (isas, stop, keep_text) = (self.isas, self.stop, self.keep_text);
            self.scope.spawn(move || loop {
                // The lock is held only while waiting for a job, never while compiling.
                let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                let Ok(job) = job else { break };
                let index = job.index;
                if tx.send((index, run_job(isas, stop, keep_text, job))).is_err() {
                    break;
                }
            });
        }
        Workers { jobs, done }
    }
}

/// Compiles `job` unless a job before it failed (then its outcome is never looked at).
fn run_job(isas: &Isas, stop: &AtomicUsize, keep_text: bool, job: Job) -> Result<Compiled, JitError> {
    let index = job.index;
    if index > stop.load(Ordering::Relaxed) {
        return Err(JitError::Codegen("skipped after an earlier failure".into()));
    }
    let r = compile(isas, job, keep_text);
    if r.is_err() {
        stop.fetch_min(index, Ordering::Relaxed);
    }
    r
}

/// Runs `body`, which builds the functions of `module` and hands each to
/// [`Codegen::submit`], compiled with `isas` (the module's own ISA, shared
/// with the workers while `body` mutates the module, and the one for large
/// functions); then waits for them all and defines the rest. Returns `body`'s result and what was defined.
pub(crate) fn with_codegen<M: Module, R>(
    module: &mut M,
    isas: &Isas,
    opts: &JitOptions,
    body: impl FnOnce(&mut M, &mut Codegen<'_, '_>) -> Result<R, JitError>,
) -> Result<(R, Vec<Defined>), JitError> {
    let stop = AtomicUsize::new(usize::MAX);
    let threads = threads(opts);
    thread::scope(|scope| {
        let mut cg = Codegen {
            scope,
            isas,
            threads,
            keep_text: opts.keep_text,
            stop: &stop,
            workers: None,
            submitted: 0,
            pending: 0,
            ready: BTreeMap::new(),
            next: 0,
            defined: Vec::new(),
        };
        // On an error, dropping `cg` closes the job channel: the workers
        // finish what they hold (skipping jobs after the failure) and the
        // scope waits for them.
        let r = body(module, &mut cg)?;
        Ok((r, cg.finish(module)?))
    })
}

/// `f` of each item, on up to `threads` threads, in order; the first
/// failure in order (with its index) is the error, and items after a
/// failure may be skipped.
pub(crate) fn map_ordered<T: Sync, R: Send, E: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, (usize, E)> {
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.iter().enumerate().map(|(i, x)| f(x).map_err(|e| (i, e))).collect();
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicUsize::new(usize::MAX);
    let mut out: Vec<(usize, Result<R, E>)> = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= items.len() || i > stop.load(Ordering::Relaxed) {
                            break out;
                        }
                        let r = f(&items[i]);
                        if r.is_err() {
                            stop.fetch_min(i, Ordering::Relaxed);
                        }
                        out.push((i, r));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    out.sort_by_key(|(i, _)| *i);
    let mut results = Vec::with_capacity(items.len());
    for (i, r) in out {
        // Every item before the first failure ran, so indices are contiguous up to it.
        debug_assert_eq!(i, results.len());
        results.push(r.map_err(|e| (i, e))?);
    }
    debug_assert_eq!(results.len(), items.len());
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::map_ordered;

    #[test]
    fn map_ordered_keeps_order_and_reports_the_first_failure() {
        let items: Vec<u32> = (0..100).collect();
        for threads in [1, 2, 3, 8] {
            let ok: Result<Vec<u32>, (usize, String)> = map_ordered(&items, threads, |x| Ok(x * 2));
            assert_eq!(ok.unwrap(), items.iter().map(|x| x * 2).collect::<Vec<_>>());
            let err = map_ordered(&items, threads, |&x| if x % 30 == 17 { Err(x) } else { Ok(x) });
            assert_eq!(err.unwrap_err(), (17, 17));
        }
    }
}
