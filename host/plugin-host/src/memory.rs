//! Giving the allocator's free pages back to the kernel.
//!
//! glibc returns memory to the kernel only from the top of an arena, and only past its
//! trim threshold; what a burst of work frees in the middle of an arena — a component's
//! bytes, the start of thirty pods, a relist's decoding — stays resident, counted in the
//! process's RSS until the same arena reuses it. `malloc_trim(0)` walks every arena and
//! hands each whole free page back (`MADV_DONTNEED`), keeping the arenas themselves.

/// Returns the allocator's free pages to the kernel; `false` where the allocator offers
/// no way to (not glibc).
pub fn return_free_pages() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only releases memory the allocator holds as free; it
        // touches no live allocation and is safe to call from any thread.
        #[allow(unsafe_code)]
        unsafe {
            libc::malloc_trim(0);
        }
        true
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Caps the allocator's arenas at `arenas`, unless the operator chose otherwise
/// (`MALLOC_ARENA_MAX`). glibc gives threads arenas of their own, up to eight per core,
/// and memory freed in one arena serves only the threads that use it: a node agent's
/// threads are few and mostly idle, and its allocations small enough for each thread's
/// cache, so a couple of arenas cost no time and keep what is freed where it is reused.
/// Call it before threads start.
pub fn limit_arenas(arenas: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt sets one of the allocator's tunables; M_ARENA_MAX only bounds
        // how many arenas later threads may be given.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}
