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

/// Blocks of a mebibyte or more are always mapped on their own, and unmapped when freed,
/// unless the operator chose otherwise (`MALLOC_MMAP_THRESHOLD_`). glibc's default
/// threshold moves: freeing a large mapped block raises it to that block's size (up to
/// 32 MiB), so the next component read lands in an arena — and memory freed at the top of
/// a thread's arena is neither trimmed by `malloc_trim` nor given back below a trim
/// threshold raised along with it. Measured: one run in three of a node loading a Python
/// and a TypeScript policy kept both components' bytes, 26–28 MB, for good. Call it
/// before threads start.
pub fn map_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: mallopt sets one of the allocator's tunables; a fixed mmap threshold
        // only decides where later blocks of that size come from.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        }
    }
}

/// Asks the kernel to reclaim the pages of `range` now (`MADV_PAGEOUT`, Linux 5.4): the
/// clean file-backed pages there — code and read-only data — leave the process's resident
/// set and, unless another process maps them, the page cache; a page touched again is
/// read back from its file. Nothing is lost: a page written privately stays (no swap) or
/// goes to swap. For memory that was needed once and may never be again. Returns whether
/// the kernel took the advice.
pub fn page_out(range: std::ops::Range<*const u8>) -> bool {
    #[cfg(target_os = "linux")]
    {
        let page = 4096usize;
        let start = (range.start as usize).div_ceil(page) * page;
        let end = range.end as usize / page * page;
        if end <= start {
            return false;
        }
        // SAFETY: MADV_PAGEOUT is advice about residency: it never changes what a page
        // holds (clean pages are read back from their file, written ones kept or
        // swapped), so no live data in the range is disturbed.
        #[allow(unsafe_code)]
        let result =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT) };
        result == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = range;
        false
    }
}

/// Pages out ([`page_out`]) the mappings of this process's own executable: what start-up
/// alone ran (parsing the configuration, compiling or loading the plugins, adopting the
/// node's pods) stops counting in its resident memory, and what steady work runs comes
/// back on first touch. Returns the bytes advised.
pub fn page_out_own_executable() -> usize {
    match std::fs::read_link("/proc/self/exe") {
        Ok(exe) => page_out_file(&exe),
        Err(_) => 0,
    }
}

/// Pages out every mapping of the file mapped at `address` (a compiled component is
/// mapped once for its code and again into each memory slot its instances used).
/// Returns the bytes advised; 0 when no file is mapped there.
pub fn page_out_file_at(address: *const u8) -> usize {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let address = address as usize;
    let file = mappings(&maps).find(|(range, _)| range.contains(&address));
    match file {
        Some((_, path)) if path.starts_with('/') => page_out_in(&maps, std::path::Path::new(path)),
        _ => 0,
    }
}

/// Pages out every mapping of `file` in this process. Returns the bytes advised.
fn page_out_file(file: &std::path::Path) -> usize {
    match std::fs::read_to_string("/proc/self/maps") {
        Ok(maps) => page_out_in(&maps, file),
        Err(_) => 0,
    }
}

fn page_out_in(maps: &str, file: &std::path::Path) -> usize {
    mappings(maps)
        .filter(|(_, path)| std::path::Path::new(path) == file)
        .filter(|(range, _)| page_out(range.start as *const u8..range.end as *const u8))
        .map(|(range, _)| range.len())
        .sum()
}

/// The address ranges in `/proc/<pid>/maps`, each with its path (empty for anonymous
/// memory).
fn mappings(maps: &str) -> impl Iterator<Item = (std::ops::Range<usize>, &str)> {
    maps.lines().filter_map(|line| {
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let path = fields.nth(4).unwrap_or("").trim_start();
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        Some((start..end, path))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_are_read_from_maps() {
        let maps = "\
55d0c0000000-55d0c0100000 r--p 00000000 fe:00 123  /usr/bin/wasmlet
55d0c0100000-55d0c0900000 r-xp 00100000 fe:00 123  /usr/bin/wasmlet
55d0c0900000-55d0c0a00000 rw-p 00000000 00:00 0 \n\
7f0000000000-7f0000100000 r-xp 00000000 fe:00 77   /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000300000 r--p 00000000 fe:00 124  /usr/bin/wasmlet-other
";
        let all: Vec<_> = mappings(maps).collect();
        assert_eq!(all.len(), 5);
        assert_eq!(all[0], (0x55d0c0000000..0x55d0c0100000, "/usr/bin/wasmlet"));
        assert_eq!(all[2], (0x55d0c0900000..0x55d0c0a00000, ""));
        assert_eq!(all[3].1, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(all[4].1, "/usr/bin/wasmlet-other");
    }
}
