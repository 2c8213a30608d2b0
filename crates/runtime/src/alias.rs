//! Coprocessor instances shared by several NetPEs of one application: a
//! NetPE whose manifest says `copro = { NAME = { instance = "OWNER.INST" } }`
//! reaches the instance `INST` of NetPE `OWNER` under its own name `NAME`
//! (an IDS's detection NetPEs test the flowbits of the flows its decoder
//! tracks).
//!
//! Every engine reaches a NetPE's coprocessors through its
//! `Vec<Box<dyn Coprocessor>>` ([`PeState::copros`](netvm_vm::PeState)), so
//! a shared instance is a [`Handle`] in each slot that names it, the
//! owner's and every alias's, all over one [`SharedInstance`]: engines stay
//! as they are, and a call costs one more indirect call than a plain
//! instance. The runtime knows which slot is which ([`Shares`]): it ticks,
//! drains, reports, dumps and absorbs an instance through its owner's slot
//! only, and [`Application::fork`](crate::Application::fork) forks the
//! owner once and gives the fork's aliases handles on the fork's instance.

use std::ptr::NonNull;
use std::sync::Arc;

use netvm_vm::{AheadKeys, CoproError, CoproEvent, Coprocessor, InvokeContext, RegisterFile, Timestamp, WorkerShare};

/// Where one NetPE's coprocessor slot is: (NetPE index, declaration index).
pub(crate) type Slot = (usize, usize);

/// The instances of an application that several slots share.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shares {
    /// One entry per shared instance: its owner's slot and its aliases' slots.
    pub groups: Vec<Group>,
    /// Per NetPE, per declaration: the owner's slot when the slot is an alias.
    pub alias_of: Vec<Vec<Option<Slot>>>,
}

/// One shared instance.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    /// The slot that owns the instance (the NetPE the manifest configures it in).
    pub owner: Slot,
    /// The slots that name it with `instance = "..."`.
    pub aliases: Vec<Slot>,
}

impl Shares {
    /// Whether slot `c` of NetPE `pe` is an alias (another NetPE owns the instance).
    pub fn is_alias(&self, pe: usize, c: usize) -> bool {
        self.owner_of(pe, c).is_some()
    }

    /// The owner's slot of slot `c` of NetPE `pe`, when it is an alias.
    pub fn owner_of(&self, pe: usize, c: usize) -> Option<Slot> {
        self.alias_of.get(pe).and_then(|v| v.get(c)).copied().flatten()
    }

    /// Wraps the owners' instances in `copros` (per NetPE, per declaration;
    /// every alias slot `None`, every other slot `Some`) into shared
    /// instances and fills the alias slots with handles on them.
    pub fn bind(&self, copros: &mut [Vec<Option<Box<dyn Coprocessor>>>], names: &[String]) {
        for g in &self.groups {
            let (pe, c) = g.owner;
            let inner = copros[pe][c].take().expect("an owner's slot holds its instance");
            let shared = SharedInstance::new(inner);
            copros[pe][c] = Some(Box::new(Handle::owner(Arc::clone(&shared))));
            for &(ape, ac) in &g.aliases {
                copros[ape][ac] = Some(Box::new(Handle::alias(Arc::clone(&shared), names[pe].clone())));
            }
        }
    }
}

/// An instance that several slots reach: the one owner of the boxed
/// instance, freed when the last [`Handle`] goes.
pub(crate) struct SharedInstance {
    /// The instance, out of its `Box` (`Box::leak`): every access goes
    /// through this pointer, never through a `Box` that would claim it alone.
    ptr: NonNull<dyn Coprocessor>,
    /// Its kind, kept apart so that `kind()` borrows no part of the instance.
    kind: Box<str>,
}

// SAFETY: the instance is a `Coprocessor`, so `Send`, and it is owned
// here: it may be dropped (and reached, under `Handle`'s contract) on any
// one thread.
unsafe impl Send for SharedInstance {}

// SAFETY: a shared reference reaches nothing of the instance but `kind`,
// immutable; only `Handle`s dereference `ptr`, under their contract (one
// thread at a time).
unsafe impl Sync for SharedInstance {}

impl SharedInstance {
    /// Shares `inner`.
    pub fn new(inner: Box<dyn Coprocessor>) -> Arc<SharedInstance> {
        let kind = inner.kind().into();
        Arc::new(SharedInstance { ptr: NonNull::from(Box::leak(inner)), kind })
    }
}

impl Drop for SharedInstance {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `Box::leak` in `new`, and
        // this is the last reference to it: every handle holds the `Arc`.
        drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
    }
}

/// A slot's handle on a [`SharedInstance`]: the owner's forwards every
/// method; an alias's forwards the data plane (`write`, `read`, `invoke`)
/// and the control plane (`dump`, `load`, `clear`), and leaves what
/// concerns the instance once (`tick`, `stats`, events,
/// `absorb`, `as_any_mut`) to the owner's, so that walking every slot
/// counts the instance once. An alias does not [`fork`](Coprocessor::fork)
/// alone: [`Application::fork`](crate::Application::fork) forks the owner
/// and hands the fork's aliases handles on the new instance.
///
/// # Safety
///
/// The handles of one instance sit in the states of one application (or of
/// one [`AppPlan`](crate::AppPlan)), which is moved, and run, as a whole:
/// one thread runs it at a time (a worker runs one NetPE at a time, the
/// control plane takes the application by `&mut`), every other worker runs
/// its own [`fork`](crate::Application::fork) with instances of its own, and
/// no coprocessor method calls another instance. So the references a
/// handle makes to the instance for the length of one call never overlap
/// another handle's. The one reference that outlives a call is the owner's
/// [`as_any_mut`](Coprocessor::as_any_mut) (what a host downcasts to): it
/// borrows the owner's slot, and must not be held while another slot of
/// the application is used.
pub(crate) struct Handle {
    /// The instance (the same pointer as `shared.ptr`, here to spare a load).
    ptr: NonNull<dyn Coprocessor>,
    /// Keeps the instance alive.
    shared: Arc<SharedInstance>,
    /// `None` for the owner; for an alias, the owner NetPE's name (for messages).
    alias_of: Option<String>,
}

// SAFETY: the instance is `Send` (a `Coprocessor`), and a handle moves to
// another thread only with the whole application (or plan) whose states
// hold the instance's other handles (see the type's documentation): the
// instance is never reached from two threads at once.
unsafe impl Send for Handle {}

impl Handle {
    fn owner(shared: Arc<SharedInstance>) -> Handle {
        Handle { ptr: shared.ptr, shared, alias_of: None }
    }

    fn alias(shared: Arc<SharedInstance>, owner: String) -> Handle {
        Handle { ptr: shared.ptr, shared, alias_of: Some(owner) }
    }

    fn get(&self) -> &dyn Coprocessor {
        // SAFETY: the instance lives as long as `shared`; no `&mut` to it
        // is alive during this borrow (the type's documentation).
        unsafe { self.ptr.as_ref() }
    }

    fn get_mut(&mut self) -> &mut dyn Coprocessor {
        // SAFETY: the instance lives as long as `shared`; no other reference
        // to it is alive during this borrow (the type's documentation).
        unsafe { self.ptr.as_mut() }
    }

    fn is_owner(&self) -> bool {
        self.alias_of.is_none()
    }
}

impl Coprocessor for Handle {
    fn kind(&self) -> &str {
        &self.shared.kind
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        self.get_mut().write(reg, value)
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.get_mut().read(reg)
    }

    fn registers(&mut self) -> RegisterFile {
        self.get_mut().registers()
    }

    fn walk_shape(&self) -> u32 {
        self.get().walk_shape()
    }

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        self.get_mut().invoke(op, ctx)
    }

    fn dump(&self) -> String {
        self.get().dump()
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        self.get_mut().load(text)
    }

    fn clear(&mut self) {
        self.get_mut().clear();
    }

    fn lookahead(&self, op: u8) -> Option<u32> {
        self.get().lookahead(op)
    }

    fn ahead(&self, op: u8, keys: &AheadKeys<'_>, prefetch: bool) {
        self.get().ahead(op, keys, prefetch);
    }

    fn tick(&mut self, now: Timestamp) {
        if self.is_owner() {
            self.get_mut().tick(now);
        }
    }

    fn stats(&self) -> Vec<(String, u64)> {
        if self.is_owner() {
            self.get().stats()
        } else {
            Vec::new()
        }
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        if self.is_owner() {
            self.get_mut().as_any_mut()
        } else {
            None
        }
    }

    fn drain_events(&mut self, out: &mut Vec<CoproEvent>) {
        if self.is_owner() {
            self.get_mut().drain_events(out);
        }
    }

    /// The owner's: a fork of the instance, for a state of its own (not
    /// shared: `Application::fork` shares it again with the fork's aliases).
    /// An alias's: an error.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        match &self.alias_of {
            None => self.get_mut().fork(),
            Some(owner) => {
                Err(format!("the instance of NetPE `{owner}` that this NetPE shares forks with the whole application (Application::fork)"))
            }
        }
    }

    fn share(&self) -> WorkerShare {
        self.get().share()
    }

    fn absorb(&mut self, other: &mut dyn Coprocessor) {
        if self.is_owner() {
            self.get_mut().absorb(other);
        }
    }
}
