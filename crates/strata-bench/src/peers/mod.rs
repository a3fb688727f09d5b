//! The systems strata is compared with, each behind a cargo feature so the core workspace builds
//! and tests without them (`scripts/install-peers.sh` installs what they need).

#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "rocksdb")]
pub(crate) mod rocksdb;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

/// The peers this binary was built with.
pub(crate) fn built() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "postgres") {
        v.push("postgres");
    }
    if cfg!(feature = "rocksdb") {
        v.push("rocksdb");
    }
    if cfg!(feature = "sqlite") {
        v.push("sqlite");
    }
    v
}
