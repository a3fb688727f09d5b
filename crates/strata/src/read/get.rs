//! Point reads: the memtables newest first, then each level's runs holding the columns still
//! needed, until the key's row is settled (a full row or a tombstone).

use super::ReadView;
use crate::catalog::workload::{wanted_columns, At, Op};
use crate::catalog::TableInfo;
use crate::codec::DecodeError;
use crate::error::{Error, Result};
use crate::mvcc::chain::Resolver;
use crate::mvcc::Kind;
use crate::sst::bloom;
use crate::sst::reader::Lookup;
use crate::sst::table_cache::TableCache;
use crate::types::row::{carries, decode_row, Cells};
use crate::version::TableVersion;

/// A read point borrowed for one point read: a [`ReadPoint`]'s parts, or a pinned view's
/// ([`crate::db`]'s point reads take no reference count on anything).
pub(crate) struct PointAt<'a> {
    pub tables: &'a TableCache,
    pub snapshot_filter: bool,
    pub view: &'a ReadView,
    pub t: &'a TableVersion,
    pub seq: u64,
}

impl PointAt<'_> {
    /// The cells of `key` (the `wanted` value columns; all with `None`); `record` counts the
    /// read in the table's workload statistics.
    pub(crate) fn get_cells(
        &self,
        info: &TableInfo,
        key: &[u8],
        wanted: Option<&[bool]>,
        record: bool,
    ) -> Result<Option<Cells>> {
        let (t, view, seq) = (self.t, self.view, self.seq);
        let types = &info.value_types;
        let nvals = types.len();
        // The projection's slot, looked up at the first place that served the read.
        let shape = std::cell::OnceCell::new();
        let served = |at: At| {
            if record {
                let cols = || wanted_columns(wanted, nvals);
                let shape = *shape.get_or_init(|| info.workload.shape(Op::PointRead, cols()));
                info.workload.record_shaped(at, Op::PointRead, cols(), shape, 0)
            }
        };
        let mut res = Resolver::new(nvals, wanted);
        let mut found = false;
        // One version per memtable: the memtable folds partial rows into the versions below them.
        for mem in std::iter::once(&view.mem).chain(view.imm.iter()) {
            let taken = mem.get(info.id, key, seq, |kind, row| {
                // A partial row giving no column still open changes nothing: pass it undecoded.
                if kind == Kind::Update && !res.takes_partial(|c| carries(row, nvals, c)) {
                    return Ok(());
                }
                let cells = if kind == Kind::Delete { Vec::new() } else { decode_row(types, row, wanted)? };
                res.push(kind, cells, None);
                Ok(())
            });
            if let Some(r) = taken {
                found = true;
                r.map_err(|e: DecodeError| Error::corruption("<memtable>", 0, e.0))?;
            }
            if res.is_settled() {
                break;
            }
        }
        if found {
            served(At::Memtable);
        }
        let hash = bloom::key_hash(key);
        // Readers and blocks are borrowed under these pins, not reference-counted.
        let (readers, blocks) = (self.tables.pin(), self.tables.blocks.pin());
        // Files left out by the snapshot filter, ruled out by bloom filters, and searched; added
        // to the shared counters once per read.
        let (mut by_snapshot, mut by_bloom, mut probed) = (0u64, 0u64, 0u64);
        for (li, level) in t.levels.iter().enumerate() {
            if res.is_settled() {
                break;
            }
            let mut found = false;
            for run in &level.runs {
                // Only the groups holding columns the read still needs (LASER §4.3).
                if !res.wants(run.cover(info, li)) {
                    continue;
                }
                let Some(f) = run.file_for(key) else { continue };
                // Snapshot filter (Kim et al. §IV): after the fence-pointer search and before the
                // bloom filter, a file whose every version is newer than the read is left out.
                if self.snapshot_filter && f.min_seq > seq {
                    by_snapshot += 1;
                    continue;
                }
                let reader = self.tables.reader(f.number, &readers)?;
                match reader.get(key, hash, seq, nvals, wanted, &mut res, &blocks)? {
                    Lookup::Outside => {}
                    Lookup::Filtered => by_bloom += 1,
                    Lookup::Probed(hit) => {
                        probed += 1;
                        found |= hit;
                        reader.heat().record(hit);
                    }
                }
            }
            if found {
                served(At::Level(li));
            }
        }
        self.tables.probes.add(by_snapshot, by_bloom, probed);
        Ok(res.finish())
    }
}
