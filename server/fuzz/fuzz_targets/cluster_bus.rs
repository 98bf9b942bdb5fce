//! Any bytes as a cluster peer's stream: see `relcache_server::fuzzing::cluster_bus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    relcache_server::fuzzing::cluster_bus(data);
});
