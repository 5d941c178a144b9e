//! The parser contexts closed files resume in, one copy of each, counted.
//!
//! A node has few distinct contexts (a job, an actor class, the last task's
//! name), so files share them: an entry holds a 4-byte [`Ctx`] into the pool
//! rather than an 8-byte `Arc` (4 MB at a million files). Every change of an
//! entry's context goes through [`ContextPool::set`], which keeps the count of
//! entries holding each one; a context no entry holds is dropped at once and its
//! slot reused.

use std::collections::HashMap;
use std::sync::Arc;

use crate::agent::checkpoint::SavedContext;

/// A context's slot in the pool (or none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx(u32);

impl Ctx {
    pub const NONE: Ctx = Ctx(u32::MAX);

    pub fn is_none(self) -> bool {
        self == Ctx::NONE
    }
}

struct Slot {
    ctx: Option<Arc<SavedContext>>,
    holders: u32,
}

#[derive(Default)]
pub struct ContextPool {
    slots: Vec<Slot>,
    index: HashMap<Arc<SavedContext>, u32>,
    free: Vec<u32>,
}

impl ContextPool {
    /// The context `c` stands for.
    pub fn get(&self, c: Ctx) -> Option<&Arc<SavedContext>> {
        if c.is_none() {
            return None;
        }
        self.slots[c.0 as usize].ctx.as_ref()
    }

    /// A reference standing for `c` (none: `None`) in place of `at`, which is let go.
    pub fn set(&mut self, at: Ctx, c: Option<Arc<SavedContext>>) -> Ctx {
        let new = match c {
            Some(c) => self.hold(c),
            None => Ctx::NONE,
        };
        self.release(at);
        new
    }

    fn hold(&mut self, c: Arc<SavedContext>) -> Ctx {
        if let Some(&i) = self.index.get(&*c) {
            self.slots[i as usize].holders += 1;
            return Ctx(i);
        }
        let slot = Slot { ctx: Some(c.clone()), holders: 1 };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                u32::try_from(self.slots.len() - 1).expect("over 4 billion distinct contexts")
            }
        };
        self.index.insert(c, i);
        Ctx(i)
    }

    /// One holder of `c` less (an entry forgotten, or given another context).
    pub fn release(&mut self, c: Ctx) {
        if c.is_none() {
            return;
        }
        let s = &mut self.slots[c.0 as usize];
        debug_assert!(s.holders > 0, "context {c:?} released more often than held");
        s.holders = s.holders.saturating_sub(1);
        if s.holders == 0 {
            if let Some(ctx) = s.ctx.take() {
                self.index.remove(&*ctx);
            }
            self.free.push(c.0);
        }
    }

    /// How many distinct contexts are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.index.len()
    }
}
