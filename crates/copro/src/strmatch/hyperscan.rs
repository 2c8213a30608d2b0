//! A thin runtime-loaded FFI to Hyperscan / Vectorscan (`libhs`): literal
//! databases in block mode (`hs_compile_lit_multi`), scratch space (one per
//! thread that scans: `hs_alloc_scratch`, `hs_clone_scratch`), `hs_scan`.
//!
//! The library is opened once per process with `dlopen` (`libhs.so.5`, then
//! `libhs.so`) and kept loaded for the life of the process, so the function
//! pointers taken from it stay valid; nothing links against it at build time.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::ptr;
use std::sync::OnceLock;

/// `HS_FLAG_CASELESS`: ASCII case-insensitive matching.
pub(super) const HS_FLAG_CASELESS: c_uint = 1;
/// `HS_FLAG_SINGLEMATCH`: report a pattern at most once per scan (its first match).
pub(super) const HS_FLAG_SINGLEMATCH: c_uint = 8;
const HS_MODE_BLOCK: c_uint = 1;
const HS_SUCCESS: c_int = 0;
const HS_SCAN_TERMINATED: c_int = -3;

#[repr(C)]
struct RawDatabase {
    _opaque: [u8; 0],
}

#[repr(C)]
struct RawScratch {
    _opaque: [u8; 0],
}

#[repr(C)]
struct RawCompileError {
    message: *mut c_char,
    expression: c_int,
}

/// `match_event_handler`: returns non-zero to stop the scan.
pub(super) type MatchHandler =
    unsafe extern "C" fn(id: c_uint, from: c_ulonglong, to: c_ulonglong, flags: c_uint, ctx: *mut c_void) -> c_int;

type CompileLitMulti = unsafe extern "C" fn(
    expressions: *const *const c_char,
    flags: *const c_uint,
    ids: *const c_uint,
    lens: *const usize,
    elements: c_uint,
    mode: c_uint,
    platform: *const c_void,
    db: *mut *mut RawDatabase,
    error: *mut *mut RawCompileError,
) -> c_int;
type FreeCompileError = unsafe extern "C" fn(*mut RawCompileError) -> c_int;
type FreeDatabase = unsafe extern "C" fn(*mut RawDatabase) -> c_int;
type AllocScratch = unsafe extern "C" fn(*const RawDatabase, *mut *mut RawScratch) -> c_int;
type CloneScratch = unsafe extern "C" fn(*const RawScratch, *mut *mut RawScratch) -> c_int;
type FreeScratch = unsafe extern "C" fn(*mut RawScratch) -> c_int;
type Scan = unsafe extern "C" fn(
    db: *const RawDatabase,
    data: *const c_char,
    length: c_uint,
    flags: c_uint,
    scratch: *mut RawScratch,
    on_event: Option<MatchHandler>,
    ctx: *mut c_void,
) -> c_int;
type ValidPlatform = unsafe extern "C" fn() -> c_int;
type Version = unsafe extern "C" fn() -> *const c_char;

/// The loaded library's entry points.
pub(super) struct Hs {
    compile_lit_multi: CompileLitMulti,
    free_compile_error: FreeCompileError,
    free_database: FreeDatabase,
    alloc_scratch: AllocScratch,
    clone_scratch: CloneScratch,
    free_scratch: FreeScratch,
    scan: Scan,
    /// The library's version string.
    pub(super) version: String,
}

static HS: OnceLock<Result<Hs, String>> = OnceLock::new();

/// The process-wide library, loaded on first use; the error says why it is not usable.
pub(super) fn library() -> Result<&'static Hs, &'static str> {
    HS.get_or_init(load).as_ref().map_err(String::as_str)
}

fn load() -> Result<Hs, String> {
    if std::env::var("NETVM_HYPERSCAN").as_deref() == Ok("off") {
        return Err("disabled by NETVM_HYPERSCAN=off".into());
    }
    let mut errors = Vec::new();
    for name in ["libhs.so.5", "libhs.so"] {
        // SAFETY: loading libhs runs its initialisers, which only set up the
        // library's own tables; no other code in the process depends on them.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => return bind(lib),
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    Err(format!("cannot load Hyperscan ({})", errors.join("; ")))
}

fn bind(lib: libloading::Library) -> Result<Hs, String> {
    // SAFETY: each symbol is looked up with the C signature of the Hyperscan
    // 5.x API (hs_compile.h, hs_runtime.h, hs_common.h), which Vectorscan keeps.
    // The library is leaked below, so the copied function pointers never dangle.
    let hs = unsafe {
        fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
            let mut z = name.as_bytes().to_vec();
            z.push(0);
            // SAFETY: the caller names a symbol whose C type is `T`.
            unsafe { lib.get::<T>(&z).map(|s| *s).map_err(|e| format!("libhs lacks `{name}` (Hyperscan 5.2 or later needed): {e}")) }
        }
        let valid: ValidPlatform = sym(&lib, "hs_valid_platform")?;
        let version: Version = sym(&lib, "hs_version")?;
        if valid() != HS_SUCCESS {
            return Err("Hyperscan does not support this CPU (hs_valid_platform failed)".to_string());
        }
        let v = version();
        let version = if v.is_null() { "unknown".to_string() } else { CStr::from_ptr(v).to_string_lossy().into_owned() };
        Hs {
            compile_lit_multi: sym(&lib, "hs_compile_lit_multi")?,
            free_compile_error: sym(&lib, "hs_free_compile_error")?,
            free_database: sym(&lib, "hs_free_database")?,
            alloc_scratch: sym(&lib, "hs_alloc_scratch")?,
            clone_scratch: sym(&lib, "hs_clone_scratch")?,
            free_scratch: sym(&lib, "hs_free_scratch")?,
            scan: sym(&lib, "hs_scan")?,
            version,
        }
    };
    std::mem::forget(lib);
    Ok(hs)
}

/// A compiled block-mode literal database, freed on drop.
pub(super) struct Database {
    hs: &'static Hs,
    raw: *mut RawDatabase,
}

// SAFETY: a Hyperscan database is immutable after compilation and may be used
// from any thread (the Hyperscan docs allow sharing it between threads); the
// wrapper owns the pointer exclusively and frees it once, on drop.
unsafe impl Send for Database {}
// SAFETY: as above: scans only read the database (`hs_scan` takes it as a
// const pointer), and every thread scans with a scratch of its own.
unsafe impl Sync for Database {}

impl Database {
    /// Compiles literals; `ids[i]` is reported for `literals[i]`.
    pub(super) fn compile_literals(hs: &'static Hs, literals: &[&[u8]], flags: &[c_uint], ids: &[c_uint]) -> Result<Database, String> {
        debug_assert!(literals.len() == flags.len() && literals.len() == ids.len());
        let ptrs: Vec<*const c_char> = literals.iter().map(|l| l.as_ptr().cast()).collect();
        let lens: Vec<usize> = literals.iter().map(|l| l.len()).collect();
        let n = c_uint::try_from(literals.len()).map_err(|_| "too many literals for Hyperscan".to_string())?;
        let mut db = ptr::null_mut();
        let mut err = ptr::null_mut();
        // SAFETY: the four arrays have `n` elements each and outlive the call;
        // each expression pointer is valid for its length; `db` and `err` are
        // out-pointers; a null platform means "this host".
        let rc = unsafe {
            (hs.compile_lit_multi)(
                ptrs.as_ptr(),
                flags.as_ptr(),
                ids.as_ptr(),
                lens.as_ptr(),
                n,
                HS_MODE_BLOCK,
                ptr::null(),
                &mut db,
                &mut err,
            )
        };
        if rc == HS_SUCCESS && !db.is_null() {
            return Ok(Database { hs, raw: db });
        }
        let msg = if err.is_null() {
            format!("Hyperscan compile failed (error {rc})")
        } else {
            // SAFETY: on failure `err` points to a compile error whose message
            // is a NUL-terminated string; it is freed exactly once here.
            unsafe {
                let e = &*err;
                let text = if e.message.is_null() { String::new() } else { CStr::from_ptr(e.message).to_string_lossy().into_owned() };
                let which = e.expression;
                (hs.free_compile_error)(err);
                format!("Hyperscan compile failed (expression {which}): {text}")
            }
        };
        Err(msg)
    }

    /// Scans `data`; `on_event` gets `ctx` with each match. Returns Hyperscan's
    /// error code when the scan failed (terminating from the callback is not a failure).
    ///
    /// # Safety
    /// `on_event` must treat `ctx` as the type the caller passes, and `scratch`
    /// must not be in use by another scan.
    pub(super) unsafe fn scan(&self, scratch: &mut Scratch, data: &[u8], on_event: MatchHandler, ctx: *mut c_void) -> Result<(), c_int> {
        let len = c_uint::try_from(data.len()).map_err(|_| -1)?;
        // SAFETY: the database and scratch pointers are live (owned by their
        // wrappers), the scratch was sized for every database of its set, and
        // `data` is valid for `len` bytes; the callback contract is the caller's.
        let rc = unsafe { (self.hs.scan)(self.raw, data.as_ptr().cast(), len, 0, scratch.raw, Some(on_event), ctx) };
        match rc {
            HS_SUCCESS | HS_SCAN_TERMINATED => Ok(()),
            e => Err(e),
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // SAFETY: `raw` came from a successful compile and is freed once.
        unsafe { (self.hs.free_database)(self.raw) };
    }
}

/// Scratch space sized for every database it was grown for, freed on drop.
pub(super) struct Scratch {
    hs: &'static Hs,
    raw: *mut RawScratch,
}

// SAFETY: a scratch may move between threads; Hyperscan only forbids using
// one scratch in two scans at once, which `&mut` access to it rules out.
unsafe impl Send for Scratch {}

impl Scratch {
    /// A scratch large enough for each of `dbs` (none if `dbs` is empty).
    pub(super) fn for_databases<'a>(hs: &'static Hs, dbs: impl IntoIterator<Item = &'a Database>) -> Result<Option<Scratch>, String> {
        let mut s = Scratch { hs, raw: ptr::null_mut() };
        for db in dbs {
            // SAFETY: `db.raw` is a live database; `s.raw` is null or a scratch
            // from an earlier call, which hs_alloc_scratch grows in place.
            let rc = unsafe { (hs.alloc_scratch)(db.raw, &mut s.raw) };
            if rc != HS_SUCCESS {
                return Err(format!("Hyperscan could not allocate scratch (error {rc})"));
            }
        }
        Ok(if s.raw.is_null() { None } else { Some(s) })
    }

    /// A scratch of the same size, for another thread (`hs_clone_scratch`).
    pub(super) fn try_clone(&self) -> Result<Scratch, String> {
        let mut raw = ptr::null_mut();
        // SAFETY: `self.raw` is a live scratch (never null in a `Scratch`
        // handed out by `for_databases`); `raw` is an out-pointer.
        let rc = unsafe { (self.hs.clone_scratch)(self.raw, &mut raw) };
        if rc != HS_SUCCESS || raw.is_null() {
            return Err(format!("Hyperscan could not clone scratch (error {rc})"));
        }
        Ok(Scratch { hs: self.hs, raw })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: `raw` came from hs_alloc_scratch and is freed once.
            unsafe { (self.hs.free_scratch)(self.raw) };
        }
    }
}
