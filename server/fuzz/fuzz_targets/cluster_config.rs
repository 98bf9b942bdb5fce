//! Any text as a cluster config file: see `relcache_server::fuzzing::cluster_config`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        relcache_server::fuzzing::cluster_config(text);
    }
});
