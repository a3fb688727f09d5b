//! A scan request resolved against a table: output columns, filter, aggregates, and every
//! column the scan must read.

use std::sync::Arc;

use arrow_schema::SchemaRef;

use super::agg::AggSpec;
use super::arrow::row_schema;
use super::cnf::Filter;
use super::{AggFunc, ScanRequest};
use crate::catalog::{Projection, TableInfo};
use crate::error::{Error, Result};
use crate::types::ColumnType;

/// A scan request resolved against a table.
pub(crate) struct Plan {
    pub info: Arc<TableInfo>,
    /// Output columns (schema indices) when returning rows.
    pub out_cols: Vec<usize>,
    /// The schema of the batches returned.
    pub schema: SchemaRef,
    pub filter: Filter,
    pub aggs: Vec<AggSpec>,
    /// Every column read (filter, output, aggregates), schema indices ascending.
    pub needed: Vec<usize>,
    pub limit: Option<usize>,
    pub batch_rows: usize,
    pub block_stats: bool,
    /// For each value column, whether it is in `needed`.
    wanted: Arc<[bool]>,
}

fn wanted_of(info: &TableInfo, needed: &[usize]) -> Arc<[bool]> {
    let mut w = vec![false; info.value_types.len()];
    for &c in needed {
        if let Some(vi) = info.schema.value_index(c) {
            w[vi] = true;
        }
    }
    w.into()
}

impl Plan {
    pub(crate) fn new(info: &Arc<TableInfo>, req: &ScanRequest) -> Result<Plan> {
        let schema = &info.schema;
        let col = |name: &str| {
            schema
                .column_index(name)
                .ok_or_else(|| Error::UnknownColumn { table: info.name.clone(), column: name.to_string() })
        };
        let out_cols = match &req.columns {
            None => info.all_columns.to_vec(),
            Some(names) => names.iter().map(|n| col(n)).collect::<Result<Vec<_>>>()?,
        };
        let filter = match &req.filter {
            None => Filter::all(),
            Some(e) => Filter::new(&info.name, schema, e)?,
        };
        let mut aggs = Vec::with_capacity(req.aggregates.len());
        for a in &req.aggregates {
            let column = match &a.column {
                None if a.func == AggFunc::Count => None,
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "{}(*) is not an aggregate; name a column",
                        a.func.name()
                    )))
                }
                Some(n) => {
                    let c = col(n)?;
                    let ty = schema.columns()[c].ty;
                    let numeric = !matches!(
                        ty,
                        ColumnType::Text
                            | ColumnType::Bytea
                            | ColumnType::Boolean
                            | ColumnType::Date
                            | ColumnType::Timestamp
                            | ColumnType::TimestampTz
                    );
                    if matches!(a.func, AggFunc::Sum | AggFunc::Avg) && !numeric {
                        return Err(Error::TypeMismatch {
                            table: info.name.clone(),
                            column: n.clone(),
                            message: format!("{} needs a numeric column, not {}", a.func.name(), ty.name()),
                        });
                    }
                    Some((c, ty))
                }
            };
            aggs.push(AggSpec { func: a.func, column, name: a.output_name() });
        }
        if req.batch_rows == 0 {
            return Err(Error::InvalidArgument("batch_rows must be at least 1".into()));
        }
        let mut needed: Vec<usize> = filter.columns().collect();
        if aggs.is_empty() {
            needed.extend(&out_cols);
        }
        needed.extend(aggs.iter().filter_map(|a| a.column.map(|(c, _)| c)));
        needed.sort_unstable();
        needed.dedup();
        let schema_ref = if aggs.is_empty() { row_schema(schema, &out_cols) } else { super::agg::schema(&aggs) };
        Ok(Plan {
            wanted: wanted_of(info, &needed),
            info: info.clone(),
            out_cols,
            schema: schema_ref,
            filter,
            aggs,
            needed,
            limit: if req.aggregates.is_empty() { req.limit } else { None },
            batch_rows: req.batch_rows,
            block_stats: req.block_stats,
        })
    }

    /// The plan of a shared pass: reads every column `plans` need, filters nothing.
    pub(crate) fn pass(info: &Arc<TableInfo>, plans: &[Arc<Plan>]) -> Plan {
        let mut needed: Vec<usize> = plans.iter().flat_map(|p| p.needed.iter().copied()).collect();
        needed.sort_unstable();
        needed.dedup();
        Plan {
            wanted: wanted_of(info, &needed),
            info: info.clone(),
            out_cols: needed.clone(),
            schema: row_schema(&info.schema, &needed),
            filter: Filter::all(),
            aggs: Vec::new(),
            needed,
            limit: None,
            batch_rows: plans.iter().map(|p| p.batch_rows).max().unwrap_or(8192),
            block_stats: false,
        }
    }

    /// The projection onto `needed`, as the merge and point-read paths take it.
    pub(super) fn projection(&self) -> Projection {
        Projection::Columns { cols: self.needed.clone().into(), wanted: self.wanted.clone() }
    }

    /// For each value column, whether the scan reads it.
    pub(crate) fn wanted(&self) -> &Arc<[bool]> {
        &self.wanted
    }

    pub(super) fn ty(&self, col: usize) -> ColumnType {
        self.info.schema.columns()[col].ty
    }
}
