//! TPC-C's five transactions as SQL, for every system that runs them as statements: PostgreSQL,
//! DuckDB, SQLite and strata through its server. Each system supplies a [`SqlConn`] (how to
//! begin, run a statement with `$n` parameters, commit and roll back, and which errors mean
//! "run it again"); the statements and the retry loop are here, once.
//!
//! Timestamps are parameters (the client's clock), not `LOCALTIMESTAMP`, so every dialect reads
//! the same text; a row is read before it is updated rather than with `UPDATE ... RETURNING`,
//! which strata's SQL does not have (the form TPC-C's kits use as well). Under snapshot
//! isolation the update still fails, or loses at commit, when another transaction wrote the
//! row after the snapshot.

use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};

use strata::Value;

use super::gen::DISTRICTS;
use super::tx::{now_micros, Input, Outcome, Who};

/// A statement's failure: whether the transaction runs again (a lost conflict, a deadlock, a
/// busy database) and what the system said.
#[derive(Debug)]
pub(crate) struct SqlError {
    pub retry: bool,
    pub msg: String,
}

impl SqlError {
    pub fn fatal(msg: impl Into<String>) -> SqlError {
        SqlError { retry: false, msg: msg.into() }
    }
}

/// One connection of a system that runs SQL.
pub(crate) trait SqlConn {
    /// Starts a transaction at the system's snapshot isolation (or stronger).
    fn begin(&mut self) -> Result<(), SqlError>;
    /// Runs `sql`, whose parameters are written `$1`, `$2`, ..., and returns its rows.
    fn rows(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, SqlError>;
    fn commit(&mut self) -> Result<(), SqlError>;
    fn rollback(&mut self) -> Result<(), SqlError>;
}

/// The indexes TPC-C's lookups need beyond the primary keys (customers by last name, a
/// customer's orders), as every SQL system creates them after the load.
pub(crate) const INDEXES: [&str; 2] = [
    "CREATE INDEX customer_last_first ON customer (c_w_id, c_d_id, c_last, c_first)",
    "CREATE INDEX orders_customer ON orders (o_w_id, o_d_id, o_c_id, o_id)",
];

/// A system's client connections, idle between uses, and the history ids its Payments hand
/// out; the SQL systems keep one each.
pub(crate) struct Clients<C> {
    idle: parking_lot::Mutex<Vec<C>>,
    /// Loaded history rows are numbered per warehouse from 1; these start far above.
    next_h_id: AtomicI32,
}

impl<C: SqlConn> Clients<C> {
    /// Clients starting with `idle` connections.
    pub fn new(idle: Vec<C>) -> Clients<C> {
        Clients { idle: parking_lot::Mutex::new(idle), next_h_id: AtomicI32::new(1 << 30) }
    }

    /// Runs `f` on an idle connection (or one `open` makes), then keeps the connection.
    pub fn with<R>(
        &self,
        open: impl FnOnce() -> Result<C, String>,
        f: impl FnOnce(&mut C) -> Result<R, String>,
    ) -> Result<R, String> {
        let idle = self.idle.lock().pop();
        let mut conn = match idle {
            Some(c) => c,
            None => open()?,
        };
        let out = f(&mut conn);
        self.idle.lock().push(conn);
        out
    }

    /// Runs one transaction to its end ([`run`]) on an idle connection.
    pub fn transaction(
        &self,
        system: &str,
        open: impl FnOnce() -> Result<C, String>,
        input: &Input,
    ) -> Result<Outcome, String> {
        self.with(open, |c| run(system, c, input, &self.next_h_id))
    }
}

/// Runs again at most this many times after a lost conflict.
const RETRIES: u32 = 100;

/// Runs one transaction to its end on `conn`, again after each retryable failure; `next_h_id`
/// numbers the history rows Payment writes.
pub(crate) fn run(
    system: &str,
    conn: &mut dyn SqlConn,
    input: &Input,
    next_h_id: &AtomicI32,
) -> Result<Outcome, String> {
    let mut out = Outcome::default();
    loop {
        let ran = conn.begin().and_then(|()| body(conn, input, next_h_id)).and_then(|end| {
            match end {
                End::Commit => conn.commit()?,
                End::Rollback => conn.rollback()?,
            }
            Ok(end)
        });
        match ran {
            Ok(End::Commit) => return Ok(out),
            Ok(End::Rollback) => {
                out.rolled_back = true;
                return Ok(out);
            }
            Err(e) => {
                // A failed statement leaves the transaction open on some systems.
                let _ = conn.rollback();
                if !(e.retry && out.retries < RETRIES) {
                    return Err(format!(
                        "{system}: {} ({} runs lost before): {}",
                        input.kind().name(),
                        out.retries,
                        e.msg
                    ));
                }
                out.retries += 1;
            }
        }
    }
}

/// How a transaction body ended.
enum End {
    Commit,
    Rollback,
}

fn int(v: &Value) -> Result<i32, SqlError> {
    match v {
        Value::SmallInt(x) => Ok(i32::from(*x)),
        Value::Int(x) => Ok(*x),
        Value::BigInt(x) => i32::try_from(*x).map_err(|_| SqlError::fatal(format!("{x} is not an INT"))),
        other => Err(SqlError::fatal(format!("expected an INT, got {other:?}"))),
    }
}

fn double(v: &Value) -> Result<f64, SqlError> {
    match v {
        Value::Double(x) => Ok(*x),
        Value::Int(x) => Ok(f64::from(*x)),
        Value::BigInt(x) => Ok(*x as f64),
        other => Err(SqlError::fatal(format!("expected a DOUBLE, got {other:?}"))),
    }
}

fn text(v: &Value) -> Result<&str, SqlError> {
    match v {
        Value::Text(s) => Ok(s),
        other => Err(SqlError::fatal(format!("expected TEXT, got {other:?}"))),
    }
}

/// Cell `col` of the first of `rows`; `what` names the row in the error.
fn first<'a>(rows: &'a [Vec<Value>], col: usize, what: &str) -> Result<&'a Value, SqlError> {
    rows.first().and_then(|r| r.get(col)).ok_or_else(|| SqlError::fatal(format!("chbench: no {what}")))
}

/// The customer `who` names in district (w, d): by id, or the one in the middle (by first name)
/// of those with the last name (clause 2.5.2.2).
fn customer(conn: &mut dyn SqlConn, w: i32, d: i32, who: &Who) -> Result<i32, SqlError> {
    match who {
        Who::Id(c) => Ok(*c),
        Who::Last(last) => {
            let ids = conn.rows(
                "SELECT c_id FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 ORDER BY c_first",
                &[Value::Int(w), Value::Int(d), Value::Text(last.clone())],
            )?;
            match ids.get(ids.len().saturating_sub(1) / 2) {
                Some(row) => int(first(std::slice::from_ref(row), 0, "c_id")?),
                None => Err(SqlError::fatal(format!("chbench: no customer named {last} in district ({w}, {d})"))),
            }
        }
    }
}

fn body(conn: &mut dyn SqlConn, input: &Input, next_h_id: &AtomicI32) -> Result<End, SqlError> {
    let now = Value::Timestamp(now_micros());
    let i = Value::Int;
    match input {
        Input::NewOrder { w, d, c, lines } => {
            let (w, d, c) = (*w, *d, *c);
            conn.rows("SELECT w_tax FROM warehouse WHERE w_id = $1", &[i(w)])?;
            let next =
                conn.rows("SELECT d_tax, d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2", &[i(w), i(d)])?;
            let o_id = int(first(&next, 1, "district")?)?;
            conn.rows(
                "UPDATE district SET d_next_o_id = $1 WHERE d_w_id = $2 AND d_id = $3",
                &[i(o_id + 1), i(w), i(d)],
            )?;
            conn.rows(
                "SELECT c_discount, c_last, c_credit FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
                &[i(w), i(d), i(c)],
            )?;
            let all_local = i32::from(lines.iter().all(|l| l.1 == w));
            let n = lines.len() as i32;
            conn.rows(
                "INSERT INTO orders VALUES ($1, $2, $3, $4, $5, NULL, $6, $7)",
                &[i(w), i(d), i(o_id), i(c), now, i(n), i(all_local)],
            )?;
            conn.rows("INSERT INTO new_order VALUES ($1, $2, $3)", &[i(w), i(d), i(o_id)])?;
            let stock_sql = format!("SELECT s_quantity, s_dist_{d:02} FROM stock WHERE s_w_id = $1 AND s_i_id = $2");
            for (number, &(item, supply, qty)) in (1..).zip(lines) {
                let found = conn.rows("SELECT i_price, i_name, i_data FROM item WHERE i_id = $1", &[i(item)])?;
                let Some(price) = found.first().and_then(|r| r.first()) else { return Ok(End::Rollback) };
                let price = double(price)?;
                let stock = conn.rows(&stock_sql, &[i(supply), i(item)])?;
                let s_qty = int(first(&stock, 0, "stock")?)?;
                let dist = first(&stock, 1, "stock")?.clone();
                let new_qty = if s_qty >= qty + 10 { s_qty - qty } else { s_qty - qty + 91 };
                let remote = i32::from(supply != w);
                conn.rows(
                    "UPDATE stock SET s_quantity = $1, s_ytd = s_ytd + $2, s_order_cnt = s_order_cnt + 1, \
                     s_remote_cnt = s_remote_cnt + $3 WHERE s_w_id = $4 AND s_i_id = $5",
                    &[i(new_qty), i(qty), i(remote), i(supply), i(item)],
                )?;
                let amount = Value::Double(qty as f64 * price);
                conn.rows(
                    "INSERT INTO order_line VALUES ($1, $2, $3, $4, $5, $6, NULL, $7, $8, $9)",
                    &[i(w), i(d), i(o_id), i(number), i(item), i(supply), i(qty), amount, dist],
                )?;
            }
            Ok(End::Commit)
        }
        Input::Payment { w, d, c_w, c_d, who, amount } => {
            let (w, d, c_w, c_d, amount) = (*w, *d, *c_w, *c_d, *amount);
            conn.rows("UPDATE warehouse SET w_ytd = w_ytd + $1 WHERE w_id = $2", &[Value::Double(amount), i(w)])?;
            let wn = conn.rows("SELECT w_name FROM warehouse WHERE w_id = $1", &[i(w)])?;
            conn.rows(
                "UPDATE district SET d_ytd = d_ytd + $1 WHERE d_w_id = $2 AND d_id = $3",
                &[Value::Double(amount), i(w), i(d)],
            )?;
            let dn = conn.rows("SELECT d_name FROM district WHERE d_w_id = $1 AND d_id = $2", &[i(w), i(d)])?;
            let c = customer(conn, c_w, c_d, who)?;
            let cust = conn.rows(
                "SELECT c_credit, c_data FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
                &[i(c_w), i(c_d), i(c)],
            )?;
            let credit = text(first(&cust, 0, "customer")?)?.to_owned();
            conn.rows(
                "UPDATE customer SET c_balance = c_balance - $1, c_ytd_payment = c_ytd_payment + $1, \
                 c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
                &[Value::Double(amount), i(c_w), i(c_d), i(c)],
            )?;
            if credit == "BC" {
                let old = text(first(&cust, 1, "customer")?)?;
                let mut data = format!("{c} {c_d} {c_w} {d} {w} {amount:.2} | {old}");
                data.truncate(500);
                conn.rows(
                    "UPDATE customer SET c_data = $1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
                    &[Value::Text(data), i(c_w), i(c_d), i(c)],
                )?;
            }
            let h_data = format!("{}    {}", text(first(&wn, 0, "warehouse")?)?, text(first(&dn, 0, "district")?)?);
            let h_id = next_h_id.fetch_add(1, Ordering::Relaxed);
            conn.rows(
                "INSERT INTO history VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[i(h_id), i(c), i(c_d), i(c_w), i(d), i(w), now, Value::Double(amount), Value::Text(h_data)],
            )?;
            Ok(End::Commit)
        }
        Input::OrderStatus { w, d, who } => {
            let (w, d) = (*w, *d);
            let c = customer(conn, w, d, who)?;
            conn.rows(
                "SELECT c_balance, c_first, c_middle, c_last FROM customer WHERE c_w_id = $1 AND c_d_id = $2 \
                 AND c_id = $3",
                &[i(w), i(d), i(c)],
            )?;
            let o = conn.rows(
                "SELECT o_id, o_entry_d, o_carrier_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 \
                 ORDER BY o_id DESC LIMIT 1",
                &[i(w), i(d), i(c)],
            )?;
            if let Some(o_id) = o.first().and_then(|r| r.first()) {
                conn.rows(
                    "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line \
                     WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3",
                    &[i(w), i(d), i(int(o_id)?)],
                )?;
            }
            Ok(End::Commit)
        }
        Input::Delivery { w, carrier } => {
            let w = *w;
            for d in 1..=DISTRICTS {
                let oldest = conn.rows(
                    "SELECT no_o_id FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 ORDER BY no_o_id LIMIT 1",
                    &[i(w), i(d)],
                )?;
                let Some(o_id) = oldest.first().and_then(|r| r.first()) else { continue };
                let o_id = int(o_id)?;
                conn.rows(
                    "DELETE FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = $3",
                    &[i(w), i(d), i(o_id)],
                )?;
                let c = conn.rows(
                    "SELECT o_c_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_id = $3",
                    &[i(w), i(d), i(o_id)],
                )?;
                let c = int(first(&c, 0, "order")?)?;
                conn.rows(
                    "UPDATE orders SET o_carrier_id = $1 WHERE o_w_id = $2 AND o_d_id = $3 AND o_id = $4",
                    &[i(*carrier), i(w), i(d), i(o_id)],
                )?;
                let amounts = conn.rows(
                    "SELECT ol_amount FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3",
                    &[i(w), i(d), i(o_id)],
                )?;
                let mut total = 0.0;
                for r in &amounts {
                    total += double(first(std::slice::from_ref(r), 0, "ol_amount")?)?;
                }
                conn.rows(
                    "UPDATE order_line SET ol_delivery_d = $1 WHERE ol_w_id = $2 AND ol_d_id = $3 AND ol_o_id = $4",
                    &[now.clone(), i(w), i(d), i(o_id)],
                )?;
                conn.rows(
                    "UPDATE customer SET c_balance = c_balance + $1, c_delivery_cnt = c_delivery_cnt + 1 \
                     WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
                    &[Value::Double(total), i(w), i(d), i(c)],
                )?;
            }
            Ok(End::Commit)
        }
        Input::StockLevel { w, d, threshold } => {
            let next =
                conn.rows("SELECT d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2", &[i(*w), i(*d)])?;
            let next = int(first(&next, 0, "district")?)?;
            conn.rows(
                "SELECT count(DISTINCT s_i_id) FROM order_line, stock WHERE ol_w_id = $1 AND ol_d_id = $2 \
                 AND ol_o_id < $3 AND ol_o_id >= $4 AND s_w_id = $1 AND s_i_id = ol_i_id AND s_quantity < $5",
                &[i(*w), i(*d), i(next), i(next - 20), i(*threshold)],
            )?;
            Ok(End::Commit)
        }
    }
}

/// The days-since-1970 date as (year, month, day), proleptic Gregorian.
fn civil(days: i64) -> (i64, u32, u32) {
    // Shifted so years start in March: leap days fall at a year's end.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A TIMESTAMP value as text every system reads (and SQLite keeps, comparing it as text).
pub(crate) fn timestamp_text(micros: i64) -> String {
    let (secs, us) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{us:06}", s / 3600, s / 60 % 60, s % 60)
}

/// A row as a line of tab-separated text, `\N` for NULL: what PostgreSQL's COPY and DuckDB's
/// CSV reader load.
pub(crate) fn tsv_line(row: &[Value], out: &mut Vec<u8>) -> Result<(), String> {
    for (i, v) in row.iter().enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        match v {
            Value::Null => out.extend_from_slice(b"\\N"),
            Value::Int(x) => write!(out, "{x}").map_err(|e| e.to_string())?,
            Value::Double(x) => write!(out, "{x}").map_err(|e| e.to_string())?,
            // Generated text is letters, digits and spaces: nothing a loader would read as special.
            Value::Text(s) => out.extend_from_slice(s.as_bytes()),
            Value::Timestamp(t) => out.extend_from_slice(timestamp_text(*t).as_bytes()),
            other => return Err(format!("chbench: no text form for {other:?}")),
        }
    }
    out.push(b'\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose every statement answers one row holding 3021, and whose commits fail
    /// as told.
    struct Fake {
        /// Commits that fail before one succeeds, and whether they may run again.
        failing_commits: u32,
        retry: bool,
        log: Vec<&'static str>,
    }

    impl SqlConn for Fake {
        fn begin(&mut self) -> Result<(), SqlError> {
            self.log.push("begin");
            Ok(())
        }

        fn rows(&mut self, _sql: &str, _params: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
            self.log.push("statement");
            Ok(vec![vec![Value::Int(3021)]])
        }

        fn commit(&mut self) -> Result<(), SqlError> {
            self.log.push("commit");
            if self.failing_commits > 0 {
                self.failing_commits -= 1;
                return Err(SqlError { retry: self.retry, msg: "lost".into() });
            }
            Ok(())
        }

        fn rollback(&mut self) -> Result<(), SqlError> {
            self.log.push("rollback");
            Ok(())
        }
    }

    #[test]
    fn a_lost_transaction_is_rolled_back_run_again_and_counted_and_others_fail() {
        let input = Input::StockLevel { w: 1, d: 2, threshold: 15 };
        let h = AtomicI32::new(0);
        let mut conn = Fake { failing_commits: 2, retry: true, log: Vec::new() };
        let out = run("fake", &mut conn, &input, &h).unwrap();
        assert_eq!((out.retries, out.rolled_back), (2, false));
        let one = ["begin", "statement", "statement", "commit"];
        let lost: Vec<&str> = one.iter().copied().chain(["rollback"]).collect();
        assert_eq!(conn.log, [&lost[..], &lost[..], &one[..]].concat());

        let mut conn = Fake { failing_commits: 1, retry: false, log: Vec::new() };
        let e = run("fake", &mut conn, &input, &h).unwrap_err();
        assert!(e.contains("fake: stock-level (0 runs lost before): lost"), "{e}");

        // A conflict that never ends stops after RETRIES runs again.
        let mut conn = Fake { failing_commits: u32::MAX, retry: true, log: Vec::new() };
        let e = run("fake", &mut conn, &input, &h).unwrap_err();
        assert!(e.contains(&format!("({RETRIES} runs lost before)")), "{e}");
    }

    #[test]
    fn timestamps_are_written_as_every_system_reads_them() {
        assert_eq!(timestamp_text(0), "1970-01-01 00:00:00.000000");
        assert_eq!(timestamp_text(super::super::gen::LOAD_TIME), "2026-01-01 00:00:00.000000");
        // 2000-02-29 12:34:56.000789 (a leap day of a year divisible by 400).
        assert_eq!(timestamp_text(951_827_696_000_789), "2000-02-29 12:34:56.000789");
        assert_eq!(timestamp_text(-1), "1969-12-31 23:59:59.999999");
    }

    #[test]
    fn rows_are_tab_separated_with_null_marked() {
        let mut out = Vec::new();
        tsv_line(&[Value::Int(3), Value::Null, Value::Double(1.5), Value::Text("a b".into())], &mut out).unwrap();
        assert_eq!(out, b"3\t\\N\t1.5\ta b\n");
        assert!(tsv_line(&[Value::Boolean(true)], &mut Vec::new()).is_err());
    }
}
