//! strata's integration tests, one module per subject, built as one test binary: every module
//! links the same library, so one binary is built and linked instead of one per file, and its
//! tests share the test runner's threads. Run one subject with a filter on its module name, for
//! example `cargo test -p strata --test it model::` (each module's comment gives its
//! environment variables).

mod common;

/// The allocator notes each thread's largest allocation, which the fuzz replays check.
#[global_allocator]
static ALLOC: strata::fuzz::TrackingAlloc = strata::fuzz::TrackingAlloc;

mod advise;
mod api;
mod concurrency;
mod corruption;
mod elle;
mod fuzz;
mod htap_io;
mod ingest;
mod layout;
mod load;
mod metamorphic;
mod model;
mod recovery;
mod scan;
mod txn;
mod txn_crash;
