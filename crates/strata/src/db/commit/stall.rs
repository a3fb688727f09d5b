//! The write-stall rule: what a commit group must do before it writes, as a pure function of
//! the tree's shape and the memtables' (RocksDB's `GetWriteStallConditionAndCause` is the
//! same idea).

/// What the rule compares against ([`Options`](crate::Options)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StallLimits {
    /// [`Options::memtable_size`](crate::Options::memtable_size).
    pub memtable_size: usize,
    /// [`Options::max_immutable_memtables`](crate::Options::max_immutable_memtables).
    pub max_immutable: usize,
    /// [`Options::l0_slowdown_trigger`](crate::Options::l0_slowdown_trigger).
    pub l0_slowdown: usize,
    /// [`Options::l0_stop_trigger`](crate::Options::l0_stop_trigger).
    pub l0_stop: usize,
}

impl StallLimits {
    pub(crate) fn of(o: &crate::Options) -> Self {
        StallLimits {
            memtable_size: o.memtable_size,
            max_immutable: o.max_immutable_memtables,
            l0_slowdown: o.l0_slowdown_trigger,
            l0_stop: o.l0_stop_trigger,
        }
    }
}

/// What a commit group must do before it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Room {
    /// Wait: Level-0 holds its stop trigger's files (in some table), or the memtable is full
    /// while the most frozen memtables already wait for flush.
    pub stop: bool,
    /// Delay the group a little: Level-0 is at its slowdown trigger.
    pub slow: bool,
    /// Freeze the memtable and start another: it is full.
    pub rotate: bool,
}

/// The rule: what a group must do, given the most Level-0 runs of any table, the active
/// memtable's bytes and the frozen memtables waiting for flush.
pub(crate) fn room(l0: usize, mem_bytes: usize, frozen: usize, limits: &StallLimits) -> Room {
    let full = mem_bytes >= limits.memtable_size;
    Room {
        stop: l0 >= limits.l0_stop || (full && frozen >= limits.max_immutable),
        slow: l0 >= limits.l0_slowdown,
        rotate: full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: StallLimits = StallLimits { memtable_size: 1000, max_immutable: 1, l0_slowdown: 8, l0_stop: 12 };

    #[test]
    fn room_in_the_memtable_and_a_short_level0_go_on_at_once() {
        assert_eq!(room(0, 0, 0, &LIMITS), Room::default());
        assert_eq!(room(7, 999, 1, &LIMITS), Room::default());
    }

    #[test]
    fn a_full_memtable_rotates_while_fewer_than_the_most_frozen_ones_wait() {
        assert_eq!(room(0, 1000, 0, &LIMITS), Room { rotate: true, ..Room::default() });
        assert_eq!(room(0, 1500, 1, &LIMITS), Room { stop: true, slow: false, rotate: true });
        // Frozen memtables alone stop nothing while the active one has room.
        assert_eq!(room(0, 10, 5, &LIMITS), Room::default());
    }

    #[test]
    fn level0_slows_writes_at_its_slowdown_trigger_and_stops_them_at_its_stop_trigger() {
        assert_eq!(room(8, 0, 0, &LIMITS), Room { slow: true, ..Room::default() });
        assert_eq!(room(11, 0, 0, &LIMITS), Room { slow: true, ..Room::default() });
        assert_eq!(room(12, 0, 0, &LIMITS), Room { stop: true, slow: true, rotate: false });
        assert_eq!(room(40, 2000, 3, &LIMITS), Room { stop: true, slow: true, rotate: true });
    }
}
