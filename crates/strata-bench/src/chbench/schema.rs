//! CH-benCHmark's twelve tables: TPC-C's nine (clause 1.3) and the supplier, nation and region
//! tables the analytical queries join them with, described once for every system. Money is
//! DOUBLE (strata has no DECIMAL), dates are TIMESTAMP, identifiers INT.
//!
//! strata also keeps two index tables of its own, which its transactions maintain: customers by
//! last name (Payment and Order-Status choose a customer so 60% of the time) and orders by
//! customer (Order-Status reads a customer's last order). A SQL system gets indexes instead.

use strata::{Column, ColumnType, Schema};

/// A column's type, as every system has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Int,
    Double,
    Text,
    Timestamp,
}

impl Ty {
    fn strata(self) -> ColumnType {
        match self {
            Ty::Int => ColumnType::Int,
            Ty::Double => ColumnType::Double,
            Ty::Text => ColumnType::Text,
            Ty::Timestamp => ColumnType::Timestamp,
        }
    }

    /// The type's name in PostgreSQL (and DuckDB and SQLite).
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite", feature = "duckdb")), allow(dead_code))]
    pub fn sql(self) -> &'static str {
        match self {
            Ty::Int => "INTEGER",
            Ty::Double => "DOUBLE PRECISION",
            Ty::Text => "TEXT",
            Ty::Timestamp => "TIMESTAMP",
        }
    }
}

/// One table: its columns (name, type, whether NULL is allowed) and primary key.
pub(crate) struct TableSpec {
    pub name: &'static str,
    pub columns: &'static [(&'static str, Ty, bool)],
    pub key: &'static [&'static str],
}

impl TableSpec {
    /// The table as strata stores it.
    pub fn strata_schema(&self) -> Result<Schema, String> {
        let columns = self
            .columns
            .iter()
            .map(
                |&(name, ty, nullable)| {
                    if nullable {
                        Column::new(name, ty.strata())
                    } else {
                        Column::not_null(name, ty.strata())
                    }
                },
            )
            .collect();
        Schema::new(columns, self.key).map_err(|e| format!("chbench: table {}: {e}", self.name))
    }

    /// `CREATE TABLE` for a SQL system.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite", feature = "duckdb")), allow(dead_code))]
    pub fn create_sql(&self) -> String {
        let cols: Vec<String> = self
            .columns
            .iter()
            .map(|&(name, ty, nullable)| format!("{name} {}{}", ty.sql(), if nullable { "" } else { " NOT NULL" }))
            .collect();
        format!("CREATE TABLE {} ({}, PRIMARY KEY ({}))", self.name, cols.join(", "), self.key.join(", "))
    }

    /// The position of column `name`.
    pub fn col(&self, name: &str) -> usize {
        self.columns.iter().position(|c| c.0 == name).unwrap_or_else(|| panic!("{} has no column {name}", self.name))
    }
}

use Ty::{Double as D, Int as I, Text as T, Timestamp as Ts};

pub(crate) const WAREHOUSE: TableSpec = TableSpec {
    name: "warehouse",
    columns: &[
        ("w_id", I, false),
        ("w_name", T, false),
        ("w_street_1", T, false),
        ("w_street_2", T, false),
        ("w_city", T, false),
        ("w_state", T, false),
        ("w_zip", T, false),
        ("w_tax", D, false),
        ("w_ytd", D, false),
    ],
    key: &["w_id"],
};

pub(crate) const DISTRICT: TableSpec = TableSpec {
    name: "district",
    columns: &[
        ("d_w_id", I, false),
        ("d_id", I, false),
        ("d_name", T, false),
        ("d_street_1", T, false),
        ("d_street_2", T, false),
        ("d_city", T, false),
        ("d_state", T, false),
        ("d_zip", T, false),
        ("d_tax", D, false),
        ("d_ytd", D, false),
        ("d_next_o_id", I, false),
    ],
    key: &["d_w_id", "d_id"],
};

pub(crate) const CUSTOMER: TableSpec = TableSpec {
    name: "customer",
    columns: &[
        ("c_w_id", I, false),
        ("c_d_id", I, false),
        ("c_id", I, false),
        ("c_first", T, false),
        ("c_middle", T, false),
        ("c_last", T, false),
        ("c_street_1", T, false),
        ("c_street_2", T, false),
        ("c_city", T, false),
        ("c_state", T, false),
        ("c_zip", T, false),
        ("c_phone", T, false),
        ("c_since", Ts, false),
        ("c_credit", T, false),
        ("c_credit_lim", D, false),
        ("c_discount", D, false),
        ("c_balance", D, false),
        ("c_ytd_payment", D, false),
        ("c_payment_cnt", I, false),
        ("c_delivery_cnt", I, false),
        ("c_data", T, false),
    ],
    key: &["c_w_id", "c_d_id", "c_id"],
};

/// TPC-C's history has no primary key; `h_id` is one made up by whoever writes the row.
pub(crate) const HISTORY: TableSpec = TableSpec {
    name: "history",
    columns: &[
        ("h_id", I, false),
        ("h_c_id", I, false),
        ("h_c_d_id", I, false),
        ("h_c_w_id", I, false),
        ("h_d_id", I, false),
        ("h_w_id", I, false),
        ("h_date", Ts, false),
        ("h_amount", D, false),
        ("h_data", T, false),
    ],
    key: &["h_w_id", "h_id"],
};

pub(crate) const NEW_ORDER: TableSpec = TableSpec {
    name: "new_order",
    columns: &[("no_w_id", I, false), ("no_d_id", I, false), ("no_o_id", I, false)],
    key: &["no_w_id", "no_d_id", "no_o_id"],
};

pub(crate) const ORDERS: TableSpec = TableSpec {
    name: "orders",
    columns: &[
        ("o_w_id", I, false),
        ("o_d_id", I, false),
        ("o_id", I, false),
        ("o_c_id", I, false),
        ("o_entry_d", Ts, false),
        ("o_carrier_id", I, true),
        ("o_ol_cnt", I, false),
        ("o_all_local", I, false),
    ],
    key: &["o_w_id", "o_d_id", "o_id"],
};

pub(crate) const ORDER_LINE: TableSpec = TableSpec {
    name: "order_line",
    columns: &[
        ("ol_w_id", I, false),
        ("ol_d_id", I, false),
        ("ol_o_id", I, false),
        ("ol_number", I, false),
        ("ol_i_id", I, false),
        ("ol_supply_w_id", I, false),
        ("ol_delivery_d", Ts, true),
        ("ol_quantity", I, false),
        ("ol_amount", D, false),
        ("ol_dist_info", T, false),
    ],
    key: &["ol_w_id", "ol_d_id", "ol_o_id", "ol_number"],
};

pub(crate) const ITEM: TableSpec = TableSpec {
    name: "item",
    columns: &[
        ("i_id", I, false),
        ("i_im_id", I, false),
        ("i_name", T, false),
        ("i_price", D, false),
        ("i_data", T, false),
    ],
    key: &["i_id"],
};

pub(crate) const STOCK: TableSpec = TableSpec {
    name: "stock",
    columns: &[
        ("s_w_id", I, false),
        ("s_i_id", I, false),
        ("s_quantity", I, false),
        ("s_dist_01", T, false),
        ("s_dist_02", T, false),
        ("s_dist_03", T, false),
        ("s_dist_04", T, false),
        ("s_dist_05", T, false),
        ("s_dist_06", T, false),
        ("s_dist_07", T, false),
        ("s_dist_08", T, false),
        ("s_dist_09", T, false),
        ("s_dist_10", T, false),
        ("s_ytd", I, false),
        ("s_order_cnt", I, false),
        ("s_remote_cnt", I, false),
        ("s_data", T, false),
    ],
    key: &["s_w_id", "s_i_id"],
};

pub(crate) const SUPPLIER: TableSpec = TableSpec {
    name: "supplier",
    columns: &[
        ("su_suppkey", I, false),
        ("su_name", T, false),
        ("su_address", T, false),
        ("su_nationkey", I, false),
        ("su_phone", T, false),
        ("su_acctbal", D, false),
        ("su_comment", T, false),
    ],
    key: &["su_suppkey"],
};

pub(crate) const NATION: TableSpec = TableSpec {
    name: "nation",
    columns: &[("n_nationkey", I, false), ("n_name", T, false), ("n_regionkey", I, false), ("n_comment", T, false)],
    key: &["n_nationkey"],
};

pub(crate) const REGION: TableSpec = TableSpec {
    name: "region",
    columns: &[("r_regionkey", I, false), ("r_name", T, false), ("r_comment", T, false)],
    key: &["r_regionkey"],
};

/// The twelve tables every system holds, largest first.
pub(crate) const TABLES: [&TableSpec; 12] = [
    &ORDER_LINE,
    &STOCK,
    &CUSTOMER,
    &HISTORY,
    &ORDERS,
    &ITEM,
    &NEW_ORDER,
    &SUPPLIER,
    &DISTRICT,
    &NATION,
    &WAREHOUSE,
    &REGION,
];

/// strata's index of customers by last name: Payment and Order-Status find a customer by
/// (warehouse, district, last name) with a prefix scan, first names in order.
pub(crate) const CUSTOMER_BY_NAME: TableSpec = TableSpec {
    name: "customer_by_name",
    columns: &[
        ("cn_w_id", I, false),
        ("cn_d_id", I, false),
        ("cn_last", T, false),
        ("cn_first", T, false),
        ("cn_id", I, false),
    ],
    key: &["cn_w_id", "cn_d_id", "cn_last", "cn_first", "cn_id"],
};

/// strata's index of orders by customer: the last key under (warehouse, district, customer) is
/// the customer's latest order.
pub(crate) const ORDERS_BY_CUSTOMER: TableSpec = TableSpec {
    name: "orders_by_customer",
    columns: &[("oc_w_id", I, false), ("oc_d_id", I, false), ("oc_c_id", I, false), ("oc_o_id", I, false)],
    key: &["oc_w_id", "oc_d_id", "oc_c_id", "oc_o_id"],
};
