//! The fuzz targets of strata's decoders (`strata::fuzz`) replayed on stable: each target's
//! corpus in `fuzz/corpus/<target>/`, its generated seeds and `STRATA_FUZZ_INPUTS` (default
//! 3000) inputs mutated from them, none of which may panic, hang or allocate out of proportion.
//! The mutations come from a new seed each run, printed; `STRATA_SEEDS=<seed>` replays one.
//! Long runs under libFuzzer: `fuzz/README.md`.

fn replay(name: &str) {
    strata::fuzz::replay_test(&strata::fuzz::targets(), name, env!("CARGO_MANIFEST_DIR"));
}

/// One test per target, so each shows by name.
macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                replay(stringify!($name));
            }
        )*

        #[test]
        fn every_target_is_replayed() {
            let tested = [$(stringify!($name)),*];
            for t in strata::fuzz::targets() {
                assert!(tested.contains(&t.name), "fuzz target {} has no replay test", t.name);
            }
        }
    };
}

targets!(block, sst_file, row_group_file, bloom, zone_map, wal, manifest, checkpoint, marks, row);

/// Every input that once crashed a target (`fuzz/regressions/<target>/`, each named after the
/// bug) runs clean.
#[test]
fn saved_crash_inputs_run_clean() {
    let targets = strata::fuzz::targets();
    let ran: usize =
        targets.iter().map(|t| strata::fuzz::regressions(&targets, t.name, None, env!("CARGO_MANIFEST_DIR"))).sum();
    assert!(ran >= 4, "only {ran} saved inputs found");
}

/// Found by `row_group_file`: two index entries naming pages at one offset took each other's
/// cached pages, and a read took a key page (no columns) for a group's page and indexed past its
/// columns. Pages that overlap are now corrupt when the file is opened.
#[test]
fn row_group_pages_sharing_an_offset_are_corrupt() {
    let n = strata::fuzz::regressions(
        &strata::fuzz::targets(),
        "row_group_file",
        Some("pages-sharing-an-offset"),
        env!("CARGO_MANIFEST_DIR"),
    );
    assert_eq!(n, 1);
}
