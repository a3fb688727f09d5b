//! What every comparative workload shares: the common flags, latency recording, the results of a
//! run (printed as a system × metric table with each peer's ratio to strata, and written as
//! `results.json`), and the facts of the machine it ran on.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value as Json};

/// Flags every comparative workload takes.
#[derive(Args, Debug, Clone)]
pub(crate) struct CommonArgs {
    /// Records to load.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Operations in the measured phase (0: run for `--duration` instead).
    #[arg(long, default_value_t = 0)]
    pub ops: u64,
    /// Seconds of the measured phase when `--ops` is 0.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Client threads issuing operations.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Systems to run, comma-separated: strata, rocksdb, postgres, duckdb, sqlite (default:
    /// strata and every peer this binary was built with; a peer not built in is refused).
    #[arg(long, value_delimiter = ',')]
    pub systems: Vec<String>,
    /// Directory for results.json, the chart and the systems' data.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
}

/// The runs of a comparative workload: strata once per variant (layout, engine), then each
/// peer once (with no variant).
pub(crate) fn runs(systems: &[String], variants: &[String]) -> Vec<(String, String)> {
    let mut runs = Vec::new();
    for system in systems {
        if system == "strata" {
            runs.extend(variants.iter().map(|v| ("strata".to_string(), v.clone())));
        } else {
            runs.push((system.clone(), String::new()));
        }
    }
    runs
}

/// Ends one run of `system` (`variant`, `config`): the store's counters go into `results`, the
/// store closes and the run's data directory under `out` is removed.
pub(crate) fn finish_run(
    results: &mut Results,
    (system, variant, config): (&str, &str, &str),
    store: Box<dyn crate::tables::Tables>,
    out: &std::path::Path,
) {
    for (name, value, unit) in store.counters() {
        results.add_variant(system, variant, config, name, value, unit);
    }
    drop(store);
    let _ = std::fs::remove_dir_all(out.join("data"));
}

/// Loads rows `0..n` (`row(i)`) into `store` in batches of 1,000 with a progress bar, then lets
/// it settle; returns rows per second.
pub(crate) fn load_rows(
    store: &dyn crate::tables::Tables,
    n: u64,
    label: &str,
    row: impl Fn(u64) -> Vec<strata::Value>,
) -> Result<f64, String> {
    let progress = Progress::new(&format!("{label}: load"), n);
    let t0 = std::time::Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + 1000).min(n);
        let rows: Vec<Vec<strata::Value>> = (i..end).map(&row).collect();
        store.load(&rows)?;
        i = end;
        progress.set(i);
    }
    store.settle(false)?;
    progress.finish();
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

impl CommonArgs {
    /// The systems to run, in order; an error names the first one this binary cannot run, before
    /// anything has been loaded.
    pub fn systems(&self) -> Result<Vec<String>, String> {
        if self.systems.is_empty() {
            return Ok(std::iter::once("strata").chain(crate::peers::built()).map(String::from).collect());
        }
        for s in &self.systems {
            if s != "strata" && !crate::peers::built().contains(&s.as_str()) {
                return Err(crate::peers::not_built(s));
            }
        }
        Ok(self.systems.clone())
    }
}

/// Operation latencies in microseconds.
pub(crate) struct Latency(Histogram<u64>);

impl Latency {
    pub fn new() -> Self {
        // 1 µs to 100 s at 3 significant digits; values outside are clamped.
        Latency(Histogram::new_with_bounds(1, 100_000_000, 3).expect("constant histogram bounds are valid"))
    }

    pub fn record(&mut self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, 100_000_000);
        let _ = self.0.record(us);
    }

    pub fn merge(&mut self, other: &Latency) {
        let _ = self.0.add(&other.0);
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    pub fn quantile(&self, q: f64) -> f64 {
        self.0.value_at_quantile(q) as f64
    }

    pub fn mean(&self) -> f64 {
        self.0.mean()
    }
}

/// A progress bar on stderr for a long phase (hidden when stderr is not a terminal, where a line
/// every few seconds is printed instead).
pub(crate) struct Progress {
    bar: indicatif::ProgressBar,
    label: String,
    total: u64,
    started: std::time::Instant,
    last_line: parking_lot::Mutex<std::time::Instant>,
}

impl Progress {
    pub fn new(label: &str, total: u64) -> Self {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_message(label.to_string());
        let now = std::time::Instant::now();
        Progress { bar, label: label.to_string(), total, started: now, last_line: parking_lot::Mutex::new(now) }
    }

    pub fn set(&self, done: u64) {
        self.bar.set_position(done);
        if self.bar.is_hidden() {
            // Called once per operation from several threads: never wait for the lock.
            let Some(mut last) = self.last_line.try_lock() else { return };
            if last.elapsed() >= Duration::from_secs(10) {
                *last = std::time::Instant::now();
                let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
                eprintln!("  {}: {done}/{} ({rate:.0}/s)", self.label, self.total);
            }
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
        eprintln!("  {}: done in {:.1} s", self.label, self.started.elapsed().as_secs_f64());
    }

    /// Runs `work`, which counts what it did in the counter it is given, with a bar labelled
    /// `label` out of `total` showing that count until it returns.
    pub fn around<T>(
        label: &str,
        total: u64,
        work: impl FnOnce(&std::sync::atomic::AtomicU64) -> Result<T, String>,
    ) -> Result<T, String> {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let progress = Progress::new(label, total);
        let done = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let out = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    progress.set(done.load(Ordering::Relaxed));
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
            let r = work(&done);
            stop.store(true, Ordering::Relaxed);
            r
        })?;
        progress.finish();
        Ok(out)
    }
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

/// One measured figure.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub system: String,
    /// Which of several configurations of one system (strata's layouts); empty if only one.
    pub variant: String,
    pub config: String,
    pub metric: String,
    pub value: f64,
    pub unit: String,
}

/// Whether larger is better for a unit (a rate: per second, minute or hour) or smaller
/// (latency, time).
fn higher_is_better(unit: &str) -> bool {
    ["/s", "/min", "/h"].iter().any(|per| unit.ends_with(per))
}

/// The figures of one run of one workload.
pub(crate) struct Results {
    pub workload: String,
    pub params: Map<String, Json>,
    pub rows: Vec<Row>,
}

impl Results {
    /// A run of `workload` with its parameters, in the order given.
    pub fn new<const N: usize>(workload: &str, params: [(&str, Json); N]) -> Self {
        let params: Map<String, Json> = params.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        Results { workload: workload.to_string(), params, rows: Vec::new() }
    }

    pub fn add(&mut self, system: &str, config: &str, metric: &str, value: f64, unit: &str) {
        self.add_variant(system, "", config, metric, value, unit);
    }

    pub fn add_variant(&mut self, system: &str, variant: &str, config: &str, metric: &str, value: f64, unit: &str) {
        self.rows.push(Row {
            system: system.into(),
            variant: variant.into(),
            config: config.into(),
            metric: metric.into(),
            value,
            unit: unit.into(),
        });
    }

    /// Adds median and p99 of `lat` as `metric p50` / `metric p99` (µs).
    pub fn add_latency(&mut self, system: &str, config: &str, metric: &str, lat: &Latency) {
        if lat.count() == 0 {
            return;
        }
        self.add(system, config, &format!("{metric} p50"), lat.quantile(0.5), "us");
        self.add(system, config, &format!("{metric} p99"), lat.quantile(0.99), "us");
    }

    /// The columns (system and variant, in order of appearance), the metrics (with units) and
    /// each cell's value.
    #[allow(clippy::type_complexity)]
    fn grid(&self) -> (Vec<(String, String, String)>, Vec<(String, String)>, BTreeMap<(String, String, String), f64>) {
        let mut columns: Vec<(String, String, String)> = Vec::new();
        let mut metrics: Vec<(String, String)> = Vec::new();
        let mut cell = BTreeMap::new();
        for r in &self.rows {
            let col = (r.system.clone(), r.variant.clone(), r.config.clone());
            if !columns.contains(&col) {
                columns.push(col);
            }
            let m = (r.metric.clone(), r.unit.clone());
            if !metrics.contains(&m) {
                metrics.push(m);
            }
            cell.insert((r.system.clone(), r.variant.clone(), r.metric.clone()), r.value);
        }
        (columns, metrics, cell)
    }

    /// The table: one line per metric, one column per system (and variant), then each peer's
    /// ratio to strata (its first variant), oriented so that above 1 means strata is better.
    pub fn print(&self) {
        let (columns, metrics, cell) = self.grid();
        let name = |c: &(String, String, String)| label(&c.0, &c.1);
        let strata = columns.iter().find(|c| c.0 == "strata").cloned();
        println!();
        println!("strata-bench {}: {}", self.workload, Json::Object(self.params.clone()));
        print!("{:<28} {:>6}", "metric", "unit");
        for c in &columns {
            print!(" {:>16}", name(c));
        }
        for c in columns.iter().filter(|c| c.0 != "strata") {
            print!(" {:>18}", format!("strata/{}", c.0));
        }
        println!();
        for (metric, unit) in &metrics {
            print!("{metric:<28} {unit:>6}");
            for c in &columns {
                match cell.get(&(c.0.clone(), c.1.clone(), metric.clone())) {
                    Some(v) => print!(" {v:>16.1}"),
                    None => print!(" {:>16}", "-"),
                }
            }
            let ours = strata.as_ref().and_then(|s| cell.get(&(s.0.clone(), s.1.clone(), metric.clone())));
            for c in columns.iter().filter(|c| c.0 != "strata") {
                let theirs = cell.get(&(c.0.clone(), c.1.clone(), metric.clone()));
                match (ours, theirs) {
                    (Some(o), Some(t)) if *o > 0.0 && *t > 0.0 => {
                        let r = if higher_is_better(unit) { o / t } else { t / o };
                        // Small ratios keep three significant digits' worth of information.
                        let digits = if r < 0.1 { 3 } else { 2 };
                        print!(" {:>17.digits$}x", r);
                    }
                    _ => print!(" {:>18}", "-"),
                }
            }
            println!();
        }
        match &strata {
            Some(s) if columns.iter().any(|c| c.0 != "strata") => println!(
                "(ratios compare {} with each peer; above 1 means strata is better: faster, or higher throughput)",
                name(s)
            ),
            _ => {}
        }
        for c in columns.iter().filter(|c| !c.2.is_empty()) {
            println!("{}: {}", name(c), c.2);
        }
    }

    /// Prints the table and writes `results.json` and `chart.png` into `dir`.
    pub fn finish(&self, dir: &std::path::Path) -> Result<(), String> {
        self.print();
        let path = self.write(dir).map_err(|e| format!("writing results: {e}"))?;
        eprintln!("wrote {}", path.display());
        let (columns, metrics, cell) = self.grid();
        let names: Vec<String> = columns.iter().map(|c| label(&c.0, &c.1)).collect();
        let values: Vec<Vec<Option<f64>>> = metrics
            .iter()
            .map(|(m, _)| columns.iter().map(|c| cell.get(&(c.0.clone(), c.1.clone(), m.clone())).copied()).collect())
            .collect();
        match crate::chart::draw(&dir.join("chart.png"), &self.workload, &names, &metrics, &values) {
            Ok(p) => eprintln!("wrote {}", p.display()),
            Err(e) => eprintln!("no chart: {e}"),
        }
        Ok(())
    }

    /// Writes `results.json` into `dir`.
    pub fn write(&self, dir: &std::path::Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let results: Vec<Json> = self
            .rows
            .iter()
            .map(|r| {
                json!({"system": r.system, "variant": r.variant, "config": r.config, "metric": r.metric,
                       "value": r.value, "unit": r.unit})
            })
            .collect();
        let doc = json!({
            "workload": self.workload,
            "params": self.params,
            "machine": machine(),
            "results": results,
        });
        let path = dir.join("results.json");
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap_or_default())?;
        Ok(path)
    }
}

/// A column's name: the system, with its variant if it has one.
fn label(system: &str, variant: &str) -> String {
    if variant.is_empty() {
        system.to_string()
    } else {
        format!("{system}:{variant}")
    }
}

/// Facts of this machine: CPU model and cores, memory, kernel.
pub(crate) fn machine() -> Json {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    json!({
        "cpu": model,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "memory_gib": (mem_kib as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "os": std::env::consts::OS,
    })
}
