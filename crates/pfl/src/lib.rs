//! The netvm filter language (PFL): tcpdump / pcap-filter(7) expressions
//! compiled to NetIL.
//!
//! Data flow: text → [`lexer`] → [`parser`] (libpcap's grammar, qualifier
//! inheritance included) → AST → [`lower`] (driven by the protocol
//! database, [`db`]) → predicate → [`cfg`] (decision graph, jump threading)
//! → [`emit`] (NetIL assembly text, assembled by `netil::asm`).
//!
//! A compiled filter is a one-input NetPE with two output ports: `ret 1` for
//! a packet that matches, `ret 0` for one that does not. A packet too short
//! for a byte the filter must read is rejected, as libpcap rejects it.

pub mod cfg;
pub mod db;
pub mod emit;
pub mod ir;
pub mod lexer;
pub mod lower;
pub mod parser;

pub use db::ProtocolDb;

/// A compiled filter.
#[derive(Debug, Clone)]
pub struct Filter {
    /// The expression it was compiled from.
    pub expression: String,
    /// The NetIL assembly text (what `netvm filter -d` prints).
    pub text: String,
    /// The assembled module: port 1 = match, port 0 = no match.
    pub module: netil::Module,
}

/// A syntax or semantic error, with the byte range of the offending token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// What is wrong.
    pub message: String,
    /// Byte range in the expression.
    pub span: std::ops::Range<usize>,
}

impl FilterError {
    /// An error at `span`.
    pub fn new(message: impl Into<String>, span: std::ops::Range<usize>) -> Self {
        FilterError { message: message.into(), span }
    }

    /// The expression with a caret under the offending token, then the message.
    pub fn render(&self, expr: &str) -> String {
        let start = self.span.start.min(expr.len());
        let end = self.span.end.clamp(start, expr.len());
        let pad: String = expr[..start].chars().map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
        let width = expr[start..end].chars().count().max(1);
        format!("{expr}\n{pad}{}\n{}", "^".repeat(width), self.message)
    }
}

impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (at bytes {}..{})", self.message, self.span.start, self.span.end)
    }
}

impl std::error::Error for FilterError {}

/// Compiles `expr` with the built-in protocol database.
pub fn compile(expr: &str) -> Result<Filter, FilterError> {
    thread_local! {
        static DB: ProtocolDb = ProtocolDb::builtin();
    }
    DB.with(|db| compile_with(expr, db))
}

/// Compiles `expr` with the protocol database `db`.
pub fn compile_with(expr: &str, db: &ProtocolDb) -> Result<Filter, FilterError> {
    let pred = predicate(expr, db)?;
    let mut g = cfg::Graph::build(&pred);
    g.optimize();
    if g.entry == cfg::REJECT {
        // libpcap refuses a filter its optimizer proves empty; so does netvm.
        return Err(FilterError::new("expression rejects all packets", 0..expr.len()));
    }
    let text = emit::emit(&g, expr);
    let module = match netil::asm::assemble(&text) {
        Ok(a) => a.module,
        Err(e) => {
            return Err(FilterError::new(
                format!("internal error: the generated NetIL does not assemble: {}", e.display_with("filter")),
                0..expr.len(),
            ))
        }
    };
    Ok(Filter { expression: expr.to_string(), text, module })
}

/// The predicate an expression means (before the decision graph).
pub fn predicate(expr: &str, db: &ProtocolDb) -> Result<ir::Pred, FilterError> {
    let toks = lexer::tokenize(expr)?;
    let is_proto = |w: &str| db.protocol(w).is_some();
    let constant = |w: &str| db.constants.get(w).copied();
    let ast = parser::Parser::new(toks, expr.len(), &is_proto, &constant).parse()?;
    match ast {
        None => Ok(ir::Pred::True),
        Some(e) => lower::Lower::new(db).expr(&e),
    }
}
