//! Writes the generated seed inputs of the fuzz targets of `strata` into a corpus directory (by
//! default the repository's `fuzz/corpus`), one subdirectory per target: the start of a corpus
//! for a new target, or fresh seeds after a format changed (`fuzz/README.md`).
//!
//! `cargo run -p strata --example fuzz_seeds [DIR]`

fn main() -> std::io::Result<()> {
    strata::fuzz::seed_corpus_main(&strata::fuzz::targets(), env!("CARGO_MANIFEST_DIR"))
}
