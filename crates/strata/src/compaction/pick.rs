//! Choosing the next compaction: the tier tasks ([`tiering`]) and the size-based policy
//! ([`policy`]) arbitrated, as a pure function of a version and a [`PickEnv`] (what the options,
//! the tiers, the access histograms and the running work say at the moment of the pick). No IO,
//! no clock, no lock: the database builds the environment and installs what the task produces.
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

use std::cell::OnceCell;
use std::collections::HashSet;

use super::policy::{self, CompactionTask, PolicyOptions};
use super::tiering::{self, Choice, Heat};
use crate::tier::{model, TierPlacement};
use crate::version::{FileMeta, TableVersion, Version};
use crate::vfs::DeviceProfile;

/// Whether a file of a table at a level holds other groups than the table's layout gives the
/// level (see [`PickEnv::stale`]).
pub type Stale<'a> = &'a dyn Fn(&TableVersion, usize, &FileMeta) -> bool;

/// Everything a pick depends on besides the version.
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
    /// The access histograms, taken when a choice needs them (at most once per pick).
    pub heat: &'a dyn Fn() -> Heat,
    /// Whether a table's deferred files are to be staged now (reads wait on them, or the tree
    /// is being settled).
    pub staging_wanted: &'a dyn Fn(u32) -> bool,
    /// Where round-robin eviction stopped last: the table and the last key it moved.
    pub evict_after: (u32, &'a [u8]),
    /// Whether a file of a table at a level (from Level-1 down) holds other groups than the
    /// table's layout gives that level; `None` while re-layout waits (its rate is spent).
    pub stale: Option<Stale<'a>>,
}

/// The next compaction to run, if any (see the module comment for the order).
pub fn pick(v: &Version, env: &PickEnv<'_>) -> Option<CompactionTask> {
    let heat_cell = OnceCell::new();
    let heat = || heat_cell.get_or_init(|| (env.heat)());
    let deferred = v.tables.values().any(|t| !t.deferred.is_empty());
    let pays = |bytes: u64, files: usize, misses: u64| model::staging_compaction_pays(bytes, files, misses, &env.fast);
    if deferred {
        if let Some(t) = tiering::stage(v, env.busy, &env.policy, heat(), &pays, env.staging_wanted) {
            return Some(t);
        }
    }
    let mut opts = env.policy;
    if (deferred || env.defers_marking) && level0_may_wait(v, env, heat(), &pays) {
        // Deferred compaction: Level-0 files overlap on the fast tier instead of moving down,
        // up to halfway to the count that slows writers down.
        opts.l0_trigger = opts.l0_trigger.max((opts.l0_trigger + env.l0_slowdown_trigger) / 2);
    }
    by_size_and_tier(v, env, &opts, &heat).or_else(|| relayout(v, env))
}

/// A re-layout task: the first file, from Level-1 down, of a table whose layout changed that
/// was written before the change ([`TableVersion::relayout_below`]), is not being compacted and
/// is `stale`; rewritten alone into its own level and tier.
pub fn relayout(v: &Version, env: &PickEnv<'_>) -> Option<CompactionTask> {
    let stale = env.stale?;
    v.tables.values().find_map(|t| {
        let (level, f) = t.before_relayout().find(|(level, f)| !env.busy.contains(&f.number) && stale(t, *level, f))?;
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
fn by_size_and_tier<'h>(
    v: &Version,
    env: &PickEnv<'_>,
    opts: &PolicyOptions,
    heat: &dyn Fn() -> &'h Heat,
) -> Option<CompactionTask> {
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
            if informed { Choice::Coldest(heat()) } else { Choice::After(env.evict_after.0, env.evict_after.1) };
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
    tiering::promote(v, env.busy, opts, (fast_bytes + arriving, budget), slow, heat(), &pays)
}
