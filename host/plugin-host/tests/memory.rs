//! The allocator's free pages go back to the kernel: a test of its own, so that no other
//! test allocates in this process while it counts resident memory.

mod common;

use common::rss_anon_kib;

#[test]
fn pages_freed_in_the_middle_of_an_arena_are_returned() {
    const BLOCK: usize = 8 << 10;
    const BLOCKS: usize = 8 << 10; // 64 MiB of small blocks, each below glibc's mmap threshold
    let before = rss_anon_kib();
    let mut blocks: Vec<Vec<u8>> = (0..BLOCKS)
        .map(|i| vec![(i % 251) as u8 + 1; BLOCK])
        .collect();
    // The last block stays: it holds the arena's top, so freeing the others returns
    // nothing by itself — what a burst of work leaves behind.
    let kept = blocks.pop().expect("a block");
    drop(blocks);
    let freed = rss_anon_kib();
    assert!(
        freed > before + (32 << 10),
        "the freed blocks should still be resident: {before} KiB before, {freed} KiB after freeing"
    );
    assert!(
        wasmlet_plugin_host::memory::return_free_pages(),
        "glibc on Linux"
    );
    let returned = rss_anon_kib();
    assert!(
        returned + (32 << 10) < freed,
        "at least 32 of the 64 MiB freed should be returned: {freed} KiB before, {returned} KiB after"
    );
    assert_eq!(
        kept[0],
        ((BLOCKS - 1) % 251) as u8 + 1,
        "the kept block is untouched"
    );
}
