//! Column-group layouts (LASER §3): which groups of value columns each level of a table stores
//! together, from one group of all columns (row layout) near the top to one column per group
//! near the bottom.
//!
//! Users write a layout as text:
//! ```text
//! spec    := clause (';' clause)*
//! clause  := levels ':' groups
//! levels  := 'L'n | 'L'n'-' | 'L'n'-'m          one level, n to the last level, n to m
//! groups  := 'row' | 'column' | ('(' col (',' col)* ')')+
//! ```
//! for example `L0: row; L1: (a,b,c) (s,f); L2: (a) (b,c) (s) (f); L3-: column`. Levels a clause
//! does not name inherit the groups of the level above; Level-0 (like the memtable) is always
//! `row`. Key columns are stored with every group and are not listed. A valid layout partitions
//! the value columns at every level and obeys containment: each group of level i lies inside one
//! group of level i-1.
//!
//! A group is named by its first (lowest) value column: groups partition the value columns, so
//! that id is unique within a level, and by containment a group that reaches the next level
//! unchanged keeps its id there. SST files and version runs carry this id.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::types::Schema;

/// Most levels a layout describes; deeper levels repeat the last one.
pub const MAX_LEVELS: usize = 64;

/// The column groups of every level; each group lists value-column indices in ascending order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    levels: Vec<Vec<Vec<usize>>>,
    /// Per level, per group: the columns as shared slices (what readers tag versions with).
    covers: Vec<Vec<Arc<[usize]>>>,
    nvals: usize,
}

/// The id of a group: its first value column (0 for the empty group of a key-only table).
pub fn group_id(group: &[usize]) -> u32 {
    group.first().map_or(0, |&c| u32::try_from(c).unwrap_or(u32::MAX))
}

fn bad(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(format!("bad layout: {}", msg.into()))
}

impl Layout {
    /// Row layout on every level.
    pub fn row(schema: &Schema, num_levels: usize) -> Layout {
        let all: Vec<usize> = (0..schema.value_columns().len()).collect();
        Layout::from_levels(vec![vec![all]; num_levels.max(1)], schema.value_columns().len())
    }

    fn from_levels(levels: Vec<Vec<Vec<usize>>>, nvals: usize) -> Layout {
        let covers = levels.iter().map(|l| l.iter().map(|g| Arc::from(g.as_slice())).collect()).collect();
        Layout { levels, covers, nvals }
    }

    /// Parses and validates a layout for `schema` over `num_levels` levels.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the offending clause, level or group.
    ///
    /// ```
    /// use strata::{column_group::Layout, Column, ColumnType, Schema};
    /// let s = Schema::new(
    ///     ["k", "a", "b", "c"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect(),
    ///     &["k"],
    /// )?;
    /// let l = Layout::parse("L1: (a,b) (c); L2-: column", &s, 4)?;
    /// assert_eq!(l.groups(1), &[vec![0, 1], vec![2]]);
    /// assert!(Layout::parse("L1: (a) (b,c); L2: (a,b) (c)", &s, 4).is_err()); // (a,b) spans two groups above
    /// # Ok::<(), strata::Error>(())
    /// ```
    pub fn parse(spec: &str, schema: &Schema, num_levels: usize) -> Result<Layout> {
        let nvals = schema.value_columns().len();
        let mut given: Vec<Option<Vec<Vec<usize>>>> = vec![None; num_levels];
        for clause in spec.split(';').map(str::trim).filter(|c| !c.is_empty()) {
            let (levels, groups) = clause.split_once(':').ok_or_else(|| bad(format!("`{clause}` has no `:`")))?;
            let (lo, hi) = parse_levels(levels.trim(), num_levels)?;
            let groups = parse_groups(groups.trim(), schema, nvals).map_err(|e| match e {
                Error::InvalidArgument(m) => Error::InvalidArgument(format!("{m} (in `{clause}`)")),
                other => other,
            })?;
            for slot in &mut given[lo..=hi] {
                if slot.replace(groups.clone()).is_some() {
                    return Err(bad(format!("`{clause}` names a level another clause already set")));
                }
            }
        }
        let row: Vec<usize> = (0..nvals).collect();
        if given[0].as_ref().is_some_and(|g| *g != [row.clone()]) {
            return Err(bad("Level-0 must be `row`"));
        }
        let mut levels: Vec<Vec<Vec<usize>>> = Vec::with_capacity(num_levels);
        for (i, g) in given.into_iter().enumerate() {
            let groups = match g {
                Some(g) => g,
                None if i == 0 => vec![row.clone()],
                None => levels[i - 1].clone(),
            };
            if let Some(above) = levels.last() {
                for grp in &groups {
                    if !above.iter().any(|a: &Vec<usize>| grp.iter().all(|c| a.contains(c))) {
                        return Err(bad(format!(
                            "group {} of L{i} does not lie inside one group of L{} (containment)",
                            group_text(grp, schema),
                            i - 1
                        )));
                    }
                }
            }
            levels.push(groups);
        }
        Ok(Layout::from_levels(levels, nvals))
    }

    /// The groups of `level` (value-column indices).
    pub fn groups(&self, level: usize) -> &[Vec<usize>] {
        self.levels.get(level).or(self.levels.last()).map_or(&[], Vec::as_slice)
    }

    /// True when every level stores whole rows.
    pub fn is_row(&self) -> bool {
        self.levels.iter().all(|l| l.len() == 1)
    }

    /// The columns of the group with id `cg` at `level`; `None` when that group is the whole
    /// row (a version from it settles every column) or the level has no such group.
    pub(crate) fn cover(&self, level: usize, cg: u32) -> Option<&Arc<[usize]>> {
        let covers = self.covers.get(level).or(self.covers.last())?;
        // Groups are sorted and disjoint, so by id (first column): point reads look this up per run.
        let i = covers.binary_search_by_key(&cg, |g| group_id(g)).ok()?;
        covers.get(i).filter(|g| g.len() < self.nvals)
    }

    /// The groups of `level + 1` inside group `cg` of `level` (by containment, they partition it).
    pub(crate) fn children(&self, level: usize, cg: u32) -> Vec<&[usize]> {
        self.descendants(level, cg, level + 1)
    }

    /// The groups of `below` (deeper than `level`) inside group `cg` of `level` (by containment,
    /// they partition it).
    pub(crate) fn descendants(&self, level: usize, cg: u32, below: usize) -> Vec<&[usize]> {
        let Some(parent) = self.groups(level).iter().find(|g| group_id(g) == cg) else { return Vec::new() };
        self.groups(below).iter().filter(|g| g.first().is_none_or(|c| parent.contains(c))).map(Vec::as_slice).collect()
    }

    /// A layout of the given groups per level (deeper levels repeat the last). The caller
    /// makes sure each level partitions `0..nvals` and obeys containment.
    pub(crate) fn from_groups(mut levels: Vec<Vec<Vec<usize>>>, nvals: usize) -> Layout {
        // In the order a parsed layout has them, so equal layouts print the same text.
        for groups in &mut levels {
            for g in groups.iter_mut() {
                g.sort_unstable();
            }
            groups.sort_by_key(|g| g.first().copied());
        }
        Layout::from_levels(levels, nvals)
    }

    /// Canonical text of the layout (one clause per level, first `num_levels` levels).
    pub fn spec(&self, schema: &Schema, num_levels: usize) -> String {
        (0..num_levels)
            .map(|i| format!("L{i}: {}", Layout::groups_text(self.groups(i), schema)))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The text of one level's groups: `row`, `column` or `(a,b) (c)`.
    pub fn groups_text(groups: &[Vec<usize>], schema: &Schema) -> String {
        let nvals = schema.value_columns().len();
        if groups.len() == 1 && groups[0].len() == nvals {
            "row".to_owned()
        } else if groups.len() == nvals && nvals > 1 {
            "column".to_owned()
        } else {
            groups.iter().map(|g| group_text(g, schema)).collect::<Vec<_>>().join(" ")
        }
    }
}

fn group_text(g: &[usize], schema: &Schema) -> String {
    let names: Vec<&str> = g.iter().map(|&v| schema.columns()[schema.value_columns()[v]].name.as_str()).collect();
    format!("({})", names.join(","))
}

fn parse_levels(s: &str, num_levels: usize) -> Result<(usize, usize)> {
    let rest =
        s.strip_prefix(['L', 'l']).ok_or_else(|| bad(format!("`{s}` is not a level such as L1, L2- or L1-3")))?;
    let num = |t: &str| -> Result<usize> {
        let n: usize = t.trim().parse().map_err(|_| bad(format!("`{s}` is not a level such as L1, L2- or L1-3")))?;
        if n >= num_levels {
            return Err(bad(format!("level {n} in `{s}` does not exist (levels 0..{})", num_levels - 1)));
        }
        Ok(n)
    };
    let (lo, hi) = match rest.split_once('-') {
        None => {
            let n = num(rest)?;
            (n, n)
        }
        Some((a, "")) => (num(a)?, num_levels - 1),
        Some((a, b)) => (num(a)?, num(b)?),
    };
    if lo > hi {
        return Err(bad(format!("`{s}` is an empty range")));
    }
    Ok((lo, hi))
}

fn parse_groups(s: &str, schema: &Schema, nvals: usize) -> Result<Vec<Vec<usize>>> {
    if s.eq_ignore_ascii_case("row") {
        return Ok(vec![(0..nvals).collect()]);
    }
    if s.eq_ignore_ascii_case("column") {
        // A key-only table has one (empty) group whatever the layout says.
        if nvals == 0 {
            return Ok(vec![Vec::new()]);
        }
        return Ok((0..nvals).map(|v| vec![v]).collect());
    }
    let mut groups = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let inner = rest
            .strip_prefix('(')
            .ok_or_else(|| bad(format!("expected `row`, `column` or `(cols)`, found `{rest}`")))?;
        let (body, after) = inner.split_once(')').ok_or_else(|| bad(format!("unclosed group `{rest}`")))?;
        let mut g = Vec::new();
        for name in body.split(',').map(str::trim) {
            let c = schema.column_index(name).ok_or_else(|| bad(format!("unknown column `{name}`")))?;
            let v = schema
                .value_index(c)
                .ok_or_else(|| bad(format!("key column `{name}` is stored with every group; do not list it")))?;
            if g.contains(&v) {
                return Err(bad(format!("column `{name}` appears twice in group ({body})")));
            }
            g.push(v);
        }
        g.sort_unstable();
        groups.push(g);
        rest = after.trim_start();
    }
    let mut seen = vec![0usize; nvals];
    for g in &groups {
        for &v in g {
            seen[v] += 1;
        }
    }
    if let Some(v) = seen.iter().position(|&n| n != 1) {
        let name = &schema.columns()[schema.value_columns()[v]].name;
        let what = if seen[v] == 0 { "is in no group" } else { "is in more than one group" };
        return Err(bad(format!("column `{name}` {what}: groups must partition the non-key columns")));
    }
    groups.sort();
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Column, ColumnType};

    fn schema() -> Schema {
        let cols = ["k", "a", "b", "c", "s", "f"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect();
        Schema::new(cols, &["k"]).unwrap()
    }

    #[test]
    fn the_lifecycle_example_parses_and_inherits() {
        let s = schema();
        let l = Layout::parse("L0: row; L1: (a,b,c) (s,f); L2: (a) (b,c) (s) (f); L3-: column", &s, 6).unwrap();
        assert_eq!(l.groups(0), &[vec![0, 1, 2, 3, 4]]);
        assert_eq!(l.groups(1), &[vec![0, 1, 2], vec![3, 4]]);
        assert_eq!(l.groups(2), &[vec![0], vec![1, 2], vec![3], vec![4]]);
        assert_eq!(l.groups(5).len(), 5);
        let inherit = Layout::parse("L2: (a,b) (c,s,f)", &s, 4).unwrap();
        assert_eq!(inherit.groups(1), &[vec![0, 1, 2, 3, 4]]);
        assert_eq!(inherit.groups(3), inherit.groups(2));
        assert_eq!(Layout::parse(&l.spec(&s, 6), &s, 6).unwrap(), l);
        assert_eq!(l.children(1, 0), vec![&[0][..], &[1, 2][..]]);
        assert_eq!(l.children(1, 3), vec![&[3][..], &[4][..]]);
        assert_eq!(l.cover(2, 1).map(|c| c.to_vec()), Some(vec![1, 2]));
        assert!(l.cover(0, 0).is_none(), "the row group covers everything");
        assert_eq!(Layout::parse("", &s, 3).unwrap(), Layout::row(&s, 3));
    }

    #[test]
    fn bad_specs_name_the_problem() {
        let s = schema();
        for (spec, want) in [
            ("L1: (a,b) (c,s,f); L2: (a,c) (b) (s,f)", "group (a,c) of L2"),
            ("L0: column", "Level-0 must be `row`"),
            ("L1: (a,b) (c)", "column `s` is in no group"),
            ("L1: (a,b) (b,c,s,f)", "column `b` is in more than one group"),
            ("L1: (k,a,b,c,s,f)", "key column `k`"),
            ("L1: (a,b,c,s,zz)", "unknown column `zz`"),
            ("L9: row", "level 9"),
            ("L1 row", "has no `:`"),
            ("L3-1: row", "empty range"),
            ("L1: row; L1-2: column", "already set"),
            ("L1: (a,b", "unclosed group"),
            ("X1: row", "is not a level"),
        ] {
            let e = Layout::parse(spec, &s, 6).unwrap_err().to_string();
            assert!(e.contains(want), "{spec}: {e}");
        }
    }
}
