//! Analytical scans (TellStore §2-§6, BRIEF T1-T5): a [`ScanRequest`] names a key range, the
//! columns to return, a filter, aggregates and a limit; [`Table::scan_batches`] answers it with
//! Arrow [`RecordBatch`]es.
//!
//! The filter is normalized to conjunctive normal form ([`Filter`]) with literals coerced to the
//! column types, then evaluated a block of rows at a time with arrow's compute kernels. Where a
//! block of the deepest level holds each key's only version in its range and nothing newer
//! overlaps it, its columns are passed on in bulk: zone maps skip it or settle clauses for all its
//! rows, and count/min/max may be answered from its statistics. Elsewhere the per-row merge of all
//! levels produces the rows, which are then evaluated the same way.
//!
//! The request is shaped for a query engine's table provider (DataFusion's `TableProvider`):
//! its projection is `columns`; a filter expression made of column-literal comparisons,
//! `IS [NOT] NULL`, `AND`, `OR` and `NOT` converts to an [`Expr`] and is applied exactly (check
//! one with [`Filter::new`]; anything else stays with the caller); its limit is `limit`, exact
//! when every filter was pushed. Batches use the Arrow types of [`Table::schema`]'s columns:
//! BIGINT Int64, INT Int32, SMALLINT Int16, TINYINT Int8, DOUBLE Float64, REAL Float32, BOOLEAN
//! Boolean, TEXT Utf8, BYTEA Binary.
//!
//! ```
//! use strata::scan::{batch_rows, AggFunc, Aggregate, CmpOp, Expr, ScanRequest};
//! use strata::*;
//! let dir = std::env::temp_dir().join(format!("strata-doc-scan-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let db = Db::open(&dir, Options::default())?;
//! let schema = Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("n", ColumnType::Int)], &["id"])?;
//! let t = db.create_table("t", schema, TableOptions::with_layout("L1-: column"))?;
//! for i in 0..100 {
//!     t.insert(&[Value::BigInt(i), Value::Int((i % 10) as i32)])?;
//! }
//! let req = ScanRequest::new()
//!     .with_filter(Expr::cmp("n", CmpOp::GtEq, Value::Int(5)).and(Expr::cmp("id", CmpOp::Lt, Value::Int(50))))
//!     .with_aggregate(Aggregate::count_star())
//!     .with_aggregate(Aggregate::new(AggFunc::Sum, "n"));
//! let rows: Vec<Vec<Value>> = t.scan_batches(&req, &ReadOptions::default())?.flat_map(|b| batch_rows(&b.unwrap())).collect();
//! assert_eq!(rows, vec![vec![Value::BigInt(25), Value::BigInt(175)]]);
//! # drop(t); drop(db); std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), strata::Error>(())
//! ```
//!
//! [`Table::scan_batches`]: crate::Table::scan_batches
//! [`Table::schema`]: crate::Table::schema

mod agg;
pub(crate) mod arrow;
mod chunk;
pub(crate) mod cnf;
mod columns;
mod consumer;
mod driver;
mod eval;
mod lineage;
mod live;
mod overlay;
mod partition;
mod plan;
mod run;
mod shared;
mod state;

pub use arrow_array::RecordBatch;
pub use arrow_schema::SchemaRef;

pub use self::arrow::{arrow_type, batch_rows, row_schema, rows_batch, value_at, UTC};
pub use self::cnf::{Atom, Filter, Test};
pub(crate) use self::lineage::{run_lineage_scan, run_row_scan};
pub use self::run::BatchIter;
pub(crate) use self::run::{run_scan, ReadAt};
pub(crate) use self::state::Scans;
use crate::catalog::KeyRange;
use crate::types::Value;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

impl CmpOp {
    /// The operator that holds exactly when this one does not (for non-NULL operands).
    pub fn negate(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::NotEq,
            CmpOp::NotEq => CmpOp::Eq,
            CmpOp::Lt => CmpOp::GtEq,
            CmpOp::LtEq => CmpOp::Gt,
            CmpOp::Gt => CmpOp::LtEq,
            CmpOp::GtEq => CmpOp::Lt,
        }
    }

    /// Whether `ord` (left operand compared with right) satisfies the operator.
    pub fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => ord == Equal,
            CmpOp::NotEq => ord != Equal,
            CmpOp::Lt => ord == Less,
            CmpOp::LtEq => ord != Greater,
            CmpOp::Gt => ord == Greater,
            CmpOp::GtEq => ord != Less,
        }
    }

    /// The SQL spelling.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::NotEq => "<>",
            CmpOp::Lt => "<",
            CmpOp::LtEq => "<=",
            CmpOp::Gt => ">",
            CmpOp::GtEq => ">=",
        }
    }
}

/// A boolean expression over one table's columns, as a query layer hands it over. SQL semantics:
/// a comparison with a NULL operand is unknown, and a row passes only where the whole expression
/// is true. Floating-point values compare in IEEE total order (`-0.0 < 0.0`, NaN above every
/// number), the order keys and zone maps use.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// `column op literal`. Numeric literals of any numeric type compare by value with numeric
    /// columns; TEXT, BYTEA and BOOLEAN columns take literals of their own type.
    Cmp {
        /// Column name.
        column: String,
        /// Operator.
        op: CmpOp,
        /// Literal (a NULL literal makes the comparison unknown).
        value: Value,
    },
    /// `column IS NULL`.
    IsNull(String),
    /// `column IS NOT NULL`.
    IsNotNull(String),
    /// All of the operands (true when empty).
    And(Vec<Expr>),
    /// Any of the operands (false when empty).
    Or(Vec<Expr>),
    /// Negation.
    Not(Box<Expr>),
}

impl Expr {
    /// `column op value`.
    pub fn cmp(column: &str, op: CmpOp, value: Value) -> Expr {
        Expr::Cmp { column: column.to_string(), op, value }
    }

    /// `self AND other`.
    pub fn and(self, other: Expr) -> Expr {
        match self {
            Expr::And(mut v) => {
                v.push(other);
                Expr::And(v)
            }
            e => Expr::And(vec![e, other]),
        }
    }

    /// `self OR other`.
    pub fn or(self, other: Expr) -> Expr {
        match self {
            Expr::Or(mut v) => {
                v.push(other);
                Expr::Or(v)
            }
            e => Expr::Or(vec![e, other]),
        }
    }

    /// `NOT self`.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Expr {
        Expr::Not(Box::new(self))
    }
}

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggFunc {
    /// Rows (with no column) or non-NULL values of a column. BIGINT.
    Count,
    /// Sum of non-NULL values: BIGINT for integer columns (an overflow is an error), DOUBLE for
    /// floating-point columns. NULL when there are none.
    Sum,
    /// Smallest non-NULL value, in the column's type.
    Min,
    /// Largest non-NULL value, in the column's type.
    Max,
    /// Mean of non-NULL values as DOUBLE.
    Avg,
}

impl AggFunc {
    /// The SQL name, lower case.
    pub fn name(self) -> &'static str {
        match self {
            AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::Avg => "avg",
        }
    }
}

/// One aggregate of a scan.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Aggregate {
    /// The function.
    pub func: AggFunc,
    /// Its column; `None` only for `count(*)`.
    pub column: Option<String>,
}

impl Aggregate {
    /// `func(column)`.
    pub fn new(func: AggFunc, column: &str) -> Self {
        Aggregate { func, column: Some(column.to_string()) }
    }

    /// `count(*)`.
    pub fn count_star() -> Self {
        Aggregate { func: AggFunc::Count, column: None }
    }

    /// The output column name, such as `max(b)` or `count(*)`.
    pub fn output_name(&self) -> String {
        format!("{}({})", self.func.name(), self.column.as_deref().unwrap_or("*"))
    }
}

/// What a scan reads and returns. Build with [`ScanRequest::new`] and the `with_*` methods.
///
/// Without aggregates the result is the rows of `range` that pass `filter`, in key order, with
/// the `columns` (all by default), at most `limit` of them. With aggregates it is one batch of one
/// row, a column per aggregate, over the rows that pass (`limit` does not apply).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScanRequest {
    /// Key range.
    pub range: KeyRange,
    /// Columns to return, by name (`None`: every column in schema order).
    pub columns: Option<Vec<String>>,
    /// Rows must satisfy this (`None`: every row).
    pub filter: Option<Expr>,
    /// Aggregates to compute instead of returning rows.
    pub aggregates: Vec<Aggregate>,
    /// Return at most this many rows.
    pub limit: Option<usize>,
    /// Rows per output batch (at most; default 8192).
    pub batch_rows: usize,
    /// Split the key range into this many partitions run on the scan worker pool (1 = run on the
    /// calling thread). Batches still come out in key order unless `unordered`.
    pub partitions: usize,
    /// With several partitions, return each batch as soon as any partition has one, in no
    /// particular order, so the partitions run side by side (in key order, a partition runs
    /// ahead of its reader by only two batches). Rows within a batch stay in key order.
    pub unordered: bool,
    /// Join concurrent shared scans of the same table (and snapshot) into one pass over the
    /// data: the first waits [`Options::shared_scan_window`](crate::Options::shared_scan_window)
    /// for others, then one pass on the scan pool serves them all. The result is collected
    /// before it is returned, and `partitions` does not apply.
    pub shared: bool,
    /// Answer count/min/max from block statistics where they are exact (default on).
    pub block_stats: bool,
}

impl Default for ScanRequest {
    fn default() -> Self {
        ScanRequest {
            range: KeyRange::all(),
            columns: None,
            filter: None,
            aggregates: Vec::new(),
            limit: None,
            batch_rows: 8192,
            partitions: 1,
            unordered: false,
            shared: false,
            block_stats: true,
        }
    }
}

impl ScanRequest {
    /// Every row and column of the table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Restricts the key range.
    pub fn with_range(mut self, range: KeyRange) -> Self {
        self.range = range;
        self
    }

    /// Returns these columns, in this order.
    pub fn with_columns<S: AsRef<str>>(mut self, columns: &[S]) -> Self {
        self.columns = Some(columns.iter().map(|c| c.as_ref().to_string()).collect());
        self
    }

    /// Keeps only rows where `filter` is true.
    pub fn with_filter(mut self, filter: Expr) -> Self {
        self.filter = Some(filter);
        self
    }

    /// Adds an aggregate.
    pub fn with_aggregate(mut self, agg: Aggregate) -> Self {
        self.aggregates.push(agg);
        self
    }

    /// Returns at most `n` rows.
    pub fn with_limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Rows per output batch.
    pub fn with_batch_rows(mut self, n: usize) -> Self {
        self.batch_rows = n;
        self
    }

    /// Runs on `n` key-range partitions in parallel.
    pub fn with_partitions(mut self, n: usize) -> Self {
        self.partitions = n;
        self
    }

    /// Batches of several partitions come out as they are ready, in no particular key order.
    pub fn with_unordered(mut self, unordered: bool) -> Self {
        self.unordered = unordered;
        self
    }

    /// Joins concurrent shared scans of the table into one pass.
    pub fn with_shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// Whether count/min/max may come from block statistics.
    pub fn with_block_stats(mut self, on: bool) -> Self {
        self.block_stats = on;
        self
    }
}

/// Counters of the scan engine since the database was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanStats {
    /// Scans run (a shared pass counts once per request it serves).
    pub scans: u64,
    /// Passes over data (a shared pass counts once).
    pub passes: u64,
    /// Data blocks the passes visited (from the cache or from files).
    pub blocks_read: u64,
    /// Blocks passed on in bulk (no per-row merge).
    pub bulk_blocks: u64,
    /// Blocks skipped by their zone maps without reading them.
    pub blocks_skipped: u64,
    /// Lineage-table update ranges skipped by their pages' zone maps.
    pub ranges_skipped: u64,
    /// Blocks whose aggregates came from block statistics without reading them.
    pub blocks_from_stats: u64,
    /// Rows produced by the per-row merge path.
    pub merged_rows: u64,
    /// Keys that memtables hold inside otherwise bulk blocks, resolved one by one, or laid over
    /// the runs of a run-by-run scan.
    pub patched_keys: u64,
    /// Bulk blocks overlapped by runs above the driving level (Level-0 files, shallower levels)
    /// whose keys there were resolved and laid over the block like memtable keys.
    pub run_patched_blocks: u64,
    /// Blocks whose rows a scan took run by run, selected by visibility and the supersede
    /// vectors instead of merged.
    pub run_blocks: u64,
    /// Rows those blocks contributed.
    pub run_rows: u64,
}
