//! Handing out read points: a sequence number and the read view holding everything at or below
//! it, taken together (see [`DbInner::read_point`]). The reading itself lives in [`crate::read`]
//! and [`crate::scan`].

use std::sync::Arc;

use super::{DbInner, ReadOptions, ReadView, TableInfo};
use crate::catalog::Projection;
use crate::error::{Error, Result};
use crate::read::{record_scan, ReadPoint, ScanIter};
use crate::types::row::Cells;

impl DbInner {
    /// The sequence number to read at and a view holding everything at or below it. With no
    /// snapshot, the pair is taken atomically with compaction's snapshot capture, so versions the
    /// read needs cannot be collapsed away under it.
    pub(crate) fn read_point(&self, ropts: &ReadOptions<'_>) -> Result<(u64, Arc<ReadView>)> {
        match self.snapshot_seq(ropts)? {
            Some(seq) => Ok((seq, self.view.read().clone())),
            None => Ok(self.snapshots.with_visible(|seq| (seq, self.view.read().clone()))),
        }
    }

    /// The sequence number of the snapshot `ropts` names, if any (refused when it belongs to
    /// another database).
    pub(crate) fn snapshot_seq(&self, ropts: &ReadOptions<'_>) -> Result<Option<u64>> {
        match ropts.snapshot {
            Some(s) if !s.belongs_to(&self.snapshots) => {
                Err(Error::InvalidArgument("the snapshot belongs to another database".into()))
            }
            s => Ok(s.map(|s| s.seq())),
        }
    }

    /// A read point of table `info` (the database must be open).
    pub(crate) fn read_point_of(&self, info: &TableInfo, ropts: &ReadOptions<'_>) -> Result<ReadPoint> {
        self.check_open()?;
        let (seq, view) = self.read_point(ropts)?;
        let t = view.version.tables.get(&info.id).cloned().ok_or_else(|| Error::UnknownTable(info.name.clone()))?;
        Ok(ReadPoint { tables: self.tables.clone(), snapshot_filter: self.opts.snapshot_filter, view, t, seq })
    }

    pub(crate) fn get_cells(
        &self,
        info: &TableInfo,
        key: &[u8],
        wanted: Option<&[bool]>,
        ropts: &ReadOptions<'_>,
    ) -> Result<Option<Cells>> {
        self.read_point_of(info, ropts)?.get_cells(info, key, wanted, true)
    }

    pub(crate) fn scan(
        &self,
        info: &Arc<TableInfo>,
        lower: Vec<u8>,
        upper: Option<Vec<u8>>,
        projection: &Projection,
        ropts: &ReadOptions<'_>,
    ) -> Result<ScanIter> {
        let rp = self.read_point_of(info, ropts)?;
        record_scan(info, &rp.t, &lower, upper.as_deref(), projection.wanted().map(|w| &w[..]));
        Ok(rp.rows(info, lower, upper, projection))
    }
}
