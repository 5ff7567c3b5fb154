//! The process's allocator: glibc's for the agent and the controller, mimalloc for the
//! commands that compile components (`wasmlet plugin …`, the agent's compiler process
//! among them).
//!
//! Compiling a Python policy is tens of thousands of functions compiled on every core,
//! each leaving buffers that another thread frees. With glibc's arenas those frees
//! contend for the allocating thread's arena lock, and the compile's 300 MB are faulted
//! in page by page: measured, 1.11–1.15 s of compile in the compiler process with
//! glibc, 0.55–0.75 s with mimalloc (bench/LOG.md, "The compiler process: mimalloc,
//! without huge pages").
//! The agent keeps glibc: its idle memory is tuned for it (arenas, the mmap threshold,
//! pages given back after a large read) and it never compiles unless its compiler
//! process cannot be run.
//!
//! The choice is made once, early in `main` ([`use_mimalloc`]); what was allocated
//! before it stays glibc's and goes back to glibc, told apart by address — mimalloc
//! knows its own segments.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

/// Whether new blocks come from mimalloc. Set once, never cleared.
static MIMALLOC: AtomicBool = AtomicBool::new(false);

/// From now on this process allocates with mimalloc, in pages of 4 KiB.
///
/// Not in transparent huge pages, unless the operator asks mimalloc for them
/// (`MIMALLOC_ALLOW_THP`): a compile's memory is touched once and gone with the process,
/// and where freed memory goes back to a hypervisor (this machine's balloon) every huge
/// page faulted in is 2 MiB the host provides anew. Measured on a Python policy, the
/// first compile after ten idle seconds: 1.05–1.15 s with huge pages, 0.72–0.77 s
/// without; back to back 0.58–0.91 s and 0.72–0.82 s.
pub fn use_mimalloc() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: PR_SET_THP_DISABLE only sets this process's flag that keeps later page
        // faults from mapping transparent huge pages; no memory changes.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
    MIMALLOC.store(true, Ordering::Release);
}

/// glibc's allocator until [`use_mimalloc`], mimalloc after it.
pub struct Switch;

impl Switch {
    /// Whether `ptr` is a block of mimalloc's. Only once it may have any: until then
    /// every block is glibc's and mimalloc is not asked.
    fn mimallocs(ptr: *mut u8) -> bool {
        MIMALLOC.load(Ordering::Acquire)
            // SAFETY: `mi_is_in_heap_region` only looks the address up in mimalloc's
            // map of its segments; any pointer may be asked about.
            && unsafe { libmimalloc_sys::mi_is_in_heap_region(ptr.cast()) }
    }
}

// SAFETY: every block is allocated by one of the two allocators and freed, resized or
// zeroed by the same one: new blocks come from the allocator chosen at the time, and a
// block is given back to mimalloc only if it lies in one of mimalloc's segments, which
// no block of glibc's does. Each allocator upholds `GlobalAlloc`'s contract itself.
unsafe impl GlobalAlloc for Switch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MIMALLOC.load(Ordering::Acquire) {
            // SAFETY: the caller's contract, passed on.
            unsafe { MiMalloc.alloc(layout) }
        } else {
            // SAFETY: as above.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if MIMALLOC.load(Ordering::Acquire) {
            // SAFETY: the caller's contract, passed on.
            unsafe { MiMalloc.alloc_zeroed(layout) }
        } else {
            // SAFETY: as above.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if Self::mimallocs(ptr) {
            // SAFETY: the block is mimalloc's (see the impl's comment).
            unsafe { MiMalloc.dealloc(ptr, layout) }
        } else {
            // SAFETY: the block is glibc's.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if Self::mimallocs(ptr) {
            // SAFETY: the block is mimalloc's; the rest is the caller's contract.
            unsafe { MiMalloc.realloc(ptr, layout, new_size) }
        } else {
            // SAFETY: the block is glibc's; it stays glibc's when it grows.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_from_before_the_switch_go_back_to_glibc_and_new_ones_to_mimalloc() {
        // Only this test switches (for good: a block mimalloc made must never be taken
        // for glibc's, so the switch is never turned back).
        let switch = Switch;
        let layout = Layout::from_size_align(4096, 16).expect("layout");
        // SAFETY: a non-zero layout; each block is freed once, with its layout.
        unsafe {
            let before = switch.alloc(layout);
            assert!(!before.is_null());
            assert!(!libmimalloc_sys::mi_is_in_heap_region(before.cast()));
            use_mimalloc();
            let after = switch.alloc_zeroed(layout);
            assert!(!after.is_null());
            assert!(libmimalloc_sys::mi_is_in_heap_region(after.cast()));
            assert!(
                std::slice::from_raw_parts(after, 4096)
                    .iter()
                    .all(|b| *b == 0)
            );
            let grown_before = switch.realloc(before, layout, 1 << 20);
            assert!(!libmimalloc_sys::mi_is_in_heap_region(grown_before.cast()));
            let grown_after = switch.realloc(after, layout, 1 << 20);
            assert!(libmimalloc_sys::mi_is_in_heap_region(grown_after.cast()));
            let big = Layout::from_size_align(1 << 20, 16).expect("layout");
            switch.dealloc(grown_before, big);
            switch.dealloc(grown_after, big);
        }
    }
}
