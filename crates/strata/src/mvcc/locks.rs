//! Row locks: a transaction about to write a row it read holds the row until it ends, so that a
//! second writer of the row waits for the first instead of both computing from the same version
//! (PostgreSQL's row locks under READ COMMITTED; see [`crate::Transaction::lock`]).
//!
//! Locks are kept only for rows that are locked: a map from row to holder, and from each waiting
//! transaction to the row it waits for. A transaction about to wait follows that chain from the
//! row's holder (who holds it, what does that one wait for, who holds that, ...); if the chain
//! comes back to it, waiting would never end, and it is refused instead (a deadlock). Every
//! cycle is found this way by the transaction that closes it, since the others in it were
//! already waiting when it arrived. Waiters sleep on one condition variable and look again at
//! every release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::conflict::RowId;
use crate::sync::{site, Condvar, Mutex};

/// A lock was refused because waiting for it would close a cycle of waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deadlock;

#[derive(Debug, Default)]
struct Held {
    /// Each locked row's holder (a transaction id).
    owner: HashMap<RowId, u64>,
    /// The row each waiting transaction waits for.
    waits_for: HashMap<u64, RowId>,
}

impl Held {
    /// Whether `me` waiting for `row` would close a cycle.
    fn closes_cycle(&self, me: u64, row: &RowId) -> bool {
        let mut row = row;
        // Each step visits another waiter; more steps than waiters means a cycle without `me`,
        // which cannot form (its last member would have been refused), but ends the walk.
        for _ in 0..=self.waits_for.len() {
            let Some(&holder) = self.owner.get(row) else { return false };
            if holder == me {
                return true;
            }
            match self.waits_for.get(&holder) {
                Some(next) => row = next,
                None => return false,
            }
        }
        false
    }
}

/// The database's row locks.
#[derive(Debug)]
pub(crate) struct RowLocks {
    held: Mutex<Held>,
    released: Condvar,
    next_id: AtomicU64,
}

impl Default for RowLocks {
    fn default() -> Self {
        RowLocks {
            held: Mutex::new(&site::ROW_LOCKS, Held::default()),
            released: Condvar::new(),
            next_id: AtomicU64::new(1),
        }
    }
}

impl RowLocks {
    /// A new transaction id (never 0, never reused while the database is open).
    pub(crate) fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes `row` for `me` if no one else holds it: `Some(true)` when taken now, `Some(false)`
    /// when `me` held it already, `None` when another transaction holds it.
    pub(crate) fn try_lock(&self, me: u64, row: &RowId) -> Option<bool> {
        let mut held = self.held.lock();
        match held.owner.get(row) {
            Some(&o) if o == me => Some(false),
            Some(_) => None,
            None => {
                held.owner.insert(row.clone(), me);
                Some(true)
            }
        }
    }

    /// Takes `row` for `me`, waiting while another transaction holds it: `Ok(true)` when taken
    /// now, `Ok(false)` when `me` held it already.
    ///
    /// # Errors
    /// [`Deadlock`] when the holder waits, directly or through others, for a row `me` holds.
    pub(crate) fn lock(&self, me: u64, row: &RowId) -> Result<bool, Deadlock> {
        let mut held = self.held.lock();
        loop {
            match held.owner.get(row) {
                Some(&o) if o == me => {
                    held.waits_for.remove(&me);
                    return Ok(false);
                }
                None => {
                    held.waits_for.remove(&me);
                    held.owner.insert(row.clone(), me);
                    return Ok(true);
                }
                Some(_) => {
                    if held.closes_cycle(me, row) {
                        held.waits_for.remove(&me);
                        return Err(Deadlock);
                    }
                    held.waits_for.insert(me, row.clone());
                    self.released.wait(&mut held);
                }
            }
        }
    }

    /// Releases the rows `me` holds among `rows`, and wakes the waiters.
    pub(crate) fn release(&self, me: u64, rows: &[RowId]) {
        if rows.is_empty() {
            return;
        }
        let mut held = self.held.lock();
        for row in rows {
            if held.owner.get(row) == Some(&me) {
                held.owner.remove(row);
            }
        }
        drop(held);
        self.released.notify_all();
    }

    /// Rows locked now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.lock().owner.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn row(k: u8) -> RowId {
        (1, vec![k])
    }

    #[test]
    fn a_second_locker_waits_for_the_release() {
        let locks = Arc::new(RowLocks::default());
        assert_eq!(locks.lock(1, &row(1)), Ok(true));
        assert_eq!(locks.lock(1, &row(1)), Ok(false));
        assert_eq!(locks.try_lock(2, &row(1)), None);
        let waiter = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.lock(2, &row(1)))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "the second locker did not wait");
        locks.release(1, &[row(1)]);
        assert_eq!(waiter.join().unwrap(), Ok(true));
        assert_eq!(locks.try_lock(1, &row(1)), None);
        locks.release(2, &[row(1)]);
        assert_eq!(locks.held(), 0);
    }

    #[test]
    fn the_transaction_that_closes_a_cycle_is_refused() {
        let locks = Arc::new(RowLocks::default());
        locks.lock(1, &row(1)).unwrap();
        locks.lock(2, &row(2)).unwrap();
        locks.lock(3, &row(3)).unwrap();
        // 1 waits for 2, 2 waits for 3: no cycle yet.
        let one = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.lock(1, &row(2)))
        };
        let two = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.lock(2, &row(3)))
        };
        std::thread::sleep(Duration::from_millis(50));
        // 3 waiting for 1 would close 3 -> 1 -> 2 -> 3.
        assert_eq!(locks.lock(3, &row(1)), Err(Deadlock));
        // 3 gives up (rolls back): 2 gets row 3, then releases; 1 gets row 2.
        locks.release(3, &[row(3)]);
        assert_eq!(two.join().unwrap(), Ok(true));
        locks.release(2, &[row(2), row(3)]);
        assert_eq!(one.join().unwrap(), Ok(true));
        locks.release(1, &[row(1), row(2)]);
        assert_eq!(locks.held(), 0);
    }

    #[test]
    fn release_leaves_other_holders_rows() {
        let locks = RowLocks::default();
        locks.lock(1, &row(1)).unwrap();
        locks.lock(2, &row(2)).unwrap();
        locks.release(1, &[row(1), row(2)]);
        assert_eq!(locks.try_lock(3, &row(2)), None);
        assert_eq!(locks.try_lock(3, &row(1)), Some(true));
    }
}
