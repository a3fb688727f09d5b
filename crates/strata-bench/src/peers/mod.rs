//! The systems strata is compared with, each behind a cargo feature so the core workspace builds
//! and tests without them (`scripts/install-peers.sh` installs what they need).

#[cfg(feature = "duckdb")]
pub(crate) mod duckdb;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "rocksdb")]
pub(crate) mod rocksdb;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

/// The Python that runs DuckDB's helpers: `STRATA_BENCH_PYTHON`, else the virtual environment
/// scripts/install-peers.sh makes (`target/peers-venv`), else `python3` on the PATH.
pub(crate) fn python() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("STRATA_BENCH_PYTHON") {
        return p.into();
    }
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/peers-venv/bin/python3");
    if venv.exists() {
        return venv;
    }
    "python3".into()
}

/// The peers this binary was built with, in the order runs take them.
pub(crate) fn built() -> Vec<&'static str> {
    [
        ("rocksdb", cfg!(feature = "rocksdb")),
        ("postgres", cfg!(feature = "postgres")),
        ("duckdb", cfg!(feature = "duckdb")),
        ("sqlite", cfg!(feature = "sqlite")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect()
}

/// How an LSM peer's tree is shaped: like strata's defaults, or like the deep tree (size ratio 2,
/// small memtable and Level-1) LASER's workload runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tuning {
    Default,
    DeepTree,
}

/// Opens a peer as a [`Tables`](crate::tables::Tables) store with `def` created, and says how it
/// is configured. `threads` is how many threads one query may use (PostgreSQL's parallel
/// workers plus its leader, DuckDB's threads), so scans compare thread for thread.
pub(crate) fn open_tables(
    system: &str,
    dir: &std::path::Path,
    def: &crate::tables::TableDef,
    tuning: Tuning,
    threads: usize,
) -> Result<(Box<dyn crate::tables::Tables>, String), String> {
    let _ = (dir, def, tuning, threads);
    match system {
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok((Box::new(sqlite::SqliteTables::open(dir, def)?), sqlite::CONFIG.into())),
        #[cfg(feature = "postgres")]
        "postgres" => {
            let t = postgres::PostgresTables::open(dir, def, threads)?;
            let config = t.config();
            Ok((Box::new(t), config))
        }
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Ok((Box::new(rocksdb::RocksTables::open(dir, def, tuning)?), rocksdb::config(tuning))),
        #[cfg(feature = "duckdb")]
        "duckdb" => {
            let t = duckdb::DuckTables::open(dir, def, threads)?;
            let config = t.config();
            Ok((Box::new(t), config))
        }
        other => Err(not_built(other)),
    }
}

/// [`open_tables`] for workloads that run [`Tables::update_txn`](crate::tables::Tables::update_txn):
/// RocksDB opens as a `TransactionDB` (its plain `DB` has no transactions); every other system
/// as `open_tables` opens it.
pub(crate) fn open_txn_tables(
    system: &str,
    dir: &std::path::Path,
    def: &crate::tables::TableDef,
) -> Result<(Box<dyn crate::tables::Tables>, String), String> {
    match system {
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Ok((Box::new(rocksdb::RocksTxnTables::open(dir, def)?), rocksdb::TXN_CONFIG.into())),
        other => open_tables(other, dir, def, Tuning::Default, 1),
    }
}

/// Why a system cannot run.
pub(crate) fn not_built(system: &str) -> String {
    let built = built().iter().map(|p| format!(", {p}")).collect::<String>();
    if ["rocksdb", "postgres", "duckdb", "sqlite"].contains(&system) {
        format!(
            "system `{system}` is not built into this strata-bench (built: strata{built}); build with \
             `--features {system}` after scripts/install-peers.sh"
        )
    } else {
        format!("unknown system `{system}` (strata, rocksdb, postgres, duckdb, sqlite; built here: strata{built})")
    }
}

/// A few connections for systems driven through one connection per client thread: a thread
/// takes whichever is free.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "duckdb"))]
pub(crate) struct Pool<T>(Vec<parking_lot::Mutex<T>>);

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "duckdb"))]
impl<T> Pool<T> {
    pub fn new(conns: Vec<T>) -> Self {
        Pool(conns.into_iter().map(parking_lot::Mutex::new).collect())
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        for c in &self.0 {
            if let Some(mut g) = c.try_lock() {
                return f(&mut g);
            }
        }
        f(&mut self.0[0].lock())
    }
}
