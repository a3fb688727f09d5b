//! Storage tiers (LogStore, seed 002): a fast and a slow directory, the fast one with a byte
//! budget. Every level but the last lives on the fast tier and the last level on the slow one,
//! so a read probes at most one slow-tier file; informed compaction keeps the fast tier within
//! its budget by moving its coldest ranges into the last level. An SST lives on exactly one tier,
//! recorded with the file in the manifest, and data changes tier only as compaction output, so
//! a crash in the middle of a move leaves at worst an unreferenced output that the next cleanup
//! deletes.
//!
//! Without tiers in [`Options`](crate::Options) a database has one implicit tier, its own
//! directory, and its files are exactly what they were before tiers existed. Tiers given once
//! are recorded in the manifest and used by every later open; a later open may change their
//! budgets but not their names, directories or number. Each tier directory holds a small
//! `TIER` marker naming the tier, so a directory that went missing or was swapped for another
//! is reported instead of read as empty.

pub(crate) mod heat;
pub mod model;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::vfs::{DeviceProfile, Fs};

/// The name of the marker file in every tier directory.
pub(crate) const MARKER: &str = "TIER";

/// The most tiers the manifest format records (an open accepts two for now: a fast and a slow).
pub const MAX_TIERS: usize = 16;

/// One storage tier: a named directory with a byte budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    /// A short name (letters, digits, `-`, `_`), shown by `stats`.
    pub name: String,
    /// The directory its SSTs live in.
    pub dir: PathBuf,
    /// Bytes of SSTs it should hold at most (`None`: whatever the other tiers do not take).
    /// Compaction keeps to it; flushes may pass it for a while (they always write to the first
    /// tier).
    pub budget: Option<u64>,
    /// For experiments: make the directory behave like a device of this profile (the open
    /// wraps its filesystem in a [`SlowFs`](crate::vfs::SlowFs)). Not recorded: it applies to the
    /// open that gives it.
    pub profile: Option<DeviceProfile>,
}

impl Tier {
    /// A tier without a budget.
    pub fn new(name: impl Into<String>, dir: impl Into<PathBuf>) -> Tier {
        Tier { name: name.into(), dir: dir.into(), budget: None, profile: None }
    }

    /// The same tier with a byte budget.
    pub fn with_budget(mut self, bytes: u64) -> Tier {
        self.budget = Some(bytes);
        self
    }

    /// The same tier slowed to a device profile (see [`Tier::profile`]).
    pub fn with_profile(mut self, profile: DeviceProfile) -> Tier {
        self.profile = Some(profile);
        self
    }

    /// Parses the command-line form `NAME=DIR[:SIZE]`, SIZE as in [`parse_size`].
    ///
    /// ```
    /// let t = strata::Tier::parse("fast=/mnt/ssd/db:512MiB").unwrap();
    /// assert_eq!((t.name.as_str(), t.budget), ("fast", Some(512 << 20)));
    /// assert_eq!(strata::Tier::parse("slow=/mnt/hdd/db").unwrap().budget, None);
    /// ```
    ///
    /// # Errors
    /// A message naming what is wrong with `spec`.
    pub fn parse(spec: &str) -> std::result::Result<Tier, String> {
        let (name, rest) =
            spec.split_once('=').ok_or_else(|| format!("tier '{spec}': expected NAME=DIR or NAME=DIR:SIZE"))?;
        check_name(name)?;
        // The size follows the last ':' when what follows parses as one; otherwise the whole
        // rest is the directory.
        let (dir, budget) = match rest.rsplit_once(':') {
            Some((d, s)) if !d.is_empty() && s.chars().next().is_some_and(|c| c.is_ascii_digit()) => {
                (d, Some(parse_size(s).map_err(|e| format!("tier '{name}': {e}"))?))
            }
            _ => (rest, None),
        };
        if dir.is_empty() {
            return Err(format!("tier '{name}': the directory is empty"));
        }
        Ok(Tier { name: name.to_owned(), dir: PathBuf::from(dir), budget, profile: None })
    }
}

/// Parses a byte size: a number with an optional unit `B`, `KiB`, `MiB`, `GiB` or `TiB` (also
/// `K`, `M`, `G`, `T`, `KB`, `MB`, `GB`, `TB`, all powers of 1024).
///
/// # Errors
/// A message when `s` is not such a size or overflows 64 bits.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(digits);
    let n: u64 = num.parse().map_err(|_| format!("'{s}' is not a size (like 256KiB, 512MiB, 8GiB)"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (use B, KiB, MiB, GiB or TiB)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("'{s}' is too large"))
}

fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(format!("tier name '{name}': use 1 to 64 letters, digits, '-' or '_'"));
    }
    Ok(())
}

/// A tier as the manifest records it (see `docs/format/manifest.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierRecord {
    /// Name.
    pub name: String,
    /// Directory, as given when the tier was first configured.
    pub dir: String,
    /// Byte budget; 0 for none.
    pub budget: u64,
    /// Random number written into the tier's `TIER` marker when it was first configured, so
    /// the directory is known to belong to this database.
    pub token: u64,
}

impl TierRecord {
    /// The budget, `None` when unlimited.
    pub fn budget(&self) -> Option<u64> {
        (self.budget > 0).then_some(self.budget)
    }
}

/// Checks the tiers an open was given (validation without touching the disk).
pub(crate) fn validate(tiers: &[Tier]) -> std::result::Result<(), String> {
    if tiers.len() > 2 {
        return Err(format!("at most two tiers (a fast and a slow one) for now, got {}", tiers.len()));
    }
    for (i, t) in tiers.iter().enumerate() {
        check_name(&t.name)?;
        if t.dir.to_str().is_none() {
            return Err(format!("tier '{}': the directory must be valid UTF-8", t.name));
        }
        if t.budget == Some(0) {
            return Err(format!("tier '{}': a budget of 0 bytes", t.name));
        }
        if let Some(o) = tiers[..i].iter().find(|o| o.name == t.name || o.dir == t.dir) {
            return Err(format!("tiers '{}' and '{}' share a name or a directory", o.name, t.name));
        }
    }
    Ok(())
}

/// Every tier but the last must have a budget, or the last would never be written.
fn check_budgets(tiers: &[TierRecord]) -> Result<()> {
    match tiers.split_last() {
        Some((_, above)) if above.iter().any(|t| t.budget == 0) => Err(Error::InvalidArgument(
            "with several tiers, give every tier but the last a budget (NAME=DIR:SIZE)".into(),
        )),
        _ => Ok(()),
    }
}

/// The tiers an open works with, settled against what the manifest recorded: the records to
/// use, and whether they must be (re)written to the manifest. A tier given without a budget
/// keeps the one recorded.
///
/// `has_files`: the database already holds SSTs (in its own directory, when no tiers were
/// recorded).
pub(crate) fn settle(
    db_dir: &Path,
    given: &[Tier],
    recorded: &[TierRecord],
    has_files: bool,
) -> Result<(Vec<TierRecord>, bool)> {
    let bad = |m: String| Error::InvalidArgument(m);
    let as_record = |t: &Tier, budget: u64, token: u64| TierRecord {
        name: t.name.clone(),
        dir: t.dir.to_string_lossy().into_owned(),
        budget,
        token,
    };
    match (given.is_empty(), recorded.is_empty()) {
        (true, true) => {
            let dir = db_dir.to_string_lossy().into_owned();
            Ok((vec![TierRecord { name: "default".into(), dir, budget: 0, token: 0 }], false))
        }
        (true, false) => Ok((recorded.to_vec(), false)),
        (false, true) => {
            if has_files && given[0].dir != db_dir {
                return Err(bad(format!(
                    "this database keeps its files in {}; to add tiers, make that directory the first tier",
                    db_dir.display()
                )));
            }
            let settled: Vec<TierRecord> =
                given.iter().map(|t| as_record(t, t.budget.unwrap_or(0), new_token())).collect();
            check_budgets(&settled)?;
            Ok((settled, true))
        }
        (false, false) => {
            let names = |v: Vec<String>| v.join(", ");
            if given.len() != recorded.len() {
                return Err(bad(format!(
                    "the database has tiers {}; {} were given ({})",
                    names(recorded.iter().map(|r| format!("{}={}", r.name, r.dir)).collect()),
                    given.len(),
                    names(given.iter().map(|t| format!("{}={}", t.name, t.dir.display())).collect()),
                )));
            }
            for (g, r) in given.iter().zip(recorded) {
                if g.name != r.name || g.dir != Path::new(&r.dir) {
                    return Err(bad(format!(
                        "tier '{}' of this database is {}; the tiers cannot be renamed or moved (given {}={})",
                        r.name,
                        r.dir,
                        g.name,
                        g.dir.display()
                    )));
                }
            }
            let settled: Vec<TierRecord> =
                given.iter().zip(recorded).map(|(g, r)| as_record(g, g.budget.unwrap_or(r.budget), r.token)).collect();
            check_budgets(&settled)?;
            let changed = settled != recorded;
            Ok((settled, changed))
        }
    }
}

/// A random number for a new tier's marker.
fn new_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

/// Whether `name` is a file a strata database keeps (an SST, a WAL, a manifest, a checkpoint).
fn database_file(name: &str) -> bool {
    [".sst", ".log", ".lck"].iter().any(|s| name.ends_with(s)) || name.starts_with("MANIFEST-") || name == "CURRENT"
}

/// The marker text of tier `t`.
fn marker_text(t: &TierRecord) -> String {
    format!("strata tier {} {:016x}\n", t.name, t.token)
}

/// Checks the directories of tiers configured for the first time: each is created if need be,
/// and one that already holds database files or a tier marker is refused (unless it is the
/// database's own directory `db_dir`), since cleanup would delete SSTs it does not know. No
/// marker is written yet: the tiers are recorded in the manifest first (see [`check_dirs`]).
pub(crate) fn check_new_dirs(fs: &dyn Fs, db_dir: &Path, tiers: &[TierRecord]) -> Result<()> {
    for t in tiers.iter().filter(|t| Path::new(&t.dir) != db_dir) {
        let dir = Path::new(&t.dir);
        fs.create_dir_all(dir)?;
        if let Some(f) = fs.list(dir)?.into_iter().find(|n| database_file(n) || n == MARKER) {
            return Err(Error::InvalidArgument(format!(
                "tier '{}': {} already holds database files ({f}); give an empty directory",
                t.name,
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Makes sure every recorded tier's directory is this database's tier: its `TIER` marker must
/// name the tier and carry its token. A missing marker is written when nothing can be lost by
/// it: the directory is the database's own, or the version keeps no file on that tier
/// (`has_files[i]`: it does on tier `i`); this also finishes a first setup that stopped between
/// recording the tiers and writing their markers. Otherwise a missing marker means a missing or
/// swapped directory, and the open is refused.
pub(crate) fn check_dirs(fs: &dyn Fs, db_dir: &Path, tiers: &[TierRecord], has_files: &[bool]) -> Result<()> {
    if tiers.len() == 1 && tiers[0].name == "default" && tiers[0].token == 0 {
        return Ok(());
    }
    for (i, t) in tiers.iter().enumerate() {
        let dir = Path::new(&t.dir);
        let marker = dir.join(MARKER);
        let content = marker_text(t);
        if !fs.exists(&marker) {
            if dir != db_dir && has_files.get(i).copied().unwrap_or(false) {
                return Err(Error::InvalidArgument(format!(
                    "tier '{}': {} is missing or is not this database's tier directory (no {MARKER} file)",
                    t.name,
                    marker.display()
                )));
            }
            fs.create_dir_all(dir)?;
            let mut f = fs.create(&marker)?;
            f.append(content.as_bytes())?;
            f.sync()?;
            fs.sync_dir(dir)?;
            continue;
        }
        let found = fs.read_all(&marker)?;
        if found != content.as_bytes() {
            return Err(Error::InvalidArgument(format!(
                "tier '{}': {} belongs to another tier or database ({:?})",
                t.name,
                dir.display(),
                String::from_utf8_lossy(&found).trim_end()
            )));
        }
    }
    Ok(())
}

/// How compaction places data across two tiers (see [`crate::compaction::tiering`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TierPlacement {
    /// By temperature (LogStore): the coldest files leave the fast tier when it is over budget,
    /// and the hottest slow-tier files come back when that pays (reverse compaction).
    #[default]
    Informed,
    /// Temperature-blind, the baseline informed placement is measured against: files leave the
    /// fast tier round-robin over the key space, and nothing comes back.
    RoundRobin,
}

/// The tier of compaction output at `level` in a tree of `num_levels` levels, with `tiers`
/// tiers: the last level lives on the slow (last) tier, every other level on the fast one, so a
/// read probes at most one slow-tier file. Informed compaction keeps the fast tier within its
/// budget by moving its coldest ranges into the last level ahead of the size-based flow.
pub(crate) fn output_tier(tiers: usize, level: usize, num_levels: usize) -> u8 {
    if tiers >= 2 && level + 1 >= num_levels {
        (tiers - 1) as u8
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("256KiB"), Ok(256 << 10));
        assert_eq!(parse_size("512mib"), Ok(512 << 20));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("3G"), Ok(3 << 30));
        for bad in ["", "KiB", "12XB", "-1MiB", "99999999999TiB", "1.5GiB"] {
            assert!(parse_size(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn tier_specs_parse_and_bad_ones_are_named() {
        let t = Tier::parse("fast=/a/b:1MiB").unwrap();
        assert_eq!(t, Tier::new("fast", "/a/b").with_budget(1 << 20));
        // A ':' that does not start a size belongs to the directory.
        assert_eq!(Tier::parse("slow=/a:b").unwrap(), Tier::new("slow", "/a:b"));
        for bad in ["fast", "=/a", "fast=", "fa st=/a", "fast=/a:12parsecs"] {
            let e = Tier::parse(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
    }

    #[test]
    fn validation_wants_distinct_tiers_and_budgets_above_the_last() {
        let fast = Tier::new("fast", "/f").with_budget(100);
        let slow = Tier::new("slow", "/s");
        assert!(validate(&[fast.clone(), slow.clone()]).is_ok());
        assert!(validate(std::slice::from_ref(&slow)).is_ok());
        // No budget above the last: refused when nothing recorded supplies one.
        let unbudgeted = [Tier::new("fast", "/f"), slow.clone()];
        assert!(settle(Path::new("/db"), &unbudgeted, &[], false).is_err());
        assert!(validate(&[fast.clone(), Tier::new("fast", "/s")]).is_err());
        assert!(validate(&[fast.clone(), Tier::new("slow", "/f")]).is_err());
        assert!(validate(&[fast.clone().with_budget(0), slow.clone()]).is_err());
        let e = validate(&[fast, Tier::new("mid", "/m").with_budget(200), slow]).unwrap_err();
        assert!(e.contains("two tiers"), "{e}");
    }

    fn rec(name: &str, dir: &str, budget: u64) -> TierRecord {
        TierRecord { name: name.into(), dir: dir.into(), budget, token: 7 }
    }

    #[test]
    fn settling_keeps_recorded_tiers_and_refuses_moves() {
        let db = Path::new("/db");
        let given = [Tier::new("fast", "/f").with_budget(100), Tier::new("slow", "/s")];
        let recorded = [rec("fast", "/f", 100), rec("slow", "/s", 0)];
        // None given, none recorded: the database directory alone, nothing to record.
        let default = TierRecord { token: 0, ..rec("default", "/db", 0) };
        assert_eq!(settle(db, &[], &[], true).unwrap(), (vec![default], false));
        // First time: recorded, each tier with a new token; refused when files exist elsewhere.
        let (fresh, record) = settle(db, &given, &[], false).unwrap();
        let untokened = |v: &[TierRecord]| v.iter().map(|t| TierRecord { token: 7, ..t.clone() }).collect::<Vec<_>>();
        assert!(record && untokened(&fresh) == recorded && fresh[0].token != fresh[1].token, "{fresh:?}");
        assert!(settle(db, &given, &[], true).is_err());
        let from_db = [Tier::new("fast", "/db").with_budget(100), Tier::new("slow", "/s")];
        assert!(settle(db, &from_db, &[], true).unwrap().1);
        // Later: the record is used; a new budget is recorded; a move or rename is refused.
        assert_eq!(settle(db, &[], &recorded, true).unwrap(), (recorded.to_vec(), false));
        assert_eq!(settle(db, &given, &recorded, true).unwrap(), (recorded.to_vec(), false));
        let bigger = [Tier::new("fast", "/f").with_budget(200), Tier::new("slow", "/s")];
        assert_eq!(settle(db, &bigger, &recorded, true).unwrap().0[0].budget, 200);
        // Given without sizes: the recorded budgets stay.
        let sizeless = [Tier::new("fast", "/f"), Tier::new("slow", "/s")];
        assert_eq!(settle(db, &sizeless, &recorded, true).unwrap(), (recorded.to_vec(), false));
        let moved = [Tier::new("fast", "/f").with_budget(100), Tier::new("slow", "/elsewhere")];
        let e = settle(db, &moved, &recorded, true).unwrap_err().to_string();
        assert!(e.contains("slow") && e.contains("/s"), "{e}");
        assert!(settle(db, &given[..1], &recorded, true).is_err());
    }

    #[test]
    fn the_last_level_lives_on_the_slow_tier() {
        assert_eq!((0..7).map(|l| output_tier(2, l, 7)).collect::<Vec<_>>(), [0, 0, 0, 0, 0, 0, 1]);
        assert!((0..7).all(|l| output_tier(1, l, 7) == 0));
    }

    #[test]
    fn markers_are_made_once_and_checked_after() {
        let fs = crate::vfs::FaultFs::new();
        let db = Path::new("/db");
        let tiers = [rec("fast", "/f", 100), rec("slow", "/s", 0)];
        // Files recorded on a tier without a marker: a missing or swapped directory.
        assert!(check_dirs(&fs, db, &tiers, &[true, true]).is_err(), "missing markers accepted");
        // No file there yet (a first setup, or one cut short): the markers are written.
        check_new_dirs(&fs, db, &tiers).unwrap();
        check_dirs(&fs, db, &tiers, &[false, false]).unwrap();
        check_dirs(&fs, db, &tiers, &[true, true]).unwrap();
        // The directories swapped: each marker names the other tier.
        let swapped = [rec("fast", "/s", 100), rec("slow", "/f", 0)];
        let e = check_dirs(&fs, db, &swapped, &[true, true]).unwrap_err().to_string();
        assert!(e.contains("another tier"), "{e}");
        // Another database's tier of the same name: its token differs; nor may it become new.
        let other = [rec("fast", "/f2", 100), TierRecord { token: 8, ..rec("slow", "/s", 0) }];
        assert!(check_dirs(&fs, Path::new("/other"), &other, &[false, false]).is_err(), "a foreign tier accepted");
        assert!(check_new_dirs(&fs, Path::new("/other"), &other).is_err(), "a foreign tier taken");
        // A new tier in a directory holding database files (which cleanup would delete).
        let mut f = fs.create(Path::new("/full/000007.sst")).unwrap();
        f.append(b"x").unwrap();
        let e = check_new_dirs(&fs, db, &[rec("slow", "/full", 0)]).unwrap_err().to_string();
        assert!(e.contains("already holds database files"), "{e}");
        // The database's own directory may be a tier, and its marker is rewritten if lost.
        let own = [rec("fast", "/full", 100)];
        check_new_dirs(&fs, Path::new("/full"), &own).unwrap();
        check_dirs(&fs, Path::new("/full"), &own, &[true]).unwrap();
        assert!(fs.exists(Path::new("/full/TIER")));
    }
}
