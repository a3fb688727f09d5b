//! PostgreSQL 15 as a CH-benCHmark system: a private cluster, the tables with their primary keys
//! and the two indexes TPC-C's lookups need (customers by last name, orders by customer), loaded
//! with COPY; the transactions in SQL under REPEATABLE READ (PostgreSQL's snapshot isolation),
//! run again on a serialization failure or deadlock; the queries as sent.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use parking_lot::Mutex;
use postgres::{Client, IsolationLevel, NoTls, Statement, Transaction};
use strata::Value;

use super::gen::{self, Scale, DISTRICTS};
use super::schema;
use super::tx::{Input, Outcome, Who};
use super::ChSystem;
use crate::peers::postgres::Cluster;

pub(crate) const CONFIG: &str =
    "REPEATABLE READ, synchronous_commit=off, fsync=on, shared_buffers=64MB, indexes on customer names and orders by customer";

fn err(e: postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("postgres: {}", db.message()),
        None => format!("postgres: {e}"),
    }
}

/// Whether `e` is a lost serialization or a deadlock: the transaction runs again.
fn retryable(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    e.code().is_some_and(|c| *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// A connection and the statements prepared on it.
struct Conn {
    client: Client,
    prepared: HashMap<String, Statement>,
}

pub(crate) struct PgSystem {
    url: String,
    idle: Mutex<Vec<Conn>>,
    next_h_id: AtomicI32,
    // Dropped last: the server outlives the connections.
    _cluster: Cluster,
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

/// A TIMESTAMP value as PostgreSQL reads it.
fn timestamp_text(micros: i64) -> String {
    let (secs, us) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{us:06}", s / 3600, s / 60 % 60, s % 60)
}

/// A row in COPY's text format.
fn copy_line(row: &[Value], out: &mut Vec<u8>) -> Result<(), String> {
    for (i, v) in row.iter().enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        match v {
            Value::Null => out.extend_from_slice(b"\\N"),
            Value::Int(x) => write!(out, "{x}").map_err(|e| e.to_string())?,
            Value::Double(x) => write!(out, "{x}").map_err(|e| e.to_string())?,
            // Generated text is letters, digits and spaces: nothing COPY would read as special.
            Value::Text(s) => out.extend_from_slice(s.as_bytes()),
            Value::Timestamp(t) => out.extend_from_slice(timestamp_text(*t).as_bytes()),
            other => return Err(format!("postgres: no COPY text for {other:?}")),
        }
    }
    out.push(b'\n');
    Ok(())
}

impl PgSystem {
    /// Starts a cluster in `dir`, creates the tables and loads the population.
    pub fn open(dir: &Path, warehouses: i32, scale: &Scale, seed: u64) -> Result<PgSystem, String> {
        let cluster = Cluster::start(dir)?;
        let url = format!("host=127.0.0.1 port={} user=postgres", cluster.port);
        let mut client = Client::connect(&url, NoTls).map_err(err)?;
        for t in schema::TABLES {
            client.batch_execute(&t.create_sql()).map_err(err)?;
        }
        client
            .batch_execute(
                "CREATE INDEX customer_by_name ON customer (c_w_id, c_d_id, c_last, c_first); \
                 CREATE INDEX orders_by_customer ON orders (o_w_id, o_d_id, o_c_id, o_id);",
            )
            .map_err(err)?;
        let total = scale.rows(warehouses);
        crate::harness::Progress::around("postgres: load", total, |done| {
            // Each part's rows as COPY text per table, copied in once the part is generated.
            let copy = |client: &mut Client, part: &mut dyn FnMut(&mut gen::Emit<'_>) -> Result<(), String>| {
                let mut rows: HashMap<&'static str, Vec<u8>> = HashMap::new();
                part(&mut |t, row| {
                    done.fetch_add(1, Ordering::Relaxed);
                    copy_line(&row, rows.entry(t.name).or_default())
                })?;
                for (name, text) in rows {
                    let mut w = client.copy_in(&format!("COPY {name} FROM STDIN")).map_err(err)?;
                    w.write_all(&text).map_err(|e| format!("postgres: COPY {name}: {e}"))?;
                    w.finish().map_err(err)?;
                }
                Ok::<(), String>(())
            };
            copy(&mut client, &mut |emit| gen::fixed_tables(seed, scale, emit))?;
            for w in 1..=warehouses {
                copy(&mut client, &mut |emit| gen::warehouse(seed, w, scale, emit))?;
            }
            client.batch_execute("VACUUM ANALYZE").map_err(err)
        })?;
        let next_h_id = AtomicI32::new(1 << 30);
        Ok(PgSystem {
            url,
            idle: Mutex::new(vec![Conn { client, prepared: HashMap::new() }]),
            next_h_id,
            _cluster: cluster,
        })
    }

    fn conn(&self) -> Result<Conn, String> {
        match self.idle.lock().pop() {
            Some(c) => Ok(c),
            None => Ok(Conn { client: Client::connect(&self.url, NoTls).map_err(err)?, prepared: HashMap::new() }),
        }
    }
}

/// A transaction with its connection's prepared statements.
struct Tx<'a> {
    tx: Transaction<'a>,
    prepared: &'a mut HashMap<String, Statement>,
}

impl Tx<'_> {
    fn stmt(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.tx.prepare(sql)?;
        self.prepared.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    fn rows(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, postgres::Error> {
        let s = self.stmt(sql)?;
        self.tx.query(&s, params)
    }

    fn exec(&mut self, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> Result<u64, postgres::Error> {
        let s = self.stmt(sql)?;
        self.tx.execute(&s, params)
    }

    /// The customer `who` names in (w, d): by id, or the middle one by first name of those with
    /// the last name.
    fn customer(&mut self, w: i32, d: i32, who: &Who) -> Result<i32, postgres::Error> {
        match who {
            Who::Id(c) => Ok(*c),
            Who::Last(last) => {
                let ids = self.rows(
                    "SELECT c_id FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 ORDER BY c_first",
                    &[&w, &d, last],
                )?;
                Ok(ids.get(ids.len().saturating_sub(1) / 2).map(|r| r.get(0)).unwrap_or(1))
            }
        }
    }
}

/// How a transaction body ended.
enum End {
    Commit,
    Rollback,
}

impl PgSystem {
    fn body(&self, t: &mut Tx<'_>, input: &Input) -> Result<End, postgres::Error> {
        match input {
            Input::NewOrder { w, d, c, lines } => {
                let (w, d, c) = (*w, *d, *c);
                t.rows("SELECT w_tax FROM warehouse WHERE w_id = $1", &[&w])?;
                let next = t.rows(
                    "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = $1 AND d_id = $2 \
                     RETURNING d_tax, d_next_o_id - 1",
                    &[&w, &d],
                )?;
                let o_id: i32 = next[0].get(1);
                t.rows(
                    "SELECT c_discount, c_last, c_credit FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
                    &[&w, &d, &c],
                )?;
                let all_local = i32::from(lines.iter().all(|l| l.1 == w));
                let n = lines.len() as i32;
                t.exec(
                    "INSERT INTO orders VALUES ($1, $2, $3, $4, LOCALTIMESTAMP, NULL, $5, $6)",
                    &[&w, &d, &o_id, &c, &n, &all_local],
                )?;
                t.exec("INSERT INTO new_order VALUES ($1, $2, $3)", &[&w, &d, &o_id])?;
                let stock_sql =
                    format!("SELECT s_quantity, s_dist_{d:02} FROM stock WHERE s_w_id = $1 AND s_i_id = $2");
                for (number, &(i, supply, qty)) in (1..).zip(lines) {
                    let item = t.rows("SELECT i_price, i_name, i_data FROM item WHERE i_id = $1", &[&i])?;
                    let Some(item) = item.first() else { return Ok(End::Rollback) };
                    let price: f64 = item.get(0);
                    let stock = t.rows(&stock_sql, &[&supply, &i])?;
                    let s_qty: i32 = stock[0].get(0);
                    let dist: String = stock[0].get(1);
                    let new_qty = if s_qty >= qty + 10 { s_qty - qty } else { s_qty - qty + 91 };
                    let remote = i32::from(supply != w);
                    t.exec(
                        "UPDATE stock SET s_quantity = $1, s_ytd = s_ytd + $2, s_order_cnt = s_order_cnt + 1, \
                         s_remote_cnt = s_remote_cnt + $3 WHERE s_w_id = $4 AND s_i_id = $5",
                        &[&new_qty, &qty, &remote, &supply, &i],
                    )?;
                    let amount = qty as f64 * price;
                    t.exec(
                        "INSERT INTO order_line VALUES ($1, $2, $3, $4, $5, $6, NULL, $7, $8, $9)",
                        &[&w, &d, &o_id, &number, &i, &supply, &qty, &amount, &dist],
                    )?;
                }
                Ok(End::Commit)
            }
            Input::Payment { w, d, c_w, c_d, who, amount } => {
                let (w, d, c_w, c_d, amount) = (*w, *d, *c_w, *c_d, *amount);
                let wn =
                    t.rows("UPDATE warehouse SET w_ytd = w_ytd + $1 WHERE w_id = $2 RETURNING w_name", &[&amount, &w])?;
                let dn = t.rows(
                    "UPDATE district SET d_ytd = d_ytd + $1 WHERE d_w_id = $2 AND d_id = $3 RETURNING d_name",
                    &[&amount, &w, &d],
                )?;
                let c = t.customer(c_w, c_d, who)?;
                let cust = t.rows(
                    "SELECT c_credit, c_data FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
                    &[&c_w, &c_d, &c],
                )?;
                let credit: String = cust[0].get(0);
                t.exec(
                    "UPDATE customer SET c_balance = c_balance - $1, c_ytd_payment = c_ytd_payment + $1, \
                     c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
                    &[&amount, &c_w, &c_d, &c],
                )?;
                if credit == "BC" {
                    let old: String = cust[0].get(1);
                    let mut data = format!("{c} {c_d} {c_w} {d} {w} {amount:.2} | {old}");
                    data.truncate(500);
                    t.exec(
                        "UPDATE customer SET c_data = $1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
                        &[&data, &c_w, &c_d, &c],
                    )?;
                }
                let h_data = format!("{}    {}", wn[0].get::<_, String>(0), dn[0].get::<_, String>(0));
                let h_id = self.next_h_id.fetch_add(1, Ordering::Relaxed);
                t.exec(
                    "INSERT INTO history VALUES ($1, $2, $3, $4, $5, $6, LOCALTIMESTAMP, $7, $8)",
                    &[&h_id, &c, &c_d, &c_w, &d, &w, &amount, &h_data],
                )?;
                Ok(End::Commit)
            }
            Input::OrderStatus { w, d, who } => {
                let (w, d) = (*w, *d);
                let c = t.customer(w, d, who)?;
                t.rows("SELECT c_balance, c_first, c_middle, c_last FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3", &[&w, &d, &c])?;
                let o = t.rows(
                    "SELECT o_id, o_entry_d, o_carrier_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 \
                     ORDER BY o_id DESC LIMIT 1",
                    &[&w, &d, &c],
                )?;
                if let Some(o) = o.first() {
                    let o_id: i32 = o.get(0);
                    t.rows(
                        "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line \
                         WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3",
                        &[&w, &d, &o_id],
                    )?;
                }
                Ok(End::Commit)
            }
            Input::Delivery { w, carrier } => {
                let w = *w;
                for d in 1..=DISTRICTS {
                    let first = t.rows(
                        "SELECT no_o_id FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 ORDER BY no_o_id LIMIT 1",
                        &[&w, &d],
                    )?;
                    let Some(first) = first.first() else { continue };
                    let o_id: i32 = first.get(0);
                    t.exec(
                        "DELETE FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = $3",
                        &[&w, &d, &o_id],
                    )?;
                    let c = t.rows(
                        "UPDATE orders SET o_carrier_id = $1 WHERE o_w_id = $2 AND o_d_id = $3 AND o_id = $4 RETURNING o_c_id",
                        &[carrier, &w, &d, &o_id],
                    )?;
                    let c: i32 = c[0].get(0);
                    let total = t.rows(
                        "UPDATE order_line SET ol_delivery_d = LOCALTIMESTAMP WHERE ol_w_id = $1 AND ol_d_id = $2 \
                         AND ol_o_id = $3 RETURNING ol_amount",
                        &[&w, &d, &o_id],
                    )?;
                    let total: f64 = total.iter().map(|r| r.get::<_, f64>(0)).sum();
                    t.exec(
                        "UPDATE customer SET c_balance = c_balance + $1, c_delivery_cnt = c_delivery_cnt + 1 \
                         WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
                        &[&total, &w, &d, &c],
                    )?;
                }
                Ok(End::Commit)
            }
            Input::StockLevel { w, d, threshold } => {
                let next = t.rows("SELECT d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2", &[w, d])?;
                let next: i32 = next[0].get(0);
                let low = next - 20;
                t.rows(
                    "SELECT count(DISTINCT s_i_id) FROM order_line, stock WHERE ol_w_id = $1 AND ol_d_id = $2 \
                     AND ol_o_id < $3 AND ol_o_id >= $4 AND s_w_id = $1 AND s_i_id = ol_i_id AND s_quantity < $5",
                    &[w, d, &next, &low, threshold],
                )?;
                Ok(End::Commit)
            }
        }
    }
}

impl ChSystem for PgSystem {
    fn transaction(&self, input: &Input) -> Result<Outcome, String> {
        let mut conn = self.conn()?;
        let mut out = Outcome::default();
        let result = loop {
            let run = (|| -> Result<End, postgres::Error> {
                let tx = conn.client.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start()?;
                let mut t = Tx { tx, prepared: &mut conn.prepared };
                let end = self.body(&mut t, input)?;
                match end {
                    End::Commit => t.tx.commit()?,
                    End::Rollback => t.tx.rollback()?,
                }
                Ok(end)
            })();
            match run {
                Ok(End::Rollback) => {
                    out.rolled_back = true;
                    break Ok(out);
                }
                Ok(End::Commit) => break Ok(out),
                Err(e) if retryable(&e) && out.retries < 100 => out.retries += 1,
                Err(e) => break Err(format!("{} ({} runs lost before): {}", input.kind().name(), out.retries, err(e))),
            }
        };
        self.idle.lock().push(conn);
        result
    }

    fn query(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        let mut conn = self.conn()?;
        let result = conn.client.simple_query(sql).map_err(err).map(|msgs| {
            msgs.iter()
                .filter_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|i| r.get(i).unwrap_or("").to_owned()).collect())
                    }
                    _ => None,
                })
                .collect()
        });
        self.idle.lock().push(conn);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_written_as_postgres_reads_them() {
        assert_eq!(timestamp_text(0), "1970-01-01 00:00:00.000000");
        assert_eq!(timestamp_text(gen::LOAD_TIME), "2026-01-01 00:00:00.000000");
        // 2000-02-29 12:34:56.000789 (a leap day of a year divisible by 400).
        assert_eq!(timestamp_text(951_827_696_000_789), "2000-02-29 12:34:56.000789");
        assert_eq!(timestamp_text(-1), "1969-12-31 23:59:59.999999");
    }
}
