//! TPC-C's five transactions (clauses 2.4-2.8): their inputs, drawn as the specification says,
//! and strata's implementation of them through its transaction API (snapshot isolation; a
//! transaction that loses a conflict runs again, and the runs again are counted).

use std::ops::Bound;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use strata::{Db, Error, KeyRange, Projection, Table, Transaction, TxnOptions, Value, WriteOptions};

use super::gen::{Rand, Scale, DISTRICTS};
use super::schema::{self, TableSpec};

/// The five transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    NewOrder,
    Payment,
    OrderStatus,
    Delivery,
    StockLevel,
}

pub(crate) const KINDS: [Kind; 5] =
    [Kind::NewOrder, Kind::Payment, Kind::OrderStatus, Kind::Delivery, Kind::StockLevel];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::NewOrder => "new-order",
            Kind::Payment => "payment",
            Kind::OrderStatus => "order-status",
            Kind::Delivery => "delivery",
            Kind::StockLevel => "stock-level",
        }
    }

    /// The mix of clause 5.2.3 at its minimums, New-Order taking the rest: 45/43/4/4/4.
    pub fn draw(r: &mut Rand) -> Kind {
        match r.int(1, 100) {
            1..=45 => Kind::NewOrder,
            46..=88 => Kind::Payment,
            89..=92 => Kind::OrderStatus,
            93..=96 => Kind::Delivery,
            _ => Kind::StockLevel,
        }
    }
}

/// A customer chosen by id or by last name (clause 2.5.1.2).
#[derive(Clone, Debug)]
pub(crate) enum Who {
    Id(i32),
    Last(String),
}

impl Who {
    fn draw(r: &mut Rand, scale: &Scale) -> Who {
        if r.int(1, 100) <= 60 {
            Who::Last(r.last_name(scale))
        } else {
            Who::Id(r.customer_id(scale))
        }
    }
}

/// One transaction's inputs.
#[derive(Clone, Debug)]
pub(crate) enum Input {
    /// Lines are (item, supplying warehouse, quantity); an item id past the last is the 1% of
    /// New-Orders that roll back.
    NewOrder {
        w: i32,
        d: i32,
        c: i32,
        lines: Vec<(i32, i32, i32)>,
    },
    Payment {
        w: i32,
        d: i32,
        c_w: i32,
        c_d: i32,
        who: Who,
        amount: f64,
    },
    OrderStatus {
        w: i32,
        d: i32,
        who: Who,
    },
    Delivery {
        w: i32,
        carrier: i32,
    },
    StockLevel {
        w: i32,
        d: i32,
        threshold: i32,
    },
}

impl Input {
    /// Inputs of a `kind` transaction from a terminal of warehouse `w` of `warehouses`.
    pub fn draw(kind: Kind, r: &mut Rand, scale: &Scale, w: i32, warehouses: i32) -> Input {
        let other = |r: &mut Rand| if warehouses == 1 { w } else { (w + r.int(0, warehouses - 2)) % warehouses + 1 };
        let d = r.int(1, DISTRICTS);
        match kind {
            Kind::NewOrder => {
                let n = r.int(5, 15);
                let rollback = r.int(1, 100) == 1;
                let lines = (0..n)
                    .map(|i| {
                        let item = if rollback && i == n - 1 { scale.items + 1 } else { r.item_id(scale) };
                        let supply = if r.int(1, 100) == 1 { other(r) } else { w };
                        (item, supply, r.int(1, 10))
                    })
                    .collect();
                Input::NewOrder { w, d, c: r.customer_id(scale), lines }
            }
            Kind::Payment => {
                let (c_w, c_d) = if r.int(1, 100) <= 85 { (w, d) } else { (other(r), r.int(1, DISTRICTS)) };
                Input::Payment { w, d, c_w, c_d, who: Who::draw(r, scale), amount: r.fixed(100, 500_000, 2) }
            }
            Kind::OrderStatus => Input::OrderStatus { w, d, who: Who::draw(r, scale) },
            Kind::Delivery => Input::Delivery { w, carrier: r.int(1, 10) },
            Kind::StockLevel => Input::StockLevel { w, d, threshold: r.int(10, 20) },
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Input::NewOrder { .. } => Kind::NewOrder,
            Input::Payment { .. } => Kind::Payment,
            Input::OrderStatus { .. } => Kind::OrderStatus,
            Input::Delivery { .. } => Kind::Delivery,
            Input::StockLevel { .. } => Kind::StockLevel,
        }
    }
}

/// How a transaction ended.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Outcome {
    /// Rolled back as the specification asks (a New-Order with an unused item).
    pub rolled_back: bool,
    /// Runs lost to conflicts before the one that committed.
    pub retries: u32,
}

/// The time a transaction stamps rows with: microseconds since 1970.
pub(crate) fn now_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// strata's tables and the projections its transactions read.
pub(crate) struct StrataTpcc {
    db: Arc<Db>,
    warehouse: Table,
    district: Table,
    customer: Table,
    history: Table,
    new_order: Table,
    orders: Table,
    order_line: Table,
    item: Table,
    stock: Table,
    by_name: Table,
    by_customer: Table,
    /// History keys this process hands out: above every loaded one.
    next_h_id: AtomicI32,
}

/// Runs again at most this many times after a lost conflict.
const RETRIES: u32 = 100;

fn int(v: &Value) -> Result<i32, String> {
    match v {
        Value::Int(x) => Ok(*x),
        other => Err(format!("chbench: expected an INT, got {other:?}")),
    }
}

fn double(v: &Value) -> Result<f64, String> {
    match v {
        Value::Double(x) => Ok(*x),
        other => Err(format!("chbench: expected a DOUBLE, got {other:?}")),
    }
}

fn text(v: &Value) -> Result<&str, String> {
    match v {
        Value::Text(s) => Ok(s),
        other => Err(format!("chbench: expected TEXT, got {other:?}")),
    }
}

/// Whole rows.
const ALL: Projection = Projection::All;

/// A failure inside a transaction: strata's error (a lost conflict is retried) or the
/// harness's.
enum Failed {
    Strata(Error),
    Other(String),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Self {
        Failed::Strata(e)
    }
}

impl From<String> for Failed {
    fn from(e: String) -> Self {
        Failed::Other(e)
    }
}

type TxResult<T> = Result<T, Failed>;

/// What a transaction body returns: whether it asked for a rollback.
enum End {
    Commit,
    Rollback,
}

impl StrataTpcc {
    pub fn open(db: Arc<Db>, warehouses: i32) -> Result<StrataTpcc, String> {
        let t = |s: &TableSpec| db.table(s.name).map_err(|e| format!("strata: {e}"));
        StrataTpcc {
            warehouse: t(&schema::WAREHOUSE)?,
            district: t(&schema::DISTRICT)?,
            customer: t(&schema::CUSTOMER)?,
            history: t(&schema::HISTORY)?,
            new_order: t(&schema::NEW_ORDER)?,
            orders: t(&schema::ORDERS)?,
            order_line: t(&schema::ORDER_LINE)?,
            item: t(&schema::ITEM)?,
            stock: t(&schema::STOCK)?,
            by_name: t(&schema::CUSTOMER_BY_NAME)?,
            by_customer: t(&schema::ORDERS_BY_CUSTOMER)?,
            // Loaded history rows are numbered per warehouse from 1; these start far above.
            next_h_id: AtomicI32::new(1 << 30),
            db: db.clone(),
        }
        .checked(warehouses)
    }

    fn checked(self, warehouses: i32) -> Result<Self, String> {
        let got = self.warehouse.scan(&KeyRange::all(), &ALL, &Default::default()).map_err(|e| e.to_string())?.count();
        if got != warehouses as usize {
            return Err(format!("chbench: the database holds {got} warehouses, not {warehouses}"));
        }
        Ok(self)
    }

    /// Runs one transaction to its end.
    pub fn run(&self, input: &Input) -> Result<Outcome, String> {
        let mut out = Outcome::default();
        loop {
            let mut tx = self.db.begin(&TxnOptions::default()).map_err(|e| format!("strata: {e}"))?;
            let body = match input {
                Input::NewOrder { w, d, c, lines } => self.new_order(&mut tx, *w, *d, *c, lines),
                Input::Payment { w, d, c_w, c_d, who, amount } => {
                    self.payment(&mut tx, *w, *d, *c_w, *c_d, who, *amount)
                }
                Input::OrderStatus { w, d, who } => self.order_status(&tx, *w, *d, who),
                Input::Delivery { w, carrier } => self.delivery(&mut tx, *w, *carrier),
                Input::StockLevel { w, d, threshold } => self.stock_level(&tx, *w, *d, *threshold),
            };
            let ended = match body {
                Ok(End::Rollback) => {
                    tx.rollback();
                    out.rolled_back = true;
                    return Ok(out);
                }
                Ok(End::Commit) => tx.commit(&WriteOptions::default()),
                Err(Failed::Strata(e)) => Err(e),
                Err(Failed::Other(e)) => return Err(e),
            };
            match ended {
                Ok(()) => return Ok(out),
                Err(e) if e.is_retryable() && out.retries < RETRIES => out.retries += 1,
                Err(e) => {
                    return Err(format!("strata: {} ({} runs lost before): {e}", input.kind().name(), out.retries))
                }
            }
        }
    }

    fn get(&self, tx: &Transaction, t: &Table, key: &[Value]) -> TxResult<Vec<Value>> {
        tx.get(t, key, &ALL)?.ok_or_else(|| Failed::Other(format!("chbench: {} has no row {key:?}", t.name())))
    }

    /// The customer `who` names in district (w, d): by id, or the one in the middle of those
    /// with the last name, by first name (clause 2.5.2.2). Returns the customer's id.
    fn customer_id(&self, tx: &Transaction, w: i32, d: i32, who: &Who) -> TxResult<i32> {
        match who {
            Who::Id(c) => Ok(*c),
            Who::Last(last) => {
                let prefix = vec![Value::Int(w), Value::Int(d), Value::Text(last.clone())];
                let range = KeyRange { start: Bound::Included(prefix.clone()), end: Bound::Included(prefix) };
                let ids =
                    tx.scan(&self.by_name, &range, &ALL)?
                        .map(|r| r.map(|row| row[4].clone()))
                        .collect::<Result<Vec<_>, _>>()?;
                if ids.is_empty() {
                    return Err(Failed::Other(format!("chbench: no customer named {last} in district ({w}, {d})")));
                }
                Ok(int(&ids[(ids.len() - 1) / 2])?)
            }
        }
    }

    fn new_order(&self, tx: &mut Transaction, w: i32, d: i32, c: i32, lines: &[(i32, i32, i32)]) -> TxResult<End> {
        let (wk, dk) = (Value::Int(w), Value::Int(d));
        let wh = self.get(tx, &self.warehouse, std::slice::from_ref(&wk))?;
        let w_tax = double(&wh[schema::WAREHOUSE.col("w_tax")])?;
        let district = self.get(tx, &self.district, &[wk.clone(), dk.clone()])?;
        let d_tax = double(&district[schema::DISTRICT.col("d_tax")])?;
        let o_id = int(&district[schema::DISTRICT.col("d_next_o_id")])?;
        tx.update(&self.district, &[wk.clone(), dk.clone()], &[("d_next_o_id", Value::Int(o_id + 1))])?;
        let cust = self.get(tx, &self.customer, &[wk.clone(), dk.clone(), Value::Int(c)])?;
        let discount = double(&cust[schema::CUSTOMER.col("c_discount")])?;
        let all_local = lines.iter().all(|l| l.1 == w);
        let now = Value::Timestamp(now_micros());
        let order = [
            wk.clone(),
            dk.clone(),
            Value::Int(o_id),
            Value::Int(c),
            now,
            Value::Null,
            Value::Int(lines.len() as i32),
            Value::Int(i32::from(all_local)),
        ];
        tx.insert(&self.orders, &order)?;
        tx.insert(&self.new_order, &[wk.clone(), dk.clone(), Value::Int(o_id)])?;
        tx.insert(&self.by_customer, &[wk.clone(), dk.clone(), Value::Int(c), Value::Int(o_id)])?;
        let mut total = 0.0;
        let dist_col = schema::STOCK.col("s_dist_01") + d as usize - 1;
        for (n, &(i, supply, qty)) in lines.iter().enumerate() {
            let Some(item) = tx.get(&self.item, &[Value::Int(i)], &ALL)? else {
                // An unused item: the transaction rolls back (clause 2.4.2.3).
                return Ok(End::Rollback);
            };
            let price = double(&item[schema::ITEM.col("i_price")])?;
            let sk = [Value::Int(supply), Value::Int(i)];
            let stock = self.get(tx, &self.stock, &sk)?;
            let s_qty = int(&stock[schema::STOCK.col("s_quantity")])?;
            let new_qty = if s_qty >= qty + 10 { s_qty - qty } else { s_qty - qty + 91 };
            let ytd = int(&stock[schema::STOCK.col("s_ytd")])? + qty;
            let cnt = int(&stock[schema::STOCK.col("s_order_cnt")])? + 1;
            let remote = int(&stock[schema::STOCK.col("s_remote_cnt")])? + i32::from(supply != w);
            tx.update(
                &self.stock,
                &sk,
                &[
                    ("s_quantity", Value::Int(new_qty)),
                    ("s_ytd", Value::Int(ytd)),
                    ("s_order_cnt", Value::Int(cnt)),
                    ("s_remote_cnt", Value::Int(remote)),
                ],
            )?;
            let amount = qty as f64 * price;
            total += amount;
            let line = [
                wk.clone(),
                dk.clone(),
                Value::Int(o_id),
                Value::Int(n as i32 + 1),
                Value::Int(i),
                Value::Int(supply),
                Value::Null,
                Value::Int(qty),
                Value::Double(amount),
                Value::Text(text(&stock[dist_col])?.to_owned()),
            ];
            tx.insert(&self.order_line, &line)?;
        }
        // The total the terminal shows; computed as the specification says, shown to no one.
        let _shown = total * (1.0 - discount) * (1.0 + w_tax + d_tax);
        Ok(End::Commit)
    }

    #[allow(clippy::too_many_arguments)]
    fn payment(
        &self,
        tx: &mut Transaction,
        w: i32,
        d: i32,
        c_w: i32,
        c_d: i32,
        who: &Who,
        amount: f64,
    ) -> TxResult<End> {
        let (wk, dk) = (Value::Int(w), Value::Int(d));
        let wh = self.get(tx, &self.warehouse, std::slice::from_ref(&wk))?;
        let w_ytd = double(&wh[schema::WAREHOUSE.col("w_ytd")])? + amount;
        tx.update(&self.warehouse, std::slice::from_ref(&wk), &[("w_ytd", Value::Double(w_ytd))])?;
        let district = self.get(tx, &self.district, &[wk.clone(), dk.clone()])?;
        let d_ytd = double(&district[schema::DISTRICT.col("d_ytd")])? + amount;
        tx.update(&self.district, &[wk.clone(), dk.clone()], &[("d_ytd", Value::Double(d_ytd))])?;
        let c = self.customer_id(tx, c_w, c_d, who)?;
        let ck = [Value::Int(c_w), Value::Int(c_d), Value::Int(c)];
        let cust = self.get(tx, &self.customer, &ck)?;
        let col = |name: &str| &cust[schema::CUSTOMER.col(name)];
        let mut set = vec![
            ("c_balance", Value::Double(double(col("c_balance"))? - amount)),
            ("c_ytd_payment", Value::Double(double(col("c_ytd_payment"))? + amount)),
            ("c_payment_cnt", Value::Int(int(col("c_payment_cnt"))? + 1)),
        ];
        if text(col("c_credit"))? == "BC" {
            let mut data = format!("{c} {c_d} {c_w} {d} {w} {amount:.2} | {}", text(col("c_data"))?);
            data.truncate(500);
            set.push(("c_data", Value::Text(data)));
        }
        tx.update(&self.customer, &ck, &set)?;
        let w_name = text(&wh[schema::WAREHOUSE.col("w_name")])?;
        let d_name = text(&district[schema::DISTRICT.col("d_name")])?;
        let h = [
            Value::Int(self.next_h_id.fetch_add(1, Ordering::Relaxed)),
            Value::Int(c),
            Value::Int(c_d),
            Value::Int(c_w),
            dk,
            wk,
            Value::Timestamp(now_micros()),
            Value::Double(amount),
            Value::Text(format!("{w_name}    {d_name}")),
        ];
        tx.insert(&self.history, &h)?;
        Ok(End::Commit)
    }

    fn order_status(&self, tx: &Transaction, w: i32, d: i32, who: &Who) -> TxResult<End> {
        let c = self.customer_id(tx, w, d, who)?;
        let (wk, dk) = (Value::Int(w), Value::Int(d));
        self.get(tx, &self.customer, &[wk.clone(), dk.clone(), Value::Int(c)])?;
        let prefix = vec![wk.clone(), dk.clone(), Value::Int(c)];
        let range = KeyRange { start: Bound::Included(prefix.clone()), end: Bound::Included(prefix) };
        let mut last = None;
        for row in tx.scan(&self.by_customer, &range, &ALL)? {
            last = Some(int(&row?[3])?);
        }
        let Some(o_id) = last else {
            return Err(Failed::Other(format!("chbench: customer ({w}, {d}, {c}) has no order")));
        };
        self.get(tx, &self.orders, &[wk.clone(), dk.clone(), Value::Int(o_id)])?;
        let order = vec![wk, dk, Value::Int(o_id)];
        let lines = KeyRange { start: Bound::Included(order.clone()), end: Bound::Included(order) };
        let n = tx.scan(&self.order_line, &lines, &ALL)?.collect::<Result<Vec<_>, _>>()?.len();
        if n == 0 {
            return Err(Failed::Other(format!("chbench: order ({w}, {d}, {o_id}) has no lines")));
        }
        Ok(End::Commit)
    }

    fn delivery(&self, tx: &mut Transaction, w: i32, carrier: i32) -> TxResult<End> {
        let wk = Value::Int(w);
        let now = Value::Timestamp(now_micros());
        for d in 1..=DISTRICTS {
            let dk = Value::Int(d);
            let prefix = vec![wk.clone(), dk.clone()];
            let range = KeyRange { start: Bound::Included(prefix.clone()), end: Bound::Included(prefix) };
            // The oldest undelivered order; a district with none is skipped (clause 2.7.4.2).
            let Some(first) = tx.scan(&self.new_order, &range, &ALL)?.next() else { continue };
            let o_id = int(&first?[2])?;
            let ok = [wk.clone(), dk.clone(), Value::Int(o_id)];
            tx.delete(&self.new_order, &ok)?;
            let order = self.get(tx, &self.orders, &ok)?;
            let c = int(&order[schema::ORDERS.col("o_c_id")])?;
            tx.update(&self.orders, &ok, &[("o_carrier_id", Value::Int(carrier))])?;
            let lines = KeyRange { start: Bound::Included(ok.to_vec()), end: Bound::Included(ok.to_vec()) };
            let rows = tx.scan(&self.order_line, &lines, &ALL)?.collect::<Result<Vec<_>, _>>()?;
            let mut total = 0.0;
            for line in &rows {
                total += double(&line[schema::ORDER_LINE.col("ol_amount")])?;
                let key = &line[..4];
                tx.update(&self.order_line, key, &[("ol_delivery_d", now.clone())])?;
            }
            let ck = [wk.clone(), dk.clone(), Value::Int(c)];
            let cust = self.get(tx, &self.customer, &ck)?;
            let balance = double(&cust[schema::CUSTOMER.col("c_balance")])? + total;
            let deliveries = int(&cust[schema::CUSTOMER.col("c_delivery_cnt")])? + 1;
            tx.update(
                &self.customer,
                &ck,
                &[("c_balance", Value::Double(balance)), ("c_delivery_cnt", Value::Int(deliveries))],
            )?;
        }
        Ok(End::Commit)
    }

    fn stock_level(&self, tx: &Transaction, w: i32, d: i32, threshold: i32) -> TxResult<End> {
        let (wk, dk) = (Value::Int(w), Value::Int(d));
        let district = self.get(tx, &self.district, &[wk.clone(), dk.clone()])?;
        let next = int(&district[schema::DISTRICT.col("d_next_o_id")])?;
        let range = KeyRange::half_open(
            vec![wk.clone(), dk.clone(), Value::Int(next - 20)],
            vec![wk.clone(), dk, Value::Int(next)],
        );
        let mut items = std::collections::BTreeSet::new();
        for line in tx.scan(&self.order_line, &range, &ALL)? {
            items.insert(int(&line?[schema::ORDER_LINE.col("ol_i_id")])?);
        }
        let mut low = 0;
        for i in items {
            let stock = self.get(tx, &self.stock, &[wk.clone(), Value::Int(i)])?;
            low += i32::from(int(&stock[schema::STOCK.col("s_quantity")])? < threshold);
        }
        let _shown = low;
        Ok(End::Commit)
    }
}
