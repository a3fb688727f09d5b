//! The write path before the memtable: batches of row operations ([`batch`]) and the
//! write-ahead log they are made durable in ([`wal`]). Group commit lives in the database
//! (`db::write`), which owns the WAL writer.

pub mod batch;
pub mod wal;
