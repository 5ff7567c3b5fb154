//! Memory needed once leaves the resident set: pages of a file mapping advised out, and an
//! idle Python policy's compiled interpreter once its last instance is dropped.

mod common;

use common::{admission, load_admission, node, pod, usage};
use wasmlet_plugin_host::dev::{lang_cache_dir, lang_plugin_named, lang_toolchains};
use wasmlet_plugin_host::memory::page_out;
use wasmlet_plugin_host::*;

/// The resident KiB of the mappings in `/proc/self/smaps` that `pick` selects, by their
/// address range and path.
fn resident_kib(pick: impl Fn(usize, &str) -> bool) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    let mut picked = false;
    let mut total = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((start, _)) = first.split_once('-')
            && let Ok(start) = usize::from_str_radix(start, 16)
        {
            let path = line.split_whitespace().nth(5).unwrap_or("");
            picked = pick(start, path);
        } else if picked && let Some(rss) = line.strip_prefix("Rss:") {
            total += rss
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(0);
        }
    }
    total
}

#[test]
fn pages_of_a_file_mapping_are_paged_out() {
    // On a disk, not /tmp: a tmpfs page has no file to be read back from, so without swap
    // it is never paged out.
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("wasmlet-page-out-{}", std::process::id()));
    let len = 8usize << 20;
    std::fs::write(&path, vec![7u8; len]).expect("write");
    let file = std::fs::File::open(&path).expect("open");
    // SAFETY: a private read-only mapping of a file this test owns, unmapped below.
    #[allow(unsafe_code)]
    let base = unsafe {
        use std::os::fd::AsRawFd;
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    let bytes = base as *const u8;
    // SAFETY: within the mapping.
    #[allow(unsafe_code)]
    let sum: u64 = (0..len)
        .step_by(4096)
        .map(|i| u64::from(unsafe { bytes.add(i).read_volatile() }))
        .sum();
    assert_eq!(sum, 7 * (len as u64 / 4096));
    let mapping = |start: usize, _: &str| start == base as usize;
    let touched = resident_kib(mapping);
    assert!(
        touched >= 8 << 10,
        "{touched} KiB resident after touching 8 MiB"
    );
    // SAFETY: the range is the mapping's.
    #[allow(unsafe_code)]
    let range = bytes..unsafe { bytes.add(len) };
    assert!(page_out(range), "MADV_PAGEOUT (Linux 5.4)");
    let after = resident_kib(mapping);
    assert!(after < 1 << 10, "{after} KiB still resident");
    // What was paged out reads back as it was.
    #[allow(unsafe_code)]
    let again: u64 = (0..len)
        .step_by(4096)
        .map(|i| u64::from(unsafe { bytes.add(i).read_volatile() }))
        .sum();
    assert_eq!(again, sum);
    #[allow(unsafe_code)]
    unsafe {
        libc::munmap(base, len);
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_own_executables_pages_are_paged_out() {
    let exe = std::fs::read_link("/proc/self/exe").expect("exe");
    let exe = exe.to_str().expect("utf-8").to_owned();
    let before = resident_kib(|_, path| path == exe);
    let advised = wasmlet_plugin_host::memory::page_out_own_executable();
    assert!(advised > 0, "the executable is mapped");
    let after = resident_kib(|_, path| path == exe);
    assert!(
        after < before,
        "{before} KiB resident before, {after} after"
    );
}

/// A Python policy's compiled code (an interpreter, tens of megabytes) and its instances'
/// heaps leave the resident set once its last idle instance is dropped, and the next
/// decision reads them back.
#[tokio::test(start_paused = true)]
async fn an_idle_python_policys_code_is_paged_out() {
    if lang_toolchains().is_none() {
        return;
    }
    let component = lang_plugin_named("restricted-pods-python");
    let engine = PluginEngine::with_cache(&lang_cache_dir()).expect("engine");
    let policy = load_admission(&engine, "restricted-pods", &component, Limits::default());
    let cache = std::fs::canonicalize(lang_cache_dir()).expect("the cache");
    let cache = cache.to_string_lossy().into_owned();
    let digest = policy.digest().to_owned();
    let entries = |_: usize, path: &str| path.starts_with(&cache) && path.contains(&digest);
    let admission = admission(&pod(Vec::new()), &node(), &usage(&[]));
    // Three decisions at once: up to three instances, each with its own interpreter heap.
    let (first, second, third) = tokio::join!(
        policy.admit(&admission),
        policy.admit(&admission),
        policy.admit(&admission)
    );
    let first = first.expect("admit");
    assert_eq!(
        format!("{first:?}"),
        format!("{:?}", second.expect("admit"))
    );
    assert_eq!(format!("{first:?}"), format!("{:?}", third.expect("admit")));
    let working = resident_kib(entries);
    assert!(
        working > 4 << 10,
        "{working} KiB of the interpreter resident after a decision"
    );
    assert!(policy.idle_instances() >= 1);
    tokio::time::sleep(IDLE_INSTANCE_LIFETIME * 2).await;
    assert_eq!(policy.idle_instances(), 0);
    let idle = resident_kib(entries);
    // What stays: the first 256 KiB of each memory slot an instance used (written over
    // the entry's memory image, so counted in its mapping), reset in place for the next
    // instance — three instances or more (a spare may be made ahead under load) of a
    // few memories each: about a megabyte, against the 30 MB of a decision.
    assert!(
        idle < 2 << 10,
        "{idle} KiB resident when idle, {working} KiB when deciding"
    );
    let again = policy
        .admit(&admission)
        .await
        .expect("admit after a quiet spell");
    assert_eq!(format!("{first:?}"), format!("{again:?}"));
}
