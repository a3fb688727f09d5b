//! Chunks of rows handed to the filter and the sinks: rows that came through the merge (every
//! column already an array) and bulk blocks (columns decoded from the blocks on demand, only for
//! the rows that survive the filter).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type};
use arrow_array::{Array, ArrayRef, BooleanArray, PrimitiveArray};
use arrow_buffer::BooleanBuffer;
use arrow_buffer::{BooleanBufferBuilder, NullBuffer};
use arrow_schema::DataType;

use super::arrow::arrow_err;
use super::arrow::{block_array, prefixes, ValuesBuilder};
use super::cnf::{Atom, Test};
use super::eval::{atom_on_array, literal_bytes, text_atom_on_block};
use super::plan::Plan;
use crate::error::{Error, Result};
use crate::sst::block::Block;
use crate::types::key::decode_key;
use crate::types::row::Cells;
use crate::types::{ColumnType, Value};

/// The columns of one chunk of rows, decoded on demand.
pub(super) trait Chunk {
    fn rows(&self) -> usize;
    /// Column `col` (schema index): every row, or only the `sel`ected ones.
    fn array(&mut self, col: usize, sel: Option<&BooleanBuffer>) -> Result<ArrayRef>;
    /// The rows where `atom` is true.
    fn atom_mask(&mut self, atom: &Atom) -> Result<BooleanBuffer>;
}

/// Rows that came through the merge: every needed column already an array.
pub(super) struct RowsChunk<'p> {
    pub(super) plan: &'p Plan,
    pub(super) rows: usize,
    pub(super) arrays: HashMap<usize, ArrayRef>,
}

impl Chunk for RowsChunk<'_> {
    fn rows(&self) -> usize {
        self.rows
    }

    fn array(&mut self, col: usize, sel: Option<&BooleanBuffer>) -> Result<ArrayRef> {
        let a =
            self.arrays.get(&col).ok_or_else(|| Error::InvalidArgument(format!("internal: column {col} not read")))?;
        match sel {
            None => Ok(a.clone()),
            Some(s) => arrow_select::filter::filter(a, &BooleanArray::new(s.clone(), None)).map_err(arrow_err),
        }
    }

    fn atom_mask(&mut self, atom: &Atom) -> Result<BooleanBuffer> {
        let a = self.array(atom.column, None)?;
        atom_on_array(atom, self.plan.ty(atom.column), &a)
    }
}

/// Consecutive rows of one block.
pub(super) type Segment = (Arc<Block>, Range<usize>);

/// A bulk chunk: the same keys in every needed group of the driving level, as block segments.
pub(super) struct BulkChunk<'p> {
    pub(super) plan: &'p Plan,
    pub(super) rows: usize,
    /// Per group (0 = the driver): its segments, in key order.
    pub(super) groups: Vec<Vec<Segment>>,
    /// Schema column → (group, column within the group's files).
    pub(super) at: &'p HashMap<usize, (usize, usize)>,
    pub(super) full: HashMap<usize, ArrayRef>,
    /// Newer values of some rows' columns, from the memtables.
    pub(super) patch: Patch,
}

/// Newer values the memtables hold for some rows of a bulk chunk: each replaces the value the
/// block holds of the columns it carries.
#[derive(Debug, Default)]
pub(super) struct Patch {
    /// Rows of the chunk, ascending.
    rows: Vec<usize>,
    /// Per row, its value columns (`None`: not carried, the block's value stands).
    cells: Vec<Cells>,
}

impl Patch {
    /// Adds row `row` (after every row added so far).
    pub(super) fn push(&mut self, row: usize, cells: Cells) {
        self.rows.push(row);
        self.cells.push(cells);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Whether some row takes a new value of value column `vi`.
    fn touches(&self, vi: usize) -> bool {
        self.cells.iter().any(|c| c.get(vi).is_some_and(Option::is_some))
    }

    /// `base` (value column `vi`, type `ty`, every row of the chunk) with the new values laid in.
    /// Fixed-width columns are copied once and written in place; others are interleaved.
    fn apply(&self, base: &ArrayRef, vi: usize, ty: ColumnType) -> Result<ArrayRef> {
        let mut values = ValuesBuilder::new(ty);
        // (row of the chunk, index into `values`)
        let mut at: Vec<(usize, usize)> = Vec::new();
        for (&r, cells) in self.rows.iter().zip(&self.cells) {
            if let (Some(Some(v)), true) = (cells.get(vi), r < base.len()) {
                values.push(v);
                at.push((r, at.len()));
            }
        }
        let values = values.finish();
        macro_rules! in_place {
            ($t:ty) => {{
                let (b, p) = (base.as_primitive::<$t>(), values.as_primitive::<$t>());
                let mut v = b.values().to_vec();
                let mut nulls = (b.nulls().is_some() || p.nulls().is_some()).then(|| {
                    let mut bits = BooleanBufferBuilder::new(v.len());
                    match b.nulls() {
                        Some(n) => bits.append_buffer(n.inner()),
                        None => bits.append_n(v.len(), true),
                    }
                    bits
                });
                for &(r, j) in &at {
                    v[r] = p.value(j);
                    if let Some(bits) = &mut nulls {
                        bits.set_bit(r, p.is_valid(j));
                    }
                }
                let nulls = nulls.map(|mut b| NullBuffer::new(b.finish()));
                Arc::new(PrimitiveArray::<$t>::new(v.into(), nulls).with_data_type(base.data_type().clone()))
                    as ArrayRef
            }};
        }
        Ok(match base.data_type() {
            DataType::Int64 => in_place!(Int64Type),
            DataType::Int32 => in_place!(Int32Type),
            DataType::Int16 => in_place!(Int16Type),
            DataType::Int8 => in_place!(Int8Type),
            DataType::Float64 => in_place!(Float64Type),
            DataType::Float32 => in_place!(Float32Type),
            DataType::Date32 => in_place!(Date32Type),
            _ => {
                let mut indices: Vec<(usize, usize)> = (0..base.len()).map(|i| (0, i)).collect();
                for &(r, j) in &at {
                    indices[r] = (1, j);
                }
                arrow_select::interleave::interleave(&[base.as_ref(), values.as_ref()], &indices).map_err(arrow_err)?
            }
        })
    }
}

pub(super) fn concat(mut parts: Vec<ArrayRef>) -> Result<ArrayRef> {
    if parts.len() == 1 {
        if let Some(a) = parts.pop() {
            return Ok(a);
        }
    }
    let refs: Vec<&dyn arrow_array::Array> = parts.iter().map(|a| a.as_ref()).collect();
    arrow_select::concat::concat(&refs).map_err(arrow_err)
}

impl BulkChunk<'_> {
    /// Key column `ki` of the chunk's rows (or the `sel`ected ones), decoded from the driver's
    /// keys. An integer or DATE column at a fixed place in every key (only fixed-width columns
    /// before it) is read straight from its bytes.
    pub(super) fn key_column(&self, ki: usize, sel: Option<&BooleanBuffer>) -> Result<ArrayRef> {
        let info = &self.plan.info;
        let mut rows: Vec<(&Block, usize)> = Vec::with_capacity(self.rows);
        for (b, r) in &self.groups[0] {
            rows.extend(r.clone().map(|i| (b.as_ref(), i)));
        }
        let chosen: Box<dyn Iterator<Item = &(&Block, usize)>> = match sel {
            None => Box::new(rows.iter()),
            Some(s) => Box::new(s.set_indices().filter_map(|i| rows.get(i))),
        };
        if let Some((off, ty)) = fixed_key_slot(&info.key_types, ki) {
            return fixed_key_array(ty, chosen.map(|(b, i)| b.key(*i)), off);
        }
        let mut builder = ValuesBuilder::new(info.key_types[ki]);
        for (b, i) in chosen {
            let vals = decode_key(&info.key_types, b.key(*i)).map_err(|e| Error::corruption("<key>", 0, e.0))?;
            builder.push(vals.get(ki).unwrap_or(&Value::Null));
        }
        Ok(builder.finish())
    }
}

impl BulkChunk<'_> {
    /// Value column index of schema column `col` when the patch gives some row a new value of
    /// it.
    fn patched(&self, col: usize) -> Option<usize> {
        if self.patch.is_empty() {
            return None;
        }
        self.plan.info.schema.value_index(col).filter(|&vi| self.patch.touches(vi))
    }
}

impl Chunk for BulkChunk<'_> {
    fn rows(&self) -> usize {
        self.rows
    }

    fn array(&mut self, col: usize, sel: Option<&BooleanBuffer>) -> Result<ArrayRef> {
        // A column the memtables patch is decoded whole, patched, and kept.
        if let (Some(vi), false) = (self.patched(col), self.full.contains_key(&col)) {
            let base = self.blocks_array(col, None)?;
            let a = self.patch.apply(&base, vi, self.plan.ty(col))?;
            self.full.insert(col, a);
        }
        self.blocks_array(col, sel)
    }

    fn atom_mask(&mut self, atom: &Atom) -> Result<BooleanBuffer> {
        // TEXT/BYTEA comparisons: prefixes first, heap only on ties.
        if let (Test::Cmp(op, v), Some(&(g, c)), None) =
            (&atom.test, self.at.get(&atom.column), self.patched(atom.column))
        {
            if let (Some(lit), false) = (literal_bytes(v), self.full.contains_key(&atom.column)) {
                let mut bits: Vec<BooleanBuffer> = Vec::with_capacity(self.groups[g].len());
                for (b, r) in &self.groups[g] {
                    let p = b.column(c).ok_or_else(|| Error::corruption("<scan>", 0, "block lacks a group column"))?;
                    bits.push(text_atom_on_block(*op, lit, &p, r, &prefixes(&p, r)?)?);
                }
                return Ok(match bits.len() {
                    1 => bits.pop().unwrap_or_else(|| BooleanBuffer::new_unset(0)),
                    _ => bits.iter().flat_map(|b| b.iter()).collect(),
                });
            }
        }
        let a = self.array(atom.column, None)?;
        atom_on_array(atom, self.plan.ty(atom.column), &a)
    }
}

impl BulkChunk<'_> {
    /// Column `col` as the blocks (or the patched copy kept in `full`) hold it.
    fn blocks_array(&mut self, col: usize, sel: Option<&BooleanBuffer>) -> Result<ArrayRef> {
        match sel {
            None => {
                if let Some(a) = self.full.get(&col) {
                    return Ok(a.clone());
                }
            }
            // Most rows survive (or the column is decoded already): decode it whole and let
            // arrow's filter kernel select; gathering row by row pays off for few survivors.
            Some(s) if self.full.contains_key(&col) || s.count_set_bits() * 4 > self.rows => {
                let all = self.blocks_array(col, None)?;
                return arrow_select::filter::filter(&all, &BooleanArray::new(s.clone(), None)).map_err(arrow_err);
            }
            Some(_) => {}
        }
        let schema = &self.plan.info.schema;
        let a = if let Some(ki) = schema.primary_key().iter().position(|&k| k == col) {
            self.key_column(ki, sel)?
        } else {
            let &(g, c) =
                self.at.get(&col).ok_or_else(|| Error::InvalidArgument(format!("internal: column {col} not read")))?;
            let mut parts = Vec::with_capacity(self.groups[g].len());
            let mut off = 0;
            for (b, r) in &self.groups[g] {
                let p = b.column(c).ok_or_else(|| Error::corruption("<scan>", 0, "block lacks a group column"))?;
                let sub = sel.map(|s| s.slice(off, r.len()));
                parts.push(block_array(&p, r, sub.as_ref())?);
                off += r.len();
            }
            concat(parts)?
        };
        if sel.is_none() {
            self.full.insert(col, a.clone());
        }
        Ok(a)
    }
}

/// Where key column `ki` starts in every key, when it is an integer, DATE or timestamp column and every
/// column before it has a fixed width; with its type.
fn fixed_key_slot(types: &[ColumnType], ki: usize) -> Option<(usize, ColumnType)> {
    let ty = *types.get(ki)?;
    if !matches!(
        ty,
        ColumnType::BigInt
            | ColumnType::Int
            | ColumnType::Date
            | ColumnType::SmallInt
            | ColumnType::TinyInt
            | ColumnType::Timestamp
            | ColumnType::TimestampTz
    ) {
        return None;
    }
    // A fixed-width column's key encoding is as wide as its values.
    let off = types[..ki].iter().map(|&t| t.fixed_width()).sum::<Option<usize>>()?;
    Some((off, ty))
}

/// The values of an integer or DATE key column found at byte `off` of `keys` (big-endian with the
/// sign bit flipped).
fn fixed_key_array<'k>(ty: ColumnType, keys: impl Iterator<Item = &'k [u8]>, off: usize) -> Result<ArrayRef> {
    fn read<'k, const W: usize>(keys: impl Iterator<Item = &'k [u8]>, off: usize) -> Result<Vec<[u8; W]>> {
        keys.map(|k| {
            k.get(off..off + W)
                .and_then(|b| <[u8; W]>::try_from(b).ok())
                .ok_or_else(|| Error::corruption("<key>", 0, "key shorter than its columns"))
        })
        .collect()
    }
    use arrow_array::{Date32Array, Int16Array, Int32Array, Int64Array, Int8Array, TimestampMicrosecondArray};
    Ok(match ty {
        ColumnType::BigInt => Arc::new(Int64Array::from_iter_values(
            read::<8>(keys, off)?.into_iter().map(|b| (u64::from_be_bytes(b) ^ (1 << 63)) as i64),
        )),
        ColumnType::Timestamp | ColumnType::TimestampTz => {
            let a = TimestampMicrosecondArray::from_iter_values(
                read::<8>(keys, off)?.into_iter().map(|b| (u64::from_be_bytes(b) ^ (1 << 63)) as i64),
            );
            Arc::new(a.with_data_type(crate::scan::arrow::arrow_type(ty)))
        }
        ColumnType::Int => Arc::new(Int32Array::from_iter_values(
            read::<4>(keys, off)?.into_iter().map(|b| (u32::from_be_bytes(b) ^ (1 << 31)) as i32),
        )),
        ColumnType::Date => Arc::new(Date32Array::from_iter_values(
            read::<4>(keys, off)?.into_iter().map(|b| (u32::from_be_bytes(b) ^ (1 << 31)) as i32),
        )),
        ColumnType::SmallInt => Arc::new(Int16Array::from_iter_values(
            read::<2>(keys, off)?.into_iter().map(|b| (u16::from_be_bytes(b) ^ (1 << 15)) as i16),
        )),
        ColumnType::TinyInt => {
            Arc::new(Int8Array::from_iter_values(read::<1>(keys, off)?.into_iter().map(|b| (b[0] ^ 0x80) as i8)))
        }
        other => return Err(Error::InvalidArgument(format!("internal: {other:?} is not a fixed-width key column"))),
    })
}
