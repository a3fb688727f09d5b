//! Runs a target of the crates by name (each `fuzz_targets/<name>.rs` calls [`run`]).

use std::collections::HashMap;
use std::sync::OnceLock;

fn all() -> &'static HashMap<&'static str, fn(&[u8])> {
    static ALL: OnceLock<HashMap<&'static str, fn(&[u8])>> = OnceLock::new();
    ALL.get_or_init(|| {
        #[allow(unused_mut)]
        let mut targets = strata::fuzz::targets();
        #[cfg(feature = "cli")]
        targets.extend(strata_cli::fuzz::targets());
        #[cfg(feature = "pg")]
        targets.extend(strata_pg::fuzz::targets());
        targets.into_iter().map(|t| (t.name, t.run)).collect()
    })
}

/// Runs target `name` on `data`, checksums unchecked (see `strata::fuzz`).
pub fn run(name: &str, data: &[u8]) {
    let Some(run) = all().get(name) else {
        panic!("no fuzz target {name} in this build (the CLI's need --features cli, the server's --features pg)")
    };
    let _unchecked = strata::fuzz::Unchecked::new();
    run(data);
}
