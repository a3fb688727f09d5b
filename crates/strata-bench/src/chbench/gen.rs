//! The initial population (TPC-C clause 4.3.3, with CH-benCHmark's supplier, nation and region)
//! and the random choices the transactions make (clause 2 and 4.3.2): every row is a function
//! of the seed, so every system loads the same database.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata::Value;

use super::schema::{self, TableSpec};

/// The cardinalities: the specification's, or smaller ones for tests.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scale {
    /// Items (and stock rows per warehouse): 100,000.
    pub items: i32,
    /// Customers per district, and orders per district at load: 3,000.
    pub customers: i32,
}

/// Districts per warehouse.
pub(crate) const DISTRICTS: i32 = 10;

/// Suppliers: stock row (w, i) is supplied by `(w * i) mod SUPPLIERS`.
pub(crate) const SUPPLIERS: i32 = 10_000;

impl Scale {
    pub const SPEC: Scale = Scale { items: 100_000, customers: 3_000 };

    /// Orders at load whose o_id is above this are undelivered (in `new_order`): the last 900 of
    /// 3,000 in the specification.
    pub fn delivered(&self) -> i32 {
        self.customers * 7 / 10
    }

    /// Rows loaded for `warehouses` warehouses (order lines estimated at 10 per order).
    pub fn rows(&self, warehouses: i32) -> u64 {
        let per_w = self.items as u64 + DISTRICTS as u64 * self.customers as u64 * (3 + 10) + DISTRICTS as u64;
        self.items as u64 + SUPPLIERS as u64 + warehouses as u64 * (per_w + 1)
    }
}

/// When the database was loaded: 2026-01-01 00:00:00, in microseconds since 1970.
pub(crate) const LOAD_TIME: i64 = 1_767_225_600_000_000;

/// The constants C of NURand (clause 2.1.6): at load for last names, and for the run (whose
/// last-name constant differs from the load's by 65-119, not 96 or 112, as clause 2.1.6.1 asks).
pub(crate) const C_LAST_LOAD: i32 = 157;
pub(crate) const C_LAST_RUN: i32 = 223;
pub(crate) const C_ID: i32 = 259;
pub(crate) const C_ITEM: i32 = 7_911;

const ALNUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Random text and numbers as clause 4.3.2 describes them.
pub(crate) struct Rand(pub StdRng);

impl Rand {
    pub fn new(seed: u64) -> Self {
        Rand(StdRng::seed_from_u64(seed))
    }

    pub fn int(&mut self, lo: i32, hi: i32) -> i32 {
        self.0.gen_range(lo..=hi)
    }

    /// A number with `scale` decimals between `lo` and `hi` (given in those units).
    pub fn fixed(&mut self, lo: i64, hi: i64, scale: u32) -> f64 {
        self.0.gen_range(lo..=hi) as f64 / 10f64.powi(scale as i32)
    }

    /// Letters and digits, `lo` to `hi` of them.
    pub fn astring(&mut self, lo: usize, hi: usize) -> String {
        let n = self.0.gen_range(lo..=hi);
        (0..n).map(|_| ALNUM[self.0.gen_range(0..ALNUM.len())] as char).collect()
    }

    /// Digits, `lo` to `hi` of them.
    pub fn nstring(&mut self, lo: usize, hi: usize) -> String {
        let n = self.0.gen_range(lo..=hi);
        (0..n).map(|_| (b'0' + self.0.gen_range(0..10u8)) as char).collect()
    }

    /// Text for `i_data` and `s_data`: 10% hold "ORIGINAL" somewhere.
    pub fn data(&mut self) -> String {
        let mut s = self.astring(26, 50);
        if self.0.gen_range(0..10) == 0 {
            let at = self.0.gen_range(0..=s.len() - 8);
            s.replace_range(at..at + 8, "ORIGINAL");
        }
        s
    }

    pub fn zip(&mut self) -> String {
        self.nstring(4, 4) + "11111"
    }

    /// NURand(A, x, y) of clause 2.1.6 with constant `c`.
    pub fn nurand(&mut self, a: i32, x: i32, y: i32, c: i32) -> i32 {
        (((self.int(0, a) | self.int(x, y)) + c) % (y - x + 1)) + x
    }

    /// A customer id for a transaction.
    pub fn customer_id(&mut self, scale: &Scale) -> i32 {
        self.nurand(1023, 1, scale.customers, C_ID)
    }

    /// A last name for a transaction's lookup by name: one some customer has.
    pub fn last_name(&mut self, scale: &Scale) -> String {
        last_name(self.nurand(255, 0, 999, C_LAST_RUN) % scale.customers.min(1000))
    }

    /// An item id for New-Order.
    pub fn item_id(&mut self, scale: &Scale) -> i32 {
        self.nurand(8191, 1, scale.items, C_ITEM)
    }
}

/// The last name numbered `n` (0-999): three syllables (clause 4.3.2.3).
pub(crate) fn last_name(n: i32) -> String {
    const SYLLABLES: [&str; 10] = ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];
    let n = n as usize;
    [n / 100, n / 10 % 10, n % 10].iter().map(|&d| SYLLABLES[d]).collect()
}

/// The five regions.
pub(crate) const REGIONS: [&str; 5] = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"];

/// The 62 nations and their regions. Nation `i` has the key of the `i`-th of `0-9A-Za-z` as an
/// ASCII code: a customer's nation is the code of its state's first character.
pub(crate) const NATIONS: [(&str, i32); 62] = [
    ("ALGERIA", 0),
    ("ARGENTINA", 1),
    ("INDIA", 2),
    ("FRANCE", 3),
    ("EGYPT", 4),
    ("ETHIOPIA", 0),
    ("BRAZIL", 1),
    ("INDONESIA", 2),
    ("GERMANY", 3),
    ("IRAN", 4),
    ("KENYA", 0),
    ("CANADA", 1),
    ("JAPAN", 2),
    ("ROMANIA", 3),
    ("IRAQ", 4),
    ("MOROCCO", 0),
    ("PERU", 1),
    ("CHINA", 2),
    ("RUSSIA", 3),
    ("JORDAN", 4),
    ("MOZAMBIQUE", 0),
    ("UNITED STATES", 1),
    ("VIETNAM", 2),
    ("UNITED KINGDOM", 3),
    ("SAUDI ARABIA", 4),
    ("NIGERIA", 0),
    ("MEXICO", 1),
    ("CAMBODIA", 2),
    ("SPAIN", 3),
    ("OMAN", 4),
    ("GHANA", 0),
    ("CHILE", 1),
    ("THAILAND", 2),
    ("ITALY", 3),
    ("QATAR", 4),
    ("SENEGAL", 0),
    ("COLOMBIA", 1),
    ("MALAYSIA", 2),
    ("POLAND", 3),
    ("KUWAIT", 4),
    ("TUNISIA", 0),
    ("CUBA", 1),
    ("PHILIPPINES", 2),
    ("AUSTRIA", 3),
    ("LEBANON", 4),
    ("ANGOLA", 0),
    ("URUGUAY", 1),
    ("NEPAL", 2),
    ("NORWAY", 3),
    ("SYRIA", 4),
    ("ZAMBIA", 0),
    ("BOLIVIA", 1),
    ("MONGOLIA", 2),
    ("SWEDEN", 3),
    ("YEMEN", 4),
    ("UGANDA", 0),
    ("ECUADOR", 1),
    ("KOREA", 2),
    ("PORTUGAL", 3),
    ("BAHRAIN", 4),
    ("LAOS", 2),
    ("GREECE", 3),
];

/// Nation `i`'s key.
pub(crate) fn nation_key(i: usize) -> i32 {
    i32::from(ALNUM[i])
}

fn int(v: i32) -> Value {
    Value::Int(v)
}

fn text(s: impl Into<String>) -> Value {
    Value::Text(s.into())
}

/// Where generated rows go: a table and a row in its column order.
pub(crate) type Emit<'a> = dyn FnMut(&'static TableSpec, Vec<Value>) -> Result<(), String> + 'a;

/// The tables not tied to a warehouse: item, supplier, nation and region.
pub(crate) fn fixed_tables(seed: u64, scale: &Scale, emit: &mut Emit<'_>) -> Result<(), String> {
    let mut r = Rand::new(seed ^ 0x17E4);
    for i in 1..=scale.items {
        let row = vec![
            int(i),
            int(r.int(1, 10_000)),
            text(r.astring(14, 24)),
            Value::Double(r.fixed(100, 10_000, 2)),
            text(r.data()),
        ];
        emit(&schema::ITEM, row)?;
    }
    for (k, name) in REGIONS.iter().enumerate() {
        emit(&schema::REGION, vec![int(k as i32), text(*name), text(r.astring(31, 115))])?;
    }
    for (i, &(name, region)) in NATIONS.iter().enumerate() {
        emit(&schema::NATION, vec![int(nation_key(i)), text(name), int(region), text(r.astring(31, 114))])?;
    }
    for k in 0..SUPPLIERS {
        // A few suppliers have complaints on record (analytical query 16 leaves them out).
        let mut comment = r.astring(25, 100);
        if r.int(0, 199) == 0 {
            comment.insert_str(r.int(0, 10) as usize, "bad");
        }
        let row = vec![
            int(k),
            text(format!("Supplier#{k:09}")),
            text(r.astring(10, 40)),
            int(nation_key(r.int(0, NATIONS.len() as i32 - 1) as usize)),
            text(r.nstring(15, 15)),
            Value::Double(r.fixed(-99_999, 999_999, 2)),
            text(comment),
        ];
        emit(&schema::SUPPLIER, row)?;
    }
    Ok(())
}

/// Warehouse `w`'s rows: the warehouse, its stock, districts, customers (with their history
/// rows), orders, order lines and new orders, each table's rows in key order.
pub(crate) fn warehouse(seed: u64, w: i32, scale: &Scale, emit: &mut Emit<'_>) -> Result<(), String> {
    let mut r = Rand::new(seed ^ (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let address = |r: &mut Rand| {
        vec![
            text(r.astring(10, 20)),
            text(r.astring(10, 20)),
            text(r.astring(10, 20)),
            text(r.astring(2, 2)),
            text(r.zip()),
        ]
    };
    let mut row = vec![int(w), text(r.astring(6, 10))];
    row.extend(address(&mut r));
    row.extend([Value::Double(r.fixed(0, 2000, 4)), Value::Double(300_000.0)]);
    emit(&schema::WAREHOUSE, row)?;
    for i in 1..=scale.items {
        let mut row = vec![int(w), int(i), int(r.int(10, 100))];
        row.extend((0..10).map(|_| text(r.astring(24, 24))));
        row.extend([int(0), int(0), int(0), text(r.data())]);
        emit(&schema::STOCK, row)?;
    }
    let mut h_id = 0;
    for d in 1..=DISTRICTS {
        let mut row = vec![int(w), int(d), text(r.astring(6, 10))];
        row.extend(address(&mut r));
        row.extend([Value::Double(r.fixed(0, 2000, 4)), Value::Double(30_000.0), int(scale.customers + 1)]);
        emit(&schema::DISTRICT, row)?;
        for c in 1..=scale.customers {
            let last = if c <= 1000 { last_name(c - 1) } else { last_name(r.nurand(255, 0, 999, C_LAST_LOAD)) };
            let mut row = vec![int(w), int(d), int(c), text(r.astring(8, 16)), text("OE"), text(last)];
            row.extend(address(&mut r));
            let credit = if r.int(1, 10) == 1 { "BC" } else { "GC" };
            row.extend([
                text(r.nstring(16, 16)),
                Value::Timestamp(LOAD_TIME),
                text(credit),
                Value::Double(50_000.0),
                Value::Double(r.fixed(0, 5000, 4)),
                Value::Double(-10.0),
                Value::Double(10.0),
                int(1),
                int(0),
                text(r.astring(300, 500)),
            ]);
            emit(&schema::CUSTOMER, row)?;
            h_id += 1;
            let history = vec![
                int(h_id),
                int(c),
                int(d),
                int(w),
                int(d),
                int(w),
                Value::Timestamp(LOAD_TIME),
                Value::Double(10.0),
                text(r.astring(12, 24)),
            ];
            emit(&schema::HISTORY, history)?;
        }
        // Orders: each customer places one, in a random order.
        let mut owners: Vec<i32> = (1..=scale.customers).collect();
        for i in (1..owners.len()).rev() {
            owners.swap(i, r.0.gen_range(0..=i));
        }
        for o in 1..=scale.customers {
            let delivered = o <= scale.delivered();
            let lines = r.int(5, 15);
            let carrier = if delivered { int(r.int(1, 10)) } else { Value::Null };
            let entry = Value::Timestamp(LOAD_TIME);
            emit(
                &schema::ORDERS,
                vec![int(w), int(d), int(o), int(owners[o as usize - 1]), entry, carrier, int(lines), int(1)],
            )?;
            for n in 1..=lines {
                let (when, amount) =
                    if delivered { (Value::Timestamp(LOAD_TIME), 0.0) } else { (Value::Null, r.fixed(1, 999_999, 2)) };
                let row = vec![
                    int(w),
                    int(d),
                    int(o),
                    int(n),
                    int(r.int(1, scale.items)),
                    int(w),
                    when,
                    int(5),
                    Value::Double(amount),
                    text(r.astring(24, 24)),
                ];
                emit(&schema::ORDER_LINE, row)?;
            }
            if !delivered {
                emit(&schema::NEW_ORDER, vec![int(w), int(d), int(o)])?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_names_are_three_syllables_by_digit() {
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(999), "EINGEINGEING");
    }

    #[test]
    fn nations_have_distinct_keys_and_names_and_every_region() {
        let keys: std::collections::BTreeSet<i32> = (0..NATIONS.len()).map(nation_key).collect();
        assert_eq!(keys.len(), 62);
        let names: std::collections::BTreeSet<&str> = NATIONS.iter().map(|n| n.0).collect();
        assert_eq!(names.len(), 62);
        for region in 0..REGIONS.len() as i32 {
            assert!(NATIONS.iter().filter(|n| n.1 == region).count() >= 10, "region {region}");
        }
    }

    #[test]
    fn a_warehouse_has_the_specified_rows_and_is_the_same_for_a_seed() {
        let scale = Scale { items: 200, customers: 30 };
        let count = |seed: u64| {
            let mut rows: std::collections::BTreeMap<&str, Vec<Vec<Value>>> = Default::default();
            warehouse(seed, 2, &scale, &mut |t, row| {
                assert_eq!(row.len(), t.columns.len(), "{}", t.name);
                rows.entry(t.name).or_default().push(row);
                Ok(())
            })
            .unwrap();
            rows
        };
        let rows = count(7);
        assert_eq!(rows["warehouse"].len(), 1);
        assert_eq!(rows["stock"].len(), 200);
        assert_eq!(rows["district"].len(), 10);
        assert_eq!(rows["customer"].len(), 300);
        assert_eq!(rows["history"].len(), 300);
        assert_eq!(rows["orders"].len(), 300);
        assert_eq!(rows["new_order"].len(), 10 * (30 - scale.delivered()) as usize);
        let lines: i64 = rows["orders"].iter().map(|o| if let Value::Int(n) = o[6] { n as i64 } else { 0 }).sum();
        assert_eq!(rows["order_line"].len() as i64, lines);
        assert_eq!(count(7), rows, "the same seed makes the same rows");
        assert_ne!(count(8)["customer"], rows["customer"]);
    }
}
