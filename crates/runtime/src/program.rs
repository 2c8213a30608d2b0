//! Loading NetIL programs from files: assembly text (`.nil`, anything that
//! is not a binary module) or binary modules (`.nvm`, recognised by their
//! magic bytes), followed by verification.

use std::path::{Path, PathBuf};

use netil::{Module, SourceMap};
use netvm_verify::Verified;

use crate::RuntimeError;

/// Largest program file accepted.
pub const MAX_PROGRAM_FILE: u64 = 16 << 20;

/// A program read from a file, before verification.
#[derive(Clone, Debug)]
pub struct LoadedProgram {
    /// Where it came from.
    pub path: PathBuf,
    /// The module.
    pub module: Module,
    /// Source positions, for listings.
    pub source_map: Option<SourceMap>,
}

impl LoadedProgram {
    /// Verifies the module, mapping errors to source lines where known.
    pub fn verify(&self) -> Result<Verified, RuntimeError> {
        netvm_verify::verify_with_source(&self.module, self.source_map.as_ref())
            .map_err(|error| RuntimeError::Verify { path: self.path.clone(), error })
    }
}

/// Reads a program file: a binary module if it starts with the NetIL magic, else assembly text.
pub fn load_program(path: &Path) -> Result<LoadedProgram, RuntimeError> {
    let io = |e: std::io::Error| RuntimeError::Io { path: path.to_path_buf(), error: e.to_string() };
    // Read with a bound, whatever the file claims (a device or a pipe has no length).
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(std::fs::File::open(path).map_err(io)?, MAX_PROGRAM_FILE + 1), &mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_PROGRAM_FILE {
        return Err(RuntimeError::Io { path: path.to_path_buf(), error: format!("program file larger than {MAX_PROGRAM_FILE} bytes") });
    }
    parse_program(path, &bytes)
}

/// Parses program bytes named `path` (see [`load_program`]).
pub fn parse_program(path: &Path, bytes: &[u8]) -> Result<LoadedProgram, RuntimeError> {
    if bytes.starts_with(&netil::module::MAGIC[..4]) {
        let module = Module::from_bytes(bytes).map_err(|error| RuntimeError::Load { path: path.to_path_buf(), error })?;
        return Ok(LoadedProgram { path: path.to_path_buf(), module, source_map: None });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| RuntimeError::Io {
        path: path.to_path_buf(),
        error: format!("neither a NetIL binary module nor UTF-8 assembly text ({e})"),
    })?;
    let asm = netil::assemble(text).map_err(|error| RuntimeError::Asm { path: path.to_path_buf(), error })?;
    Ok(LoadedProgram { path: path.to_path_buf(), module: asm.module, source_map: Some(asm.source_map) })
}
