//! TPC-C's consistency conditions 1-4 (clause 3.3.2), as queries that return the districts or
//! warehouses breaking them: an empty answer to each is a consistent database. The same text
//! runs on every system.

/// (condition, what it asks, the query returning what breaks it).
pub(crate) const CONDITIONS: [(u32, &str, &str); 4] = [
    (
        1,
        "a warehouse's w_ytd is the sum of its districts' d_ytd",
        "SELECT w_id, w_ytd, s FROM warehouse \
         JOIN (SELECT d_w_id, sum(d_ytd) AS s FROM district GROUP BY d_w_id) d ON w_id = d_w_id \
         WHERE abs(w_ytd - s) > 0.01",
    ),
    (
        2,
        "a district's d_next_o_id - 1 is its largest o_id and its largest no_o_id",
        "SELECT d_w_id, d_id, d_next_o_id, mo, mno FROM district \
         JOIN (SELECT o_w_id, o_d_id, max(o_id) AS mo FROM orders GROUP BY o_w_id, o_d_id) o \
           ON o_w_id = d_w_id AND o_d_id = d_id \
         LEFT JOIN (SELECT no_w_id, no_d_id, max(no_o_id) AS mno FROM new_order GROUP BY no_w_id, no_d_id) n \
           ON no_w_id = d_w_id AND no_d_id = d_id \
         WHERE d_next_o_id - 1 <> mo OR (mno IS NOT NULL AND d_next_o_id - 1 <> mno)",
    ),
    (
        3,
        "a district's new orders are a run of o_ids without a gap",
        "SELECT no_w_id, no_d_id FROM new_order GROUP BY no_w_id, no_d_id \
         HAVING max(no_o_id) - min(no_o_id) + 1 <> count(*)",
    ),
    (
        4,
        "a district's orders' o_ol_cnt add up to its order lines",
        "SELECT o_w_id, o_d_id, s, n FROM \
         (SELECT o_w_id, o_d_id, sum(o_ol_cnt) AS s FROM orders GROUP BY o_w_id, o_d_id) o \
         JOIN (SELECT ol_w_id, ol_d_id, count(*) AS n FROM order_line GROUP BY ol_w_id, ol_d_id) l \
           ON ol_w_id = o_w_id AND ol_d_id = o_d_id \
         WHERE s <> n",
    ),
];

/// Checks every condition with `query` (a system's way to answer SQL as rows of text); returns
/// what broke, one line per condition.
pub(crate) fn consistency(
    system: &str,
    mut query: impl FnMut(&str) -> Result<Vec<Vec<String>>, String>,
) -> Result<Vec<String>, String> {
    let mut broken = Vec::new();
    for (n, what, sql) in CONDITIONS {
        let rows = query(sql).map_err(|e| format!("{system}: consistency condition {n}: {e}"))?;
        if !rows.is_empty() {
            let shown: Vec<String> = rows.iter().take(3).map(|r| r.join(", ")).collect();
            broken.push(format!(
                "{system}: condition {n} ({what}) fails for {} rows, e.g. {}",
                rows.len(),
                shown.join("; ")
            ));
        }
    }
    Ok(broken)
}
