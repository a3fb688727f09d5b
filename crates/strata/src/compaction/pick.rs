//! Choosing the next compaction: the tier tasks ([`tiering`]) and the size-based policy
//! ([`policy`]) arbitrated, as a pure function of a version and a [`PickEnv`] (what the options,
//! the tiers, the access histograms and the running work say at the moment of the pick). No IO,
//! no clock, no lock: the environment holds values only (the database computes them before it
//! picks, reading files where it must), and the database installs what the task produces.
//!
//! Order (LogStore §V on top of the leveled policy):
//! 1. a staging compaction when one is due (its span is full, reads suffer from it, or the caller
//!    wants every deferred file staged), as writers may wait for Level-0;
//! 2. a Level-0 task; with deferred marking and the fast tier under its budget, Level-0 waits
//!    past its trigger (up to halfway to the slowdown trigger) unless the empty probes of some
//!    table's Level-0 files pay for merging them;
//! 3. while the fast tier is over its budget, eviction or the size-based choice, whichever
//!    scores higher;
//! 4. the size-based choice;
//! 5. with informed placement, promotion of the hottest slow-tier data;
//! 6. when nothing else is due, a re-layout: one file of a table whose layout changed, still in
//!    groups its level no longer has, rewritten in place ([`relayout`]).

use std::collections::HashSet;

use super::policy::{self, CompactionTask, PolicyOptions};
use super::tiering::{self, Choice, Heat};
use crate::tier::{model, TierPlacement};
use crate::version::{TableVersion, Version};
use crate::vfs::DeviceProfile;

/// Everything a pick depends on besides the version: values, taken before the pick.
pub struct PickEnv<'a> {
    /// Files already being compacted.
    pub busy: &'a HashSet<u64>,
    /// The shape of the tree.
    pub policy: PolicyOptions,
    /// Level-0 files at which writers slow down.
    pub l0_slowdown_trigger: usize,
    /// Each tier's byte budget (`None`: unlimited), fast first; empty without tiers.
    pub budgets: Vec<Option<u64>>,
    /// Flushes leave marking the slow tier to staging compactions.
    pub defers_marking: bool,
    /// How data is placed on tiers.
    pub placement: TierPlacement,
    /// The device profiles of the fast and the slowest tier.
    pub fast: DeviceProfile,
    /// See [`Self::fast`].
    pub slow: DeviceProfile,
    /// The access histograms (empty where no choice of the pick can use them: without tiers).
    pub heat: &'a Heat,
    /// The tables whose deferred files are to be staged now (reads wait on them).
    pub staging_wanted: &'a HashSet<u32>,
    /// The tree is being settled: every deferred file is to be staged.
    pub settle: bool,
    /// Where round-robin eviction stopped last: the table and the last key it moved.
    pub evict_after: (u32, &'a [u8]),
    /// The files, by level and number, that hold other groups than their table's layout gives
    /// their level (from Level-1 down; see [`stale_files`]); `None` while re-layout waits (its
    /// rate is spent).
    pub stale: Option<&'a HashSet<(usize, u64)>>,
}

/// The files of `v` a re-layout would rewrite: those written before their table's last layout
/// change ([`TableVersion::before_relayout`]) for which `stale` (given the table, the level and
/// the file) says they hold other groups than the layout gives their level. `stale` may read
/// the file; this is what the database runs before a pick, outside any lock.
pub fn stale_files(
    v: &Version,
    stale: impl Fn(&TableVersion, usize, &crate::version::FileMeta) -> bool,
) -> HashSet<(usize, u64)> {
    v.tables
        .values()
        .flat_map(|t| t.before_relayout().filter(|(level, f)| stale(t, *level, f)).map(|(level, f)| (level, f.number)))
        .collect()
}

/// The next compaction to run, if any (see the module comment for the order).
pub fn pick(v: &Version, env: &PickEnv<'_>) -> Option<CompactionTask> {
    let deferred = v.tables.values().any(|t| !t.deferred.is_empty());
    let pays = |bytes: u64, files: usize, misses: u64| model::staging_compaction_pays(bytes, files, misses, &env.fast);
    if deferred {
        let wanted = |table: u32| env.settle || env.staging_wanted.contains(&table);
        if let Some(t) = tiering::stage(v, env.busy, &env.policy, env.heat, &pays, &wanted) {
            return Some(t);
        }
    }
    let mut opts = env.policy;
    if (deferred || env.defers_marking) && level0_may_wait(v, env, env.heat, &pays) {
        // Deferred compaction: Level-0 files overlap on the fast tier instead of moving down,
        // up to halfway to the count that slows writers down.
        opts.l0_trigger = opts.l0_trigger.max((opts.l0_trigger + env.l0_slowdown_trigger) / 2);
    }
    by_size_and_tier(v, env, &opts).or_else(|| relayout(v, env))
}

/// A re-layout task: the first file, from Level-1 down, of a table whose layout changed that
/// was written before the change ([`TableVersion::relayout_below`]), is not being compacted and
/// is `stale`; rewritten alone into its own level and tier.
pub fn relayout(v: &Version, env: &PickEnv<'_>) -> Option<CompactionTask> {
    let stale = env.stale?;
    v.tables.values().find_map(|t| {
        let (level, f) = t
            .before_relayout()
            .find(|(level, f)| !env.busy.contains(&f.number) && stale.contains(&(*level, f.number)))?;
        Some(CompactionTask::in_place(t, level, f, (f.tier, 0.0, true)))
    })
}

/// Deferred compaction (LogStore §V-C): whether Level-0 tasks may wait past the trigger
/// because the fast tier, where Level-0 lives, is under its budget and no table's Level-0
/// files have had empty probes enough to pay for merging them (`pays`).
fn level0_may_wait(v: &Version, env: &PickEnv<'_>, heat: &Heat, pays: &dyn Fn(u64, usize, u64) -> bool) -> bool {
    let Some(budget) = env.budgets.first().copied().flatten().filter(|_| env.defers_marking) else {
        return false;
    };
    if v.tier_bytes(env.budgets.len())[0] >= budget {
        return false;
    }
    v.tables.values().all(|t| {
        let l0 = &t.levels[0];
        let bytes = l0.files().map(|f| f.size).sum();
        !pays(bytes, l0.files().count(), tiering::empty_probes(heat, l0.files()))
    })
}

/// Steps 2 to 5 of the module comment.
fn by_size_and_tier(v: &Version, env: &PickEnv<'_>, opts: &PolicyOptions) -> Option<CompactionTask> {
    let by_size = policy::pick(v, env.busy, opts);
    let budget = match env.budgets.as_slice() {
        [fast, _, ..] => *fast,
        _ => None,
    };
    let Some(budget) = budget else { return by_size };
    if by_size.as_ref().is_some_and(|t| t.level == 0) {
        return by_size;
    }
    let on_tiers = v.tier_bytes(env.budgets.len());
    let (fast_bytes, slow) = (on_tiers[0], (env.budgets.len() - 1) as u8);
    let informed = env.placement == TierPlacement::Informed;
    if fast_bytes > budget {
        let choice =
            if informed { Choice::Coldest(env.heat) } else { Choice::After(env.evict_after.0, env.evict_after.1) };
        let evicted = tiering::evict(v, env.busy, opts, (fast_bytes, budget), slow, choice);
        return match (by_size, evicted) {
            (Some(s), Some(e)) if s.score >= e.score => Some(s),
            (s, e) => e.or(s),
        };
    }
    if by_size.is_some() || !informed || on_tiers[usize::from(slow)] == 0 {
        return by_size;
    }
    let pays = |bytes: u64, reads: u64| model::reverse_compaction_pays(bytes, reads, &env.fast, &env.slow);
    // Slow-tier files being compacted may be on their way up: count them as arrived, so two
    // promotions running at once do not overfill the fast tier together.
    let arriving: u64 = v.files().filter(|f| f.tier != 0 && env.busy.contains(&f.number)).map(|f| f.size).sum();
    tiering::promote(v, env.busy, opts, (fast_bytes + arriving, budget), slow, env.heat, &pays)
}
