//! What a parsed policy costs in memory: every parsed state reports its weight, the bytes
//! it holds on the heap plus its own size, so the policy cache can bound its memory in
//! bytes whatever the files. The count follows each type's fields and rounds up:
//! every allocation is charged [`ALLOCATION_OVERHEAD`] more, and text shared through an
//! `Arc` is charged to every holder, so the weight errs high, never low
//! (`tests/weight.rs` checks it against a counting allocator).
//!
//! Never: measures anything at run time (no allocator hooks, no I/O): it is arithmetic
//! over the parsed form.

use std::borrow::Cow;
use std::mem::size_of;
use std::sync::Arc;

use super::{Diagnostic, Limit, PolicyReport, Reason};

/// What the allocator adds to each block (header and rounding), charged per allocation.
pub const ALLOCATION_OVERHEAD: usize = 16;

/// Heap bytes owned by a value (its own `size_of` is counted by whoever holds it).
pub trait Weigh {
    /// The bytes this value holds on the heap, allocator overhead included.
    fn heap_bytes(&self) -> usize;
}

/// One allocation of `bytes` (none for zero).
pub(crate) fn allocation(bytes: usize) -> usize {
    if bytes == 0 { 0 } else { bytes + ALLOCATION_OVERHEAD }
}

impl Weigh for String {
    fn heap_bytes(&self) -> usize {
        allocation(self.capacity())
    }
}

impl Weigh for Box<str> {
    fn heap_bytes(&self) -> usize {
        allocation(self.len())
    }
}

impl Weigh for Arc<str> {
    fn heap_bytes(&self) -> usize {
        // The two reference counts sit before the text.
        allocation(2 * size_of::<usize>() + self.len())
    }
}

impl Weigh for Cow<'static, str> {
    fn heap_bytes(&self) -> usize {
        match self {
            Cow::Borrowed(_) => 0,
            Cow::Owned(text) => text.heap_bytes(),
        }
    }
}

impl<T: Weigh> Weigh for Vec<T> {
    fn heap_bytes(&self) -> usize {
        allocation(self.capacity() * size_of::<T>()) + self.iter().map(Weigh::heap_bytes).sum::<usize>()
    }
}

impl<T: Weigh> Weigh for Option<T> {
    fn heap_bytes(&self) -> usize {
        self.as_ref().map_or(0, Weigh::heap_bytes)
    }
}

impl<T: Weigh> Weigh for Box<T> {
    fn heap_bytes(&self) -> usize {
        allocation(size_of::<T>()) + (**self).heap_bytes()
    }
}

impl<T: Weigh> Weigh for Arc<T> {
    fn heap_bytes(&self) -> usize {
        allocation(2 * size_of::<usize>() + size_of::<T>()) + (**self).heap_bytes()
    }
}

impl<T: Weigh> Weigh for Arc<[T]> {
    fn heap_bytes(&self) -> usize {
        allocation(2 * size_of::<usize>() + self.len() * size_of::<T>())
            + self.iter().map(Weigh::heap_bytes).sum::<usize>()
    }
}

impl<A: Weigh, B: Weigh> Weigh for (A, B) {
    fn heap_bytes(&self) -> usize {
        self.0.heap_bytes() + self.1.heap_bytes()
    }
}

macro_rules! weightless {
    ($($t:ty),*) => { $(impl Weigh for $t { fn heap_bytes(&self) -> usize { 0 } })* };
}
weightless!(bool, u8, u16, u32, u64, usize);

impl Weigh for Reason {
    fn heap_bytes(&self) -> usize {
        self.rule.heap_bytes() + self.digest.heap_bytes()
    }
}

impl Weigh for Limit {
    fn heap_bytes(&self) -> usize {
        self.reason.heap_bytes()
    }
}

impl Weigh for Diagnostic {
    fn heap_bytes(&self) -> usize {
        self.code.heap_bytes() + self.message.heap_bytes()
    }
}

impl Weigh for PolicyReport {
    fn heap_bytes(&self) -> usize {
        self.digest.heap_bytes() + self.diagnostics.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_charge_capacity_elements_and_overhead() {
        assert_eq!(String::new().heap_bytes(), 0);
        assert_eq!(String::from("abc").heap_bytes(), 3 + ALLOCATION_OVERHEAD);
        let texts = vec![String::from("ab"), String::new()];
        let elements = texts.capacity() * size_of::<String>();
        assert_eq!(texts.heap_bytes(), elements + ALLOCATION_OVERHEAD + 2 + ALLOCATION_OVERHEAD);
        let shared: Arc<str> = Arc::from("abcd");
        assert_eq!(shared.heap_bytes(), 2 * size_of::<usize>() + 4 + ALLOCATION_OVERHEAD);
    }
}
