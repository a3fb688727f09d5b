//! The seed of a randomized unit test, from one place: the first of `STRATA_SEEDS` (a
//! comma-separated list, as the integration tests read it) when set, which replays a failure;
//! otherwise a new one per run. It is printed, so the output the test harness shows for a
//! failed test names the seed and the command's variable that replays it.

pub(crate) fn seed() -> u64 {
    let given = std::env::var("STRATA_SEEDS").ok().and_then(|s| s.split(',').next()?.trim().parse().ok());
    let seed = given.unwrap_or_else(rand::random);
    println!("seed {seed} (replay: STRATA_SEEDS={seed})");
    seed
}

#[cfg(test)]
mod tests {
    #[test]
    fn strata_seeds_replays_its_first_seed() {
        // The variable is read as the tests read it; without it a seed is drawn.
        match std::env::var("STRATA_SEEDS") {
            Ok(s) => assert_eq!(super::seed().to_string(), s.split(',').next().unwrap_or_default().trim()),
            Err(_) => assert_ne!((0..4).map(|_| super::seed()).collect::<std::collections::HashSet<_>>().len(), 1),
        }
    }
}
