//! The catalog: what a table is — its definition ([`TableInfo`]: schema, options, layout), its
//! per-table options, and the shapes of a read request ([`Projection`], [`KeyRange`]) — apart
//! from the database that serves it, so `version/`, `compaction/` and `scan/` can use them
//! without importing `db/`.

pub(crate) mod trace;
pub(crate) mod workload;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::codec::{put_bytes, put_varint, DecodeError, DecodeResult, Reader};
use crate::column_group::{Layout, MAX_LEVELS};
use crate::error::Result;
use crate::types::{ColumnType, Schema, Value};
use workload::Workload;

/// A table's definition as stored in the manifest.
#[derive(Debug, Clone)]
pub struct TableInfo {
    /// Table id, never reused.
    pub id: u32,
    /// Table name.
    pub name: String,
    /// Columns and primary key.
    pub schema: Arc<Schema>,
    /// Table options.
    pub options: TableOptions,
    pub(crate) key_types: Arc<[ColumnType]>,
    pub(crate) value_types: Arc<[ColumnType]>,
    pub(crate) all_columns: Arc<[usize]>,
    /// The column groups of every level (row everywhere without a layout option).
    pub(crate) layout: Arc<Layout>,
    /// How each level's files form runs: one run per group of this layout. The same as
    /// [`Self::layout`], except at the levels of a row-group table whose files hold every
    /// group of their level (see [`Self::row_groups`]): there the level is one run, as in the
    /// row layout.
    pub(crate) runs: Arc<Layout>,
    /// Per-level workload counters (shared by every copy of the definition).
    pub(crate) workload: Arc<Workload>,
}

impl PartialEq for TableInfo {
    fn eq(&self, o: &Self) -> bool {
        self.id == o.id && self.name == o.name && self.schema == o.schema && self.options == o.options
    }
}

impl TableInfo {
    /// Builds the definition, parsing the layout option (over [`MAX_LEVELS`] levels; creating a
    /// table also checks it against the database's level count).
    pub(crate) fn new(id: u32, name: String, schema: Arc<Schema>, options: TableOptions) -> Result<Self> {
        let key_types = schema.key_types().into();
        let value_types = schema.value_types().into();
        let all_columns = (0..schema.columns().len()).collect();
        let layout = Arc::new(match &options.layout {
            Some(spec) => Layout::parse(spec, &schema, MAX_LEVELS)?,
            None => Layout::row(&schema, 1),
        });
        let runs = if options.row_groups { Arc::new(Layout::row(&schema, 1)) } else { layout.clone() };
        let workload = Arc::new(Workload::new(schema.value_columns().len()));
        Ok(TableInfo { id, name, schema, options, key_types, value_types, all_columns, layout, runs, workload })
    }

    /// This definition with the layout `spec` (`None`: whole rows), keeping the workload
    /// counters; fails if the layout does not parse for the schema.
    pub(crate) fn with_layout(&self, spec: Option<String>) -> Result<Self> {
        let layout = Arc::new(match &spec {
            Some(spec) => Layout::parse(spec, &self.schema, MAX_LEVELS)?,
            None => Layout::row(&self.schema, 1),
        });
        let runs = if self.options.row_groups { self.runs.clone() } else { layout.clone() };
        let options = TableOptions { layout: spec, ..self.options.clone() };
        Ok(TableInfo { options, layout, runs, ..self.clone() })
    }

    /// The column-group layout of the table.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The column groups of a row-group file at `level`, or `None` when the level's files are
    /// one group each: Level-0, a level of one group (whole rows; a row-group file would store
    /// the same in a key page and a page of cells, costing reads a second page), or a table
    /// that keeps one run per group.
    pub(crate) fn row_groups(&self, level: usize) -> Option<&[Vec<usize>]> {
        let groups = self.layout.groups(level);
        (self.options.row_groups && level > 0 && groups.len() > 1).then_some(groups)
    }
}

/// The engine that stores a table (chosen per table at creation; every table API works on
/// both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Engine {
    /// The LSM tree whose levels change layout with data age (the default): any size, on disk.
    #[default]
    Lsm,
    /// The lineage engine (L-Store): in memory, base pages plus append-only tail records per
    /// update range, merged in the background; for tables updated in place at high rates while
    /// they are scanned. Durable through the shared WAL.
    Lineage,
}

impl Engine {
    /// The name used by the CLI and the `exec` protocol: `lsm` or `lineage`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Lsm => "lsm",
            Engine::Lineage => "lineage",
        }
    }

    /// The engine with this name.
    pub fn from_name(s: &str) -> Option<Engine> {
        match s {
            "lsm" => Some(Engine::Lsm),
            "lineage" => Some(Engine::Lineage),
            _ => None,
        }
    }
}

/// Per-table settings, stored with the table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableOptions {
    /// The column-group layout of each level, as layout text (see [`crate::column_group`]);
    /// `None` stores whole rows at every level.
    pub layout: Option<String>,
    /// Aligned compaction (Kim et al. §IV, on by default): compaction output going to level
    /// n+1 is cut where files of level n+2 begin and end, within
    /// [`Options::alignment_variance`](crate::Options::alignment_variance) of the target size, so a later compaction of an output
    /// file does not drag in neighbours it barely overlaps. Off: files are cut by size alone.
    pub aligned_compaction: bool,
    /// The engine storing the table (default [`Engine::Lsm`]). Layouts and aligned compaction
    /// apply to the LSM engine only.
    pub engine: Engine,
    /// Row-group files (SST format 6) from Level-1 down: at a level of more than one column
    /// group each file holds every group for one key range, aligned by row position, so the
    /// level is one run however many groups it has (on by default; fixed when the table is
    /// created). Off, each group of a level is its own run of files, as in tables created by
    /// builds before row-group files, which keep that.
    pub row_groups: bool,
    /// Text the layers above the engine keep with the table (SQL keeps the declared column
    /// types, hidden columns and defaults here); the engine stores it and reads nothing of it.
    pub annotations: BTreeMap<String, String>,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            layout: None,
            aligned_compaction: true,
            engine: Engine::Lsm,
            row_groups: true,
            annotations: BTreeMap::new(),
        }
    }
}

/// Record tags inside the encoded table options.
const TAG_LAYOUT: u64 = 1;
const TAG_UNALIGNED: u64 = 2;
const TAG_ENGINE: u64 = 3;
const TAG_ROW_GROUPS: u64 = 4;
const TAG_ANNOTATION: u64 = 5;

impl TableOptions {
    /// Options with the given layout text, e.g. `"L1: (a,b) (c); L2-: column"`.
    pub fn with_layout(spec: impl Into<String>) -> Self {
        TableOptions { layout: Some(spec.into()), ..TableOptions::default() }
    }

    /// Options for a table stored by `engine`.
    pub fn engine(engine: Engine) -> Self {
        TableOptions { engine, ..TableOptions::default() }
    }

    /// These options with another engine.
    pub fn with_engine(self, engine: Engine) -> Self {
        TableOptions { engine, ..self }
    }

    /// These options with aligned compaction switched on or off.
    pub fn aligned(self, on: bool) -> Self {
        TableOptions { aligned_compaction: on, ..self }
    }

    /// These options with row-group files switched on or off (see [`Self::row_groups`]).
    pub fn with_row_groups(self, on: bool) -> Self {
        TableOptions { row_groups: on, ..self }
    }

    /// These options with annotation `key` set to `value` (see [`Self::annotations`]).
    pub fn annotate(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        if let Some(l) = &self.layout {
            put_varint(out, TAG_LAYOUT);
            put_bytes(out, l.as_bytes());
        }
        // The default writes nothing, so tables of earlier builds read back unchanged.
        if !self.aligned_compaction {
            put_varint(out, TAG_UNALIGNED);
        }
        // Older builds refuse the tag, so they never open a lineage table as an empty LSM one.
        if self.engine == Engine::Lineage {
            put_varint(out, TAG_ENGINE);
            put_varint(out, 1);
        }
        // Older builds refuse the tag, so they never read row-group files as per-group runs.
        if self.row_groups {
            put_varint(out, TAG_ROW_GROUPS);
        }
        // Older builds refuse the tag: they would drop what the layers above keep here.
        for (k, v) in &self.annotations {
            put_varint(out, TAG_ANNOTATION);
            put_bytes(out, k.as_bytes());
            put_bytes(out, v.as_bytes());
        }
    }

    pub(crate) fn decode(b: &[u8]) -> DecodeResult<Self> {
        let mut r = Reader::new(b);
        // Without the tag, a table of one run per group (every table of earlier builds).
        let mut o = TableOptions { row_groups: false, ..TableOptions::default() };
        while !r.is_empty() {
            match r.varint()? {
                TAG_LAYOUT => {
                    let text = std::str::from_utf8(r.bytes()?).map_err(|_| DecodeError::new("layout is not UTF-8"))?;
                    o.layout = Some(text.to_owned());
                }
                TAG_UNALIGNED => o.aligned_compaction = false,
                TAG_ENGINE => {
                    o.engine = match r.varint()? {
                        0 => Engine::Lsm,
                        1 => Engine::Lineage,
                        _ => return Err(DecodeError::new("unknown table engine")),
                    }
                }
                TAG_ROW_GROUPS => o.row_groups = true,
                TAG_ANNOTATION => {
                    let text = |b: &[u8]| {
                        std::str::from_utf8(b)
                            .map(str::to_owned)
                            .map_err(|_| DecodeError::new("annotation is not UTF-8"))
                    };
                    let k = text(r.bytes()?)?;
                    let v = text(r.bytes()?)?;
                    o.annotations.insert(k, v);
                }
                // Written by a newer build with options this one does not know.
                _ => return Err(DecodeError::new("unknown table options")),
            }
        }
        Ok(o)
    }
}

/// Which columns a read returns, in which order. Build with [`Table::projection`](crate::Table::projection) or use
/// [`Projection::All`] (every column in schema order).
#[derive(Debug, Clone, Default)]
pub enum Projection {
    /// Every column, in schema order.
    #[default]
    All,
    /// Named columns, resolved to schema indices.
    Columns {
        /// Schema indices, in output order.
        cols: Arc<[usize]>,
        /// For each value column, whether it is needed.
        wanted: Arc<[bool]>,
    },
}

impl Projection {
    pub(crate) fn columns<'a>(&'a self, info: &'a TableInfo) -> &'a [usize] {
        match self {
            Projection::All => &info.all_columns,
            Projection::Columns { cols, .. } => cols,
        }
    }

    /// For each value column, whether it is needed (`None`: all are).
    pub(crate) fn wanted(&self) -> Option<&Arc<[bool]>> {
        match self {
            Projection::All => None,
            Projection::Columns { wanted, .. } => Some(wanted),
        }
    }
}

/// A range of primary keys. Bounds may name a prefix of the key columns: `start: Included([5])`
/// on a key `(a, b)` starts at the first key with `a = 5`.
#[derive(Debug, Clone)]
pub struct KeyRange {
    /// Lower bound.
    pub start: Bound<Vec<Value>>,
    /// Upper bound.
    pub end: Bound<Vec<Value>>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        KeyRange { start: Bound::Unbounded, end: Bound::Unbounded }
    }

    /// `start <= key < end`.
    pub fn half_open(start: Vec<Value>, end: Vec<Value>) -> Self {
        KeyRange { start: Bound::Included(start), end: Bound::Excluded(end) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_options_round_trip_and_no_options_are_a_table_of_earlier_builds() {
        // Nothing encoded: the defaults of builds before row-group files (one run per group).
        let old = TableOptions::decode(&[]).unwrap();
        assert_eq!(old, TableOptions::default().with_row_groups(false));
        let mut out = Vec::new();
        old.encode(&mut out);
        assert!(out.is_empty(), "such options encode as earlier builds did");
        for o in [
            TableOptions::default(),
            TableOptions::with_layout("L1-: column"),
            TableOptions::with_layout("L1-: column").with_row_groups(false),
            TableOptions::default().aligned(false),
            TableOptions::with_layout("L2-: (a) (b,c)").aligned(false),
            TableOptions::engine(Engine::Lineage).with_row_groups(false),
        ] {
            let mut out = Vec::new();
            o.encode(&mut out);
            assert_eq!(TableOptions::decode(&out).unwrap(), o);
        }
    }
}
