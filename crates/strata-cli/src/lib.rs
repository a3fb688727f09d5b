//! The request layer of the `strata` command-line tool, as a library: JSON requests
//! ([`exec`]), `--where` and `--agg` text ([`expr`]), values in JSON ([`json`]) and the column
//! lists of `create-table` ([`schema_sql`]). The binary (`src/main.rs`) adds the commands; the
//! fuzz targets ([`fuzz`]) drive these parsers with arbitrary input.

pub mod exec;
pub mod expr;
pub mod fuzz;
pub mod json;
pub mod schema_sql;
