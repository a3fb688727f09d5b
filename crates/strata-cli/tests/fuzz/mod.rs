//! The CLI's fuzz targets (`strata_cli::fuzz`: `--where` text and `exec` sessions) replayed on
//! stable, as `strata`'s own are (`crates/strata/tests/it/fuzz.rs`).

fn replay(name: &str) {
    strata::fuzz::replay_test(&strata_cli::fuzz::targets(), name, env!("CARGO_MANIFEST_DIR"));
}

#[test]
fn where_clause() {
    replay("where_clause");
}

#[test]
fn exec() {
    replay("exec");
}
