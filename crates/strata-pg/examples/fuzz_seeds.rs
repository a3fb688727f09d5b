//! Writes the generated seed inputs of the fuzz targets of `strata_pg` into a corpus directory (by
//! default the repository's `fuzz/corpus`), one subdirectory per target: the start of a corpus
//! for a new target, or fresh seeds after a format changed (`fuzz/README.md`).
//!
//! `cargo run -p strata-pg --example fuzz_seeds [DIR]`

fn main() -> std::io::Result<()> {
    strata::fuzz::seed_corpus_main(&strata_pg::fuzz::targets(), env!("CARGO_MANIFEST_DIR"))
}
