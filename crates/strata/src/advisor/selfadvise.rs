//! Self-advising (LASER §7.3, [`Options::self_advise`](crate::Options::self_advise)): what each
//! round decides, as pure functions of what the round saw, and the memory kept between rounds.
//! The database runs a round per period: it takes each row-group table's workload since the
//! last round (decayed with the earlier ones), measures the table's prices when
//! [`recalibrate`] says so, asks the advisor, and changes the layout when [`apply`] says so.

use std::collections::HashMap;

use super::model::Calibration;
use crate::catalog::workload::{Mark, Workload};

/// Windows of fewer operations than this are not re-advised on.
pub(crate) const MIN_OPS: u64 = 100;

/// A layout changes only when the advised one is predicted to cost at most this fraction of
/// the current one.
pub(crate) const GAIN: f64 = 0.8;

/// Each round's window keeps the windows before it at this weight (the workload of a round ago
/// counts three quarters, of two rounds ago about a half), so a workload that comes in phases
/// shorter than a few rounds is advised on as a whole.
pub(crate) const DECAY: f64 = 0.75;

/// A table's prices are measured again once it holds this many times the entries it held at
/// the last measurement (a measurement reads the whole table four times over: at two million
/// rows a few seconds of CPU).
pub(crate) const RECALIBRATE_GROWTH: u64 = 2;

/// What self-advising remembers of one table between rounds.
#[derive(Default)]
pub(crate) struct Seen {
    /// The workload counters at the last round.
    pub mark: Option<Mark>,
    /// The decayed window then.
    pub window: Option<Workload>,
    /// The layout advised then (a change waits until two rounds in a row advise it).
    pub advised: Option<String>,
    /// The prices measured on the table, with the entries below Level-0 it held then.
    pub prices: Option<(Calibration, u64)>,
}

/// What self-advising remembers between rounds, by table id.
#[derive(Default)]
pub(crate) struct Rounds {
    pub tables: HashMap<u32, Seen>,
}

/// Whether a round advises on a window of `fresh_ops` operations.
pub(crate) fn worth_advising(fresh_ops: u64) -> bool {
    fresh_ops >= MIN_OPS
}

/// Whether to measure a table's prices now: it holds `below` entries below Level-0, and its
/// prices were last measured at `measured_at` entries (`None`: never).
pub(crate) fn recalibrate(below: u64, measured_at: Option<u64>) -> bool {
    below > 0 && measured_at.is_none_or(|at| below >= at.saturating_mul(RECALIBRATE_GROWTH))
}

/// What one round's advice on a table was.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Advised<'a> {
    /// The layout now, and its predicted cost of the window.
    pub current: (&'a str, f64),
    /// The advised layout, and its predicted cost.
    pub advised: (&'a str, f64),
    /// The layout the round before advised.
    pub before: Option<&'a str>,
}

/// Whether to change the layout to the advised one: it differs, it pays (at most [`GAIN`] of
/// the current cost), and the round before advised it too.
pub(crate) fn apply(a: &Advised<'_>) -> bool {
    let (current, current_cost) = a.current;
    let (advised, advised_cost) = a.advised;
    advised != current && advised_cost <= GAIN * current_cost && a.before == Some(advised)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advised<'a>(current: (&'a str, f64), advised: (&'a str, f64), before: Option<&'a str>) -> Advised<'a> {
        Advised { current, advised, before }
    }

    #[test]
    fn a_window_of_few_operations_is_not_advised_on() {
        assert!(!worth_advising(0));
        assert!(!worth_advising(MIN_OPS - 1));
        assert!(worth_advising(MIN_OPS));
    }

    #[test]
    fn prices_are_measured_once_data_is_below_level0_and_again_when_it_doubled() {
        assert!(!recalibrate(0, None), "nothing below Level-0 to measure");
        assert!(recalibrate(1, None));
        assert!(!recalibrate(1_999, Some(1_000)));
        assert!(recalibrate(2_000, Some(1_000)));
        assert!(!recalibrate(u64::MAX - 1, Some(u64::MAX)), "no overflow");
    }

    #[test]
    fn a_layout_changes_when_two_rounds_in_a_row_advise_one_that_pays() {
        let a = advised(("rows", 100.0), ("cols", 80.0), Some("cols"));
        assert!(apply(&a));
        // Twice in a row, not once.
        assert!(!apply(&advised(("rows", 100.0), ("cols", 80.0), None)));
        assert!(!apply(&advised(("rows", 100.0), ("cols", 80.0), Some("other"))));
        // It must pay: at most 0.8 of the current cost.
        assert!(!apply(&advised(("rows", 100.0), ("cols", 80.1), Some("cols"))));
        // Advising what is there changes nothing.
        assert!(!apply(&advised(("rows", 100.0), ("rows", 10.0), Some("rows"))));
    }
}
