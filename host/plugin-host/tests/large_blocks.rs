//! Large blocks go back to the kernel when freed, whatever was freed before them: a test
//! of its own, so that no other test allocates in this process while it counts resident
//! memory.

mod common;

use common::rss_anon_kib;

/// What a node loading a Python and then a TypeScript policy does: the first
/// component's bytes (18 MB) freed, then the second's (12 MB) read and freed, on a thread
/// of their own (a blocking task). With glibc's moving threshold the second lands in the
/// thread's arena and stays resident.
#[test]
fn a_large_block_freed_after_another_leaves_nothing_resident() {
    wasmlet_plugin_host::memory::map_large_blocks();
    std::thread::spawn(|| {
        let before = rss_anon_kib();
        let first = vec![1u8; 18 << 20];
        assert_eq!(first[first.len() - 1], 1);
        drop(first);
        let second = vec![2u8; 12 << 20];
        assert_eq!(second[second.len() - 1], 2);
        drop(second);
        let after = rss_anon_kib();
        assert!(
            after < before + (2 << 10),
            "{before} KiB before, {after} KiB after both blocks were freed"
        );
    })
    .join()
    .expect("the thread");
}
