//! The data model users see: column types, schemas with a primary key, values and rows, and the
//! two encodings every layer shares — the order-preserving key encoding ([`key`]) and the compact
//! partial-row encoding used by the WAL and the memtable ([`row`]).

pub mod key;
pub mod row;
mod schema;
mod value;

pub use schema::{Column, ColumnType, Schema};
pub(crate) use value::compare;
pub use value::{
    format_date, format_timestamp, format_timestamptz, parse_date, parse_timestamp, parse_timestamptz, Value,
};
