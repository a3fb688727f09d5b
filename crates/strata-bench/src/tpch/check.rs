//! Checking a query's rows against the reference answer (DuckDB's rows for the same query over
//! the same data), both as text: numbers as the systems print them, dates as `YYYY-MM-DD`, NULL
//! as an empty value.

/// How far a number may be from the answer's and still match: a millionth of its size (at least
/// of 1), and never more than a cent. Money columns are exact decimals in DuckDB but doubles in
/// strata and SQLite; a sum of millions of doubles is off by far less than a cent, and an
/// average or a ratio by far less than a millionth.
const MAX_ABS_ERROR: f64 = 0.01;
const MAX_REL_ERROR: f64 = 1e-6;

/// Whether two values' texts match: as numbers within the tolerance when both are numbers, else
/// as text (trailing blanks aside; the answers keep them, drivers may not).
fn value_matches(got: &str, want: &str) -> bool {
    match (got.trim().parse::<f64>(), want.trim().parse::<f64>()) {
        (Ok(g), Ok(w)) => (g - w).abs() <= MAX_ABS_ERROR.min(MAX_REL_ERROR * w.abs().max(1.0)),
        _ => got.trim_end() == want.trim_end(),
    }
}

/// `None` when `got` has the rows of `want` in the same order, else the first difference.
pub(crate) fn compare(got: &[Vec<String>], want: &[Vec<String>]) -> Option<String> {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.len() != w.len() {
            return Some(format!("row {}: {} values, the answer has {}", i + 1, g.len(), w.len()));
        }
        for (c, (gv, wv)) in g.iter().zip(w).enumerate() {
            if !value_matches(gv, wv) {
                return Some(format!("row {}, column {}: got {gv:?}, the answer has {wv:?}", i + 1, c + 1));
            }
        }
    }
    if got.len() != want.len() {
        return Some(format!("{} rows, the answer has {}", got.len(), want.len()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[&[&str]]) -> Vec<Vec<String>> {
        v.iter().map(|r| r.iter().map(|s| s.to_string()).collect()).collect()
    }

    #[test]
    fn numbers_match_within_the_tolerance_and_text_exactly() {
        let want = rows(&[&["A", "56586554400.73", "25.522005853257337", "1478493", "comment "]]);
        let close = rows(&[&["A", "56586554400.7300034", "25.52200585325734", "1478493.0", "comment"]]);
        assert_eq!(compare(&close, &want), None);
        let off_by_a_cent_and_more = rows(&[&["A", "56586554400.75", "25.522005853257337", "1478493", "comment"]]);
        assert!(compare(&off_by_a_cent_and_more, &want).unwrap().contains("column 2"));
        let other_text = rows(&[&["B", "56586554400.73", "25.522005853257337", "1478493", "comment"]]);
        assert!(compare(&other_text, &want).unwrap().contains("column 1"));
        let relative = rows(&[&["A", "56586554400.73", "25.5221", "1478493", "comment"]]);
        assert!(compare(&relative, &want).unwrap().contains("column 3"), "4e-6 relative is too far for an average");
    }

    #[test]
    fn missing_extra_and_reordered_rows_are_differences() {
        let want = rows(&[&["1"], &["2"]]);
        assert_eq!(compare(&rows(&[&["1"]]), &want).unwrap(), "1 rows, the answer has 2");
        assert_eq!(compare(&rows(&[&["1"], &["2"], &["3"]]), &want).unwrap(), "3 rows, the answer has 2");
        assert!(compare(&rows(&[&["2"], &["1"]]), &want).unwrap().starts_with("row 1"));
        assert!(compare(&rows(&[&["1", "x"], &["2"]]), &want).unwrap().contains("2 values"));
    }
}
