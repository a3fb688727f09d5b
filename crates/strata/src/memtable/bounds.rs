//! What a memtable holds of each table, summed up as it is written: how many full rows, deletes
//! and partial rows, and per value column a zone map over every version carrying it (any
//! sequence number). A scan reads them to know, without walking the memtable, that it cannot
//! change an answer: a filter false over both the block's and the memtable's bounds, a MIN or
//! MAX no memtable value can beat, a column no memtable version carries.
//!
//! Bounds only ever widen, and a writer widens them before its versions become visible, so at
//! any read point they cover every version the read can see.

use crate::codec::DecodeResult;
use crate::mvcc::Kind;
use crate::sst::zone::{ZoneBuilder, ZoneMap};
use crate::types::row::RowIter;
use crate::types::ColumnType;

/// Bounds over versions of one table.
#[derive(Debug, Clone)]
pub(crate) struct TableBounds {
    /// Full rows.
    pub puts: u64,
    pub deletes: u64,
    /// Partial rows (updates).
    pub partials: u64,
    /// Per value column, over the versions carrying it.
    columns: Vec<ZoneBuilder>,
}

impl TableBounds {
    pub(crate) fn new(types: &[ColumnType]) -> TableBounds {
        TableBounds { puts: 0, deletes: 0, partials: 0, columns: types.iter().map(|&t| ZoneBuilder::new(t)).collect() }
    }

    /// Takes one version (`row` in the row encoding of `types`) into the bounds.
    pub(crate) fn add(&mut self, types: &[ColumnType], kind: Kind, row: &[u8]) -> DecodeResult<()> {
        match kind {
            Kind::Put => self.puts += 1,
            Kind::Delete => {
                self.deletes += 1;
                return Ok(());
            }
            Kind::Update => self.partials += 1,
        }
        for (b, cell) in self.columns.iter_mut().zip(RowIter::new(types, row)?) {
            b.add_cell(cell?);
        }
        Ok(())
    }

    /// Takes `o` (bounds of the same table) into these.
    pub(crate) fn absorb(&mut self, o: &TableBounds) {
        self.puts += o.puts;
        self.deletes += o.deletes;
        self.partials += o.partials;
        for (a, b) in self.columns.iter_mut().zip(&o.columns) {
            a.absorb(b);
        }
    }

    /// Whether some version is a full row or a delete: one that settles a key's existence.
    pub(crate) fn settles_rows(&self) -> bool {
        self.puts > 0 || self.deletes > 0
    }

    /// Value column `c`'s zone map over the versions carrying it (`None` past the columns).
    pub(crate) fn zone(&self, c: usize) -> Option<ZoneMap> {
        self.columns.get(c).map(ZoneBuilder::finish)
    }
}

/// Bounds per table, kept by one memtable.
#[derive(Debug, Default)]
pub(crate) struct Bounds {
    tables: parking_lot::Mutex<Vec<(u32, TableBounds)>>,
}

impl Bounds {
    /// Widens table `table_id`'s bounds by `b`.
    pub(crate) fn widen(&self, table_id: u32, b: &TableBounds) {
        let mut tables = self.tables.lock();
        match tables.iter_mut().find(|(t, _)| *t == table_id) {
            Some((_, mine)) => mine.absorb(b),
            None => tables.push((table_id, b.clone())),
        }
    }

    /// Widens the bounds of each version's table by the version (table, its value column types,
    /// kind, row), under one lock. A row that does not decode stops it with an error; the
    /// bounds then cover what came before, which only makes them wider than needed.
    pub(crate) fn widen_by<'a>(
        &self,
        versions: impl Iterator<Item = (u32, &'a [ColumnType], Kind, &'a [u8])>,
    ) -> DecodeResult<()> {
        let mut tables = self.tables.lock();
        let mut last: Option<usize> = None;
        for (table_id, types, kind, row) in versions {
            let i = match last.filter(|&i| tables[i].0 == table_id) {
                Some(i) => i,
                None => match tables.iter().position(|(t, _)| *t == table_id) {
                    Some(i) => i,
                    None => {
                        tables.push((table_id, TableBounds::new(types)));
                        tables.len() - 1
                    }
                },
            };
            last = Some(i);
            tables[i].1.add(types, kind, row)?;
        }
        Ok(())
    }

    /// Whether table `table_id` has bounds here (some version was noted).
    pub(crate) fn holds(&self, table_id: u32) -> bool {
        self.tables.lock().iter().any(|(t, _)| *t == table_id)
    }

    /// Table `table_id`'s bounds (`None`: it has no version here).
    pub(crate) fn of(&self, table_id: u32) -> Option<TableBounds> {
        self.tables.lock().iter().find(|(t, _)| *t == table_id).map(|(_, b)| b.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::row::encode_row;
    use crate::types::Value;

    #[test]
    fn bounds_cover_every_version_and_count_kinds() {
        let types = [ColumnType::Int, ColumnType::Text, ColumnType::Double];
        let mut b = TableBounds::new(&types);
        let mut row = Vec::new();
        encode_row(&types, &[Some(Value::Int(5)), Some(Value::Text("m".into())), Some(Value::Null)], &mut row);
        b.add(&types, Kind::Put, &row).unwrap();
        row.clear();
        encode_row(&types, &[Some(Value::Int(-7)), None, None], &mut row);
        b.add(&types, Kind::Update, &row).unwrap();
        b.add(&types, Kind::Delete, &[]).unwrap();
        let mut other = TableBounds::new(&types);
        row.clear();
        encode_row(&types, &[None, Some(Value::Text("z".into())), Some(Value::Double(2.5))], &mut row);
        other.add(&types, Kind::Update, &row).unwrap();
        b.absorb(&other);
        assert_eq!((b.puts, b.deletes, b.partials), (1, 1, 2));
        let z = b.zone(0).unwrap();
        assert_eq!((z.min, z.max, z.carried, z.nulls), (Some(Value::Int(-7)), Some(Value::Int(5)), 2, 0));
        let z = b.zone(1).unwrap();
        assert_eq!((z.min, z.max, z.carried), (Some(Value::Text("m".into())), Some(Value::Text("z".into())), 2));
        let z = b.zone(2).unwrap();
        assert_eq!((z.min, z.max, z.carried, z.nulls), (Some(Value::Double(2.5)), Some(Value::Double(2.5)), 2, 1));
        assert!(b.settles_rows() && b.zone(2).unwrap().carried > 0 && b.zone(3).is_none());
    }
}
