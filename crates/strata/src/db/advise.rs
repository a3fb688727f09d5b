//! [`Db::advise`]: LASER's design advisor (`crate::advisor`) over a table's own workload
//! statistics and tree.

use crate::advisor::model::{Calibration, Cost, LevelModel, LevelWorkload, Ops};
use crate::advisor::{self, selfadvise, Cols, LevelInput};
use crate::catalog::trace;
use crate::catalog::workload::{At, Op, ShapeCount, Workload};
use crate::column_group::Layout;
use crate::error::{Error, Result};
use crate::version::TableVersion;

use super::{Db, DbInner};

/// How [`Db::advise`] prices a layout.
#[derive(Debug, Clone, Default)]
pub struct AdviseOptions {
    /// Prices per block (default: [`Calibration::default`]).
    pub calibration: Calibration,
    /// Advise on the workload recorded in this trace ([`Db::trace_start`]) instead of the one
    /// counted since the database was opened.
    pub trace: Option<std::path::PathBuf>,
}

/// One level in [`Advice`].
#[derive(Debug, Clone, PartialEq)]
pub struct LevelAdvice {
    /// Level number (1 and deeper; Level-0 stays whole rows).
    pub level: usize,
    /// The level's groups now and as advised, as layout text (`(a,b) (c)`, `row`, `column`).
    pub current: String,
    /// See [`Self::current`].
    pub advised: String,
    /// Predicted cost of the level's workload under the current groups, in microseconds.
    pub current_cost: Cost,
    /// Predicted cost under the advised groups.
    pub advised_cost: Cost,
    /// The workload the prediction is for, as the statistics gave it.
    pub workload: LevelWorkload,
    /// How the level was priced.
    pub model: LevelModel,
}

/// What [`Db::advise`] recommends for a table.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    /// Table name.
    pub table: String,
    /// The current layout, one clause per level.
    pub current: String,
    /// The advised layout, one clause per level (a spec [`crate::TableOptions::with_layout`]
    /// takes).
    pub advised: String,
    /// Per level that holds data or served operations.
    pub levels: Vec<LevelAdvice>,
    /// The prices the model used.
    pub calibration: Calibration,
}

impl Advice {
    /// Predicted cost of the workload under the current layout, summed over the levels.
    pub fn current_cost(&self) -> Cost {
        self.levels.iter().fold(Cost::default(), |a, l| a + l.current_cost)
    }

    /// Predicted cost under the advised layout.
    pub fn advised_cost(&self) -> Cost {
        self.levels.iter().fold(Cost::default(), |a, l| a + l.advised_cost)
    }

    /// Predicted cost of the same workload under any `layout` of the table (for comparing
    /// layouts with the model: `Layout::parse` makes one from a spec).
    pub fn cost_of(&self, layout: &Layout) -> Cost {
        self.levels.iter().fold(Cost::default(), |a, l| {
            let groups: Vec<Cols> = layout.groups(l.level).iter().map(|g| Cols::of(g.iter().copied())).collect();
            a + l.model.cost(&groups, &l.workload)
        })
    }
}

/// Mean stored width of each value column: fixed types their width; strings and bytes share
/// what the table's files hold per entry beyond the key and the fixed columns (16 bytes each
/// without data).
fn widths(t: &TableVersion, key_bytes: f64) -> Vec<f64> {
    let types = &t.info.value_types;
    let fixed: f64 = types.iter().filter_map(|ty| ty.fixed_width()).map(|w| w as f64).sum();
    let variable = types.iter().filter(|ty| ty.fixed_width().is_none()).count();
    let (bytes, entries) =
        t.levels.iter().flat_map(|l| l.files()).fold((0u64, 0u64), |(b, e), f| (b + f.size, e + f.entries));
    let per_entry = if entries > 0 { bytes as f64 / entries as f64 } else { 0.0 };
    let var_width = if variable > 0 && per_entry > 0.0 {
        ((per_entry - key_bytes - fixed) / variable as f64).max(1.0)
    } else {
        16.0
    };
    types.iter().map(|ty| ty.fixed_width().map_or(var_width, |w| w as f64)).collect()
}

/// The classes of one operation type at `at`: each projection with a counter of its own, and
/// the rest as one class over every column they touched (`per_column`).
fn classes(shapes: Vec<ShapeCount>, per_column: &[u64], scale: f64) -> Vec<Ops> {
    let mut known = vec![0u64; per_column.len()];
    let mut out = Vec::new();
    let mut other = None;
    for s in shapes {
        let entries = if s.ops > 0 { s.entries as f64 / s.ops as f64 } else { 0.0 };
        match s.cols {
            Some(cols) => {
                for &c in &cols {
                    if let Some(k) = known.get_mut(c) {
                        *k += s.ops;
                    }
                }
                out.push(Ops { cols: Cols::of(cols), count: s.ops as f64 * scale, entries });
            }
            None => other = Some((s.ops, entries)),
        }
    }
    if let Some((ops, entries)) = other {
        let cols = Cols::of((0..per_column.len()).filter(|&c| per_column[c] > known[c]));
        out.push(Ops { cols, count: ops as f64 * scale, entries });
    }
    out
}

impl Db {
    /// Runs LASER's design advisor (seed 000 §5-§6) on table `name`: from the workload its
    /// levels served since the database was opened (operations by projection, and the entries
    /// scans overlapped), the shape of its tree and the widths of its columns, the column groups
    /// of every level that minimise the modelled cost, each level's groups inside the level
    /// above's. Returns the advised layout's text and the predicted cost of the workload per
    /// level and class under the current and the advised layouts.
    ///
    /// Levels deeper than the deepest that holds data or served an operation keep the advice
    /// of the deepest one. Updates counted at a level are the partial rows flushes and
    /// compactions wrote there, every rewrite counted; the model's update cost has the size
    /// ratio in it, so they are divided by it.
    ///
    /// # Errors
    /// [`Error::UnknownTable`]; [`Error::InvalidArgument`] for a lineage-engine table (it has no
    /// levels).
    pub fn advise(&self, name: &str, opts: &AdviseOptions) -> Result<Advice> {
        let view = self.inner.view.load();
        let t = view.version.table_by_name(name).ok_or_else(|| Error::UnknownTable(name.to_owned()))?;
        let traced;
        let w = match &opts.trace {
            Some(path) => {
                traced = trace::load(path, &t.info.name, t.info.value_types.len())?;
                &traced
            }
            None => &*t.info.workload,
        };
        self.inner.advise_on(t, w, opts.calibration)
    }
}

impl DbInner {
    /// One round of self-advising (see [`crate::Options::self_advise`] and
    /// [`crate::advisor::selfadvise`]): re-advises each table of row-group files on the
    /// workload it served since the last round and applies the advice when it pays.
    pub(crate) fn self_advise_round(self: &std::sync::Arc<Self>, rounds: &mut selfadvise::Rounds) {
        let version = self.view.load().version.clone();
        for t in version.tables.values() {
            let info = &t.info;
            let has_layout = self
                .stores
                .pin()
                .get(&info.id)
                .is_some_and(|s| s.store.supports(super::store::Feature::Layout, &info.name).is_ok());
            if !has_layout || !info.options.row_groups {
                continue;
            }
            let s = rounds.tables.entry(info.id).or_default();
            let fresh = info.workload.since(s.mark.as_ref());
            let window = info.workload.since_decayed(s.mark.as_ref(), s.window.as_ref(), selfadvise::DECAY);
            s.mark = Some(info.workload.mark());
            s.window = Some(window);
            if !selfadvise::worth_advising(fresh.total_ops()) {
                continue;
            }
            let Some(window) = s.window.as_ref() else { continue };
            let started = std::time::Instant::now();
            // Prices measured on the table itself once it holds data below Level-0, and again
            // each time it has grown to twice the entries of the last measurement.
            let below: u64 = t.levels.iter().skip(1).flat_map(|l| l.files()).map(|f| f.entries).sum();
            if selfadvise::recalibrate(below, s.prices.as_ref().map(|p| p.1)) {
                if let Ok(cal) = self.calibrate(&info.name) {
                    s.prices = Some((cal, below));
                }
            }
            let calibration = s.prices.as_ref().map_or_else(Calibration::default, |p| p.0);
            let advice = self.advise_on(t, window, calibration);
            self.io.lock().self_advise_micros += started.elapsed().as_micros() as u64;
            let Ok(advice) = advice else { continue };
            let before = s.advised.replace(advice.advised.clone());
            let change = selfadvise::apply(&selfadvise::Advised {
                current: (&advice.current, advice.current_cost().total()),
                advised: (&advice.advised, advice.advised_cost().total()),
                before: before.as_deref(),
            });
            if change && self.set_layout(&info.name, Some(&advice.advised)).is_ok() {
                self.io.lock().self_advised += 1;
            }
        }
    }

    /// How the model prices a level of table `t` at `calibration`'s prices (the same for every
    /// level); fails for a lineage-engine table, which has no levels.
    pub(crate) fn level_model(&self, t: &TableVersion, calibration: Calibration) -> Result<LevelModel> {
        let info = &t.info;
        if let Some(s) = self.stores.pin().get(&info.id) {
            s.store.supports(super::store::Feature::Levels, &info.name)?;
        }
        // The key columns, then the sequence number and kind stored with every version.
        let key_bytes = info.key_types.iter().map(|ty| ty.fixed_width().unwrap_or(16) as f64).sum::<f64>() + 8.0;
        Ok(LevelModel {
            size_ratio: self.config.opts.level_size_ratio.max(2) as f64,
            key_bytes,
            widths: widths(t, key_bytes),
            row_groups: info.options.row_groups,
            calibration,
        })
    }

    /// The advice for table `t` on workload `w` (see [`Db::advise`]).
    pub(crate) fn advise_on(&self, t: &TableVersion, w: &Workload, calibration: Calibration) -> Result<Advice> {
        let info = &t.info;
        let model = self.level_model(t, calibration)?;
        let nvals = info.value_types.len();
        let ratio = model.size_ratio;
        let inserts = w.inserts() as f64;
        let num_levels = t.levels.len();
        if num_levels < 2 {
            return Err(Error::InvalidArgument("a tree of one level has no layout to advise".into()));
        }
        let served = |l: usize| {
            let at = At::Level(l);
            [Op::PointRead, Op::Scan, Op::Update].iter().any(|&op| w.read(at, op).0 > 0)
        };
        let deepest =
            (1..num_levels).rev().find(|&l| t.levels[l].files().next().is_some() || served(l)).unwrap_or(1).max(1);
        let mut inputs = Vec::new();
        let mut current = Vec::new();
        for l in 1..=deepest.min(num_levels - 1) {
            let at = At::Level(l);
            let cols = |op| w.read(at, op).1;
            let holds = t.levels.get(l).is_some_and(|lv| lv.files().next().is_some());
            let workload = LevelWorkload {
                inserts: if holds { inserts } else { 0.0 },
                point_reads: classes(w.shapes(at, Op::PointRead), &cols(Op::PointRead), 1.0),
                scans: classes(w.shapes(at, Op::Scan), &cols(Op::Scan), 1.0),
                updates: classes(w.shapes(at, Op::Update), &cols(Op::Update), 1.0 / ratio),
            };
            inputs.push(LevelInput { model: model.clone(), workload });
            current.push(info.layout.groups(l).to_vec());
        }
        let advice = advisor::advise(nvals, &inputs, &current);
        let mut levels = vec![vec![(0..nvals).collect::<Vec<_>>()]];
        levels.extend(advice.iter().map(|a| a.groups.clone()));
        let advised_layout = Layout::from_groups(levels, nvals);
        let text = |groups: &[Vec<usize>]| Layout::groups_text(groups, &info.schema);
        Ok(Advice {
            table: info.name.clone(),
            current: info.layout.spec(&info.schema, num_levels),
            advised: advised_layout.spec(&info.schema, num_levels),
            levels: advice
                .into_iter()
                .zip(inputs)
                .enumerate()
                .map(|(i, (a, input))| LevelAdvice {
                    level: i + 1,
                    current: text(info.layout.groups(i + 1)),
                    advised: text(advised_layout.groups(i + 1)),
                    current_cost: a.current,
                    advised_cost: a.advised,
                    workload: input.workload,
                    model: input.model,
                })
                .collect(),
            calibration,
        })
    }
}

impl Db {
    /// Starts recording table `name`'s workload into the trace file at `path` (created, or
    /// appended to if it is a trace of this table): every event the workload statistics count,
    /// at the level that served it (see `docs/format/trace.md`). Tracing goes on across
    /// restarts, in whatever process opens the database, until [`Db::trace_stop`].
    ///
    /// # Errors
    /// [`Error::UnknownTable`]; [`Error::InvalidArgument`] when the file cannot be opened or is
    /// not a trace of this table.
    pub fn trace_start(&self, name: &str, path: &std::path::Path) -> Result<()> {
        self.inner.check_writable()?;
        let t = self.inner.view.load().version.table_by_name(name).cloned();
        let t = t.ok_or_else(|| Error::UnknownTable(name.to_owned()))?;
        let path = std::path::absolute(path).map_err(|e| Error::InvalidArgument(format!("{}: {e}", path.display())))?;
        let w = trace::TraceWriter::open(&path, name, t.info.value_types.len())?;
        let _guard = self.inner.sched.manual_ops.lock();
        let mut traces = trace::read_traces(&*self.inner.config.fs, &self.inner.config.dir)?;
        traces.retain(|(id, _)| *id != t.info.id);
        traces.push((t.info.id, path));
        trace::write_traces(&*self.inner.config.fs, &self.inner.config.dir, &traces)?;
        t.info.workload.start_trace(w);
        Ok(())
    }

    /// Stops tracing table `name`, flushing its trace; returns the trace's path (`None`: it
    /// was not traced).
    ///
    /// # Errors
    /// [`Error::UnknownTable`]; [`Error::InvalidArgument`] when a write to the trace failed
    /// (tracing stopped there; what was written before is kept).
    pub fn trace_stop(&self, name: &str) -> Result<Option<std::path::PathBuf>> {
        self.inner.check_writable()?;
        let t = self.inner.view.load().version.table_by_name(name).cloned();
        let t = t.ok_or_else(|| Error::UnknownTable(name.to_owned()))?;
        let _guard = self.inner.sched.manual_ops.lock();
        let mut traces = trace::read_traces(&*self.inner.config.fs, &self.inner.config.dir)?;
        let recorded = traces.iter().find(|(id, _)| *id == t.info.id).map(|(_, p)| p.clone());
        traces.retain(|(id, _)| *id != t.info.id);
        trace::write_traces(&*self.inner.config.fs, &self.inner.config.dir, &traces)?;
        Ok(t.info.workload.stop_trace()?.or(recorded))
    }
}

impl DbInner {
    /// Opens again the traces the database directory names (see [`Db::trace_start`]); a trace
    /// that cannot be opened leaves its table untraced, and [`Db::trace_stop`] reports why. A
    /// `TRACES` file that cannot be read traces nothing (it never keeps the database from
    /// opening; the next `trace_start` or `trace_stop` reports it).
    pub(crate) fn resume_traces(&self) {
        let view = self.view.load();
        let Ok(traces) = trace::read_traces(&*self.config.fs, &self.config.dir) else { return };
        for (id, path) in traces {
            let Some(t) = view.version.tables.get(&id) else { continue };
            match trace::TraceWriter::open(&path, &t.info.name, t.info.value_types.len()) {
                Ok(w) => t.info.workload.start_trace(w),
                Err(e) => t.info.workload.trace_failed(e.to_string()),
            }
        }
    }
}

impl Db {
    /// Measures the model's prices on table `name` as it is now (block cache and files as they
    /// stand): whole-row point reads of keys sampled across the table, full scans of its first
    /// value column, and the flushes and compactions since open, each divided by the blocks the
    /// model counts for it (a point read's blocks at the deepest level holding data; a scan's at
    /// every level). Takes a few hundred reads and three scans, which the workload statistics
    /// do not count; a table with no rows, or a database that has written nothing since open,
    /// keeps the default for what it cannot measure.
    ///
    /// # Errors
    /// As [`Db::advise`], and any read error.
    pub fn calibrate(&self, name: &str) -> Result<Calibration> {
        self.inner.calibrate(name)
    }
}

impl DbInner {
    /// [`Db::calibrate`].
    pub(crate) fn calibrate(self: &std::sync::Arc<Self>, name: &str) -> Result<Calibration> {
        // Its reads are a measurement, not the table's workload.
        crate::catalog::workload::uncounted(|| self.calibrate_uncounted(name))
    }

    fn calibrate_uncounted(self: &std::sync::Arc<Self>, name: &str) -> Result<Calibration> {
        let view = self.view.load();
        let t = view.version.table_by_name(name).ok_or_else(|| Error::UnknownTable(name.to_owned()))?.clone();
        drop(view);
        let block_bytes = self.config.opts.block_size as f64;
        let mut cal = Calibration { block_bytes, ..Calibration::default() };
        // Priced at one per block, the model counts blocks.
        let model = self.level_model(&t, Calibration::blocks(block_bytes))?;
        let holding: Vec<usize> = (1..t.levels.len()).filter(|&l| t.levels[l].files().next().is_some()).collect();
        let Some(&deepest) = holding.last() else {
            return Ok(cal);
        };
        let table = super::Table::new(self.clone(), t.info.clone());
        let schema = &t.info.schema;
        let nvals = t.info.value_types.len();
        let groups = |level: usize| -> Vec<Cols> {
            t.info.layout.groups(level).iter().map(|g| Cols::of(g.iter().copied())).collect()
        };
        let ro = crate::ReadOptions::default();

        // Point reads: every k-th key of the table, whole rows.
        let key_names: Vec<&str> = schema.primary_key().iter().map(|&c| schema.columns()[c].name.as_str()).collect();
        let rows = table.estimated_rows()?.max(1);
        let step = (rows / 300).max(1) as usize;
        let keys: Vec<Vec<crate::Value>> = table
            .scan(&crate::KeyRange::all(), &table.projection(&key_names)?, &ro)?
            .step_by(step)
            .take(300)
            .collect::<Result<_>>()?;
        if !keys.is_empty() && nvals > 0 {
            let one = LevelWorkload {
                point_reads: vec![Ops { cols: Cols::of(0..nvals), count: 1.0, entries: 0.0 }],
                ..LevelWorkload::default()
            };
            let blocks = model.cost(&groups(deepest), &one).point_reads.max(1.0);
            let start = std::time::Instant::now();
            for k in &keys {
                table.get(k, &crate::Projection::All, &ro)?;
            }
            cal.point_block_us = start.elapsed().as_secs_f64() * 1e6 / keys.len() as f64 / blocks;
        }

        // Scans: the first value column over the whole table, the fastest of three.
        if nvals > 0 {
            let col = schema.columns()[schema.value_columns()[0]].name.as_str();
            let proj = table.projection(&[col])?;
            let mut blocks = 0.0;
            for &l in &holding {
                let entries = t.levels[l].files().map(|f| f.entries).sum::<u64>() as f64;
                let one = LevelWorkload {
                    scans: vec![Ops { cols: Cols::of([0]), count: 1.0, entries }],
                    ..LevelWorkload::default()
                };
                blocks += model.cost(&groups(l), &one).scans;
            }
            let mut best = f64::MAX;
            for _ in 0..3 {
                let start = std::time::Instant::now();
                for r in table.scan(&crate::KeyRange::all(), &proj, &ro)? {
                    r?;
                }
                best = best.min(start.elapsed().as_secs_f64() * 1e6);
            }
            if blocks >= 1.0 {
                cal.scan_block_us = best / blocks;
            }
        }

        // Writes: the flushes' and compactions' time over the blocks they wrote, since open.
        let io = self.io.lock();
        let written = io.written;
        if written as f64 >= block_bytes {
            cal.write_block_us = (io.flush_micros + io.compaction_micros) as f64 / (written as f64 / block_bytes);
        }
        Ok(cal)
    }
}
