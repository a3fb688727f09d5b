//! LASER's design advisor (seed 000 §5-§6): a cost model of each level's column groups
//! ([`model`]) and the selection of the groups that minimise it level by level under containment
//! ([`select`]).
//!
//! [`advise`] takes the tree's shape, what each level served and the current layout, and returns
//! the recommended groups of every level with the predicted cost of both layouts per class of
//! operation.

pub mod model;
pub mod select;
pub(crate) mod selfadvise;

use model::{Cost, LevelModel, LevelWorkload};

/// A set of value columns (by index among the value columns).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cols(Vec<u64>);

impl Cols {
    /// The set of `cols`.
    pub fn of(cols: impl IntoIterator<Item = usize>) -> Cols {
        let mut w = Vec::new();
        for c in cols {
            if w.len() <= c / 64 {
                w.resize(c / 64 + 1, 0);
            }
            w[c / 64] |= 1 << (c % 64);
        }
        Cols(w).trimmed()
    }

    fn trimmed(mut self) -> Cols {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        self
    }

    fn zip(&self, o: &Cols, f: impl Fn(u64, u64) -> u64) -> Cols {
        let n = self.0.len().max(o.0.len());
        let at = |v: &Cols, i: usize| v.0.get(i).copied().unwrap_or(0);
        Cols((0..n).map(|i| f(at(self, i), at(o, i))).collect()).trimmed()
    }

    /// Columns in both.
    pub fn and(&self, o: &Cols) -> Cols {
        self.zip(o, |a, b| a & b)
    }

    /// Columns in either.
    pub fn or(&self, o: &Cols) -> Cols {
        self.zip(o, |a, b| a | b)
    }

    /// Columns in `self` and not in `o`.
    pub fn minus(&self, o: &Cols) -> Cols {
        self.zip(o, |a, b| a & !b)
    }

    /// Whether the two share a column.
    pub fn intersects(&self, o: &Cols) -> bool {
        self.0.iter().zip(&o.0).any(|(a, b)| a & b != 0)
    }

    /// No column.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many columns.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The columns, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| (0..64).filter(move |b| w >> b & 1 == 1).map(move |b| i * 64 + b))
    }

    /// The columns as a sorted list.
    pub fn to_vec(&self) -> Vec<usize> {
        self.iter().collect()
    }
}

/// One level's input to the advisor.
#[derive(Debug, Clone)]
pub struct LevelInput {
    /// How the level is priced.
    pub model: LevelModel,
    /// What it served.
    pub workload: LevelWorkload,
}

/// The advisor's answer for one level.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelChoice {
    /// The recommended groups.
    pub groups: Vec<Vec<usize>>,
    /// The level's predicted cost under the current layout.
    pub current: Cost,
    /// The level's predicted cost under the recommended groups.
    pub advised: Cost,
}

/// Chooses the groups of levels 1.. (`levels[0]` is Level-1; Level-0 stays whole rows), each
/// level's groups inside the previous level's (containment), and prices the current layout
/// (`current[i]`: Level-(i+1)'s groups) beside them.
pub fn advise(nvals: usize, levels: &[LevelInput], current: &[Vec<Vec<usize>>]) -> Vec<LevelChoice> {
    let mut parents = vec![Cols::of(0..nvals)];
    let mut out = Vec::with_capacity(levels.len());
    for (i, input) in levels.iter().enumerate() {
        let mut chosen: Vec<Cols> = Vec::new();
        for (p, parent) in parents.iter().enumerate() {
            // The parents not yet split stay whole meanwhile: with the model's per-group sum,
            // each parent's best split does not depend on the others'.
            let others: Vec<Cols> = chosen.iter().chain(&parents[p + 1..]).cloned().collect();
            chosen.extend(select::split(&input.model, &input.workload, parent, &others));
        }
        chosen.sort();
        let cur: Vec<Cols> = current
            .get(i)
            .map(|g| g.iter().map(|g| Cols::of(g.iter().copied())).collect())
            .unwrap_or_else(|| vec![Cols::of(0..nvals)]);
        out.push(LevelChoice {
            groups: chosen.iter().map(Cols::to_vec).collect(),
            current: input.model.cost(&cur, &input.workload),
            advised: input.model.cost(&chosen, &input.workload),
        });
        parents = chosen;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::model::{Calibration, Ops};
    use super::*;

    fn ops(cols: &[usize], count: f64, entries: f64) -> Ops {
        Ops { cols: Cols::of(cols.iter().copied()), count, entries }
    }

    fn model() -> LevelModel {
        LevelModel {
            size_ratio: 10.0,
            key_bytes: 16.0,
            widths: vec![4.0; 6],
            row_groups: false,
            calibration: Calibration::default(),
        }
    }

    #[test]
    fn cols_set_operations() {
        let a = Cols::of([0, 3, 70]);
        let b = Cols::of([3, 4]);
        assert_eq!(a.and(&b), Cols::of([3]));
        assert_eq!(a.or(&b).to_vec(), vec![0, 3, 4, 70]);
        assert_eq!(a.minus(&b).to_vec(), vec![0, 70]);
        assert_eq!(a.minus(&a), Cols::default());
        assert!(a.intersects(&b) && !Cols::of([70]).intersects(&b));
        assert_eq!((a.len(), Cols::default().len()), (3, 0));
        // Equal sets compare equal whatever their history.
        assert_eq!(Cols::of([70]).minus(&Cols::of([70])), Cols::of([]));
    }

    /// A lifecycle workload: reads of whole rows near the top, narrow scans at the bottom. The
    /// advice keeps rows where reads dominate, splits the scanned columns off below, and every
    /// level's groups lie inside the level above's.
    #[test]
    fn advice_follows_the_workload_down_the_tree_and_keeps_containment() {
        let top = LevelWorkload {
            inserts: 10_000.0,
            point_reads: vec![ops(&[0, 1, 2, 3, 4, 5], 100_000.0, 0.0)],
            scans: vec![ops(&[5], 1.0, 1_000.0)],
            ..LevelWorkload::default()
        };
        let mid = LevelWorkload {
            inserts: 10_000.0,
            point_reads: vec![ops(&[0, 1, 2, 3, 4, 5], 1_000.0, 0.0), ops(&[3, 4, 5], 1_000.0, 0.0)],
            scans: vec![ops(&[4, 5], 20.0, 100_000.0)],
            ..LevelWorkload::default()
        };
        let bottom = LevelWorkload {
            inserts: 10_000.0,
            point_reads: vec![ops(&[0, 1, 2, 3, 4, 5], 10.0, 0.0)],
            scans: vec![ops(&[5], 1_000.0, 1_000_000.0), ops(&[4, 5], 10.0, 1_000_000.0)],
            ..LevelWorkload::default()
        };
        let levels: Vec<LevelInput> =
            [top, mid, bottom].into_iter().map(|workload| LevelInput { model: model(), workload }).collect();
        let row = vec![vec![(0..6).collect::<Vec<_>>()]; 3];
        let advice = advise(6, &levels, &row);
        assert_eq!(advice[0].groups, vec![vec![0, 1, 2, 3, 4, 5]], "reads of whole rows keep rows");
        assert!(advice[2].groups.contains(&vec![5]), "the column scanned most stands alone: {:?}", advice[2].groups);
        for w in advice.windows(2) {
            for g in &w[1].groups {
                assert!(w[0].groups.iter().any(|p| g.iter().all(|c| p.contains(c))), "{g:?} breaks containment");
            }
        }
        for (a, l) in advice.iter().zip(&levels) {
            assert!(a.advised.total() <= a.current.total() + 1e-9);
            let groups: Vec<Cols> = a.groups.iter().map(|g| Cols::of(g.iter().copied())).collect();
            assert_eq!(a.advised, l.model.cost(&groups, &l.workload));
        }
        assert!(advice[2].advised.total() < advice[2].current.total(), "rows at the bottom cost more");
    }
}
