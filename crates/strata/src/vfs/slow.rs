//! A filesystem whose chosen directories behave like slower devices, for tiering experiments
//! and tests (LogStore's fast and slow tiers on one machine).
//!
//! Each slowed directory is a [`Device`] with a [`DeviceProfile`]: every read pays the
//! positioning latency (unless it continues the previous read of the same file) plus its bytes
//! at the device's bandwidth, every append occupies the device for its bytes at that bandwidth,
//! and every sync pays one latency once the appends before it are done. The charge is a sleep
//! taken whatever the OS page cache holds, so cached files do not hide the profile. A device
//! serves `channels` operations at once (a disk's single arm: 1); operations beyond that queue,
//! so concurrent readers slow each other down as on real hardware.
//!
//! Appends are written behind, as an operating system writes dirty pages back: an append
//! occupies a channel for its transfer time, but the writer sleeps only while the device is
//! more than [`WRITE_BEHIND`] behind, and a sync waits for everything appended before it.
//! Sustained writing is thus held to the device's bandwidth, reads queue behind the appends
//! ahead of them, and a small append (a WAL record) costs its microsecond of transfer instead of
//! the tens of microseconds the shortest sleep the kernel grants would take.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{site, Mutex};

use super::{DirLock, Fs, ReadableFile, WritableFile};
use crate::error::Result;

/// What operations on a device cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceProfile {
    /// Positioning time of a read that does not continue the previous one (seek and rotation
    /// on a disk), also charged once per sync.
    pub read_latency: Duration,
    /// Bytes per second moved by reads and appends (0: unlimited).
    pub bandwidth: u64,
    /// Operations served at once; more wait their turn (at least 1).
    pub channels: usize,
}

impl DeviceProfile {
    /// A 7,200 rpm hard disk: 8 ms to position, 150 MB/s, one operation at a time.
    pub fn hard_disk() -> DeviceProfile {
        DeviceProfile { read_latency: Duration::from_millis(8), bandwidth: 150_000_000, channels: 1 }
    }

    /// A SATA flash SSD: 80 µs to read a page, 500 MB/s, 32 operations at once.
    pub fn ssd() -> DeviceProfile {
        DeviceProfile { read_latency: Duration::from_micros(80), bandwidth: 500_000_000, channels: 32 }
    }

    /// The time one operation moving `bytes` occupies the device, with or without positioning.
    pub fn cost(&self, positioned: bool, bytes: usize) -> Duration {
        let transfer = match self.bandwidth {
            0 => Duration::ZERO,
            bw => Duration::from_secs_f64(bytes as f64 / bw as f64),
        };
        if positioned {
            self.read_latency + transfer
        } else {
            transfer
        }
    }
}

/// How far (in device time) appends may run ahead of the device before the writer waits.
pub const WRITE_BEHIND: Duration = Duration::from_millis(5);

/// One slowed device: its profile, when each channel is next free, and what it was charged.
#[derive(Debug)]
pub struct Device {
    profile: DeviceProfile,
    /// When each channel is next free, and when the last append accepted so far is done.
    free_at: Mutex<(Vec<Instant>, Instant)>,
    ops: AtomicU64,
    busy_micros: AtomicU64,
}

impl Device {
    fn new(profile: DeviceProfile) -> Device {
        let now = Instant::now();
        Device {
            profile,
            free_at: Mutex::new(&site::FS, (vec![now; profile.channels.max(1)], now)),
            ops: AtomicU64::new(0),
            busy_micros: AtomicU64::new(0),
        }
    }

    /// Occupies the channel that frees first for `cost` of operation `op`, and sleeps as long as
    /// the operation makes its caller wait: a read until it ends, an append until the device is
    /// at most [`WRITE_BEHIND`] behind, a sync (which starts once earlier appends are done) until
    /// it ends.
    fn charge(&self, op: Op, cost: Duration) {
        if cost.is_zero() {
            return;
        }
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.busy_micros.fetch_add(cost.as_micros() as u64, Ordering::Relaxed);
        let now = Instant::now();
        let wake = {
            let mut guard = self.free_at.lock();
            let (free, appended) = &mut *guard;
            let Some(slot) = free.iter_mut().min() else { return };
            let start = match op {
                Op::Sync => (*slot).max(*appended),
                Op::Read | Op::Append => *slot,
            };
            let end = start.max(now) + cost;
            *slot = end;
            match op {
                Op::Append => {
                    *appended = (*appended).max(end);
                    end.checked_sub(WRITE_BEHIND).unwrap_or(now)
                }
                Op::Read | Op::Sync => end,
            }
        };
        let wait = wake.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    /// The profile.
    pub fn profile(&self) -> DeviceProfile {
        self.profile
    }

    /// Operations charged so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    /// Time the device spent busy so far (summed over channels).
    pub fn busy(&self) -> Duration {
        Duration::from_micros(self.busy_micros.load(Ordering::Relaxed))
    }
}

/// What a charge is for (see [`Device::charge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Append,
    Sync,
}

/// A filesystem over `inner` whose files under some directories cost what their device's
/// profile says.
pub struct SlowFs {
    inner: Arc<dyn Fs>,
    devices: Vec<(PathBuf, Arc<Device>)>,
}

impl SlowFs {
    /// `inner` with each of `dirs` (and everything below it) on a device of its profile.
    pub fn new(inner: Arc<dyn Fs>, dirs: impl IntoIterator<Item = (PathBuf, DeviceProfile)>) -> SlowFs {
        let devices = dirs.into_iter().map(|(d, p)| (d, Arc::new(Device::new(p)))).collect();
        SlowFs { inner, devices }
    }

    /// The device of directory `dir`, as given to [`SlowFs::new`].
    pub fn device(&self, dir: &Path) -> Option<&Arc<Device>> {
        self.devices.iter().find(|(d, _)| d == dir).map(|(_, dev)| dev)
    }

    fn device_of(&self, path: &Path) -> Option<Arc<Device>> {
        // The longest matching directory wins, for nested tiers.
        self.devices
            .iter()
            .filter(|(d, _)| path.starts_with(d))
            .max_by_key(|(d, _)| d.as_os_str().len())
            .map(|(_, dev)| dev.clone())
    }
}

struct SlowReadable {
    inner: Arc<dyn ReadableFile>,
    device: Arc<Device>,
    /// Where the previous read ended: a read starting there needs no positioning.
    next: AtomicU64,
}

impl ReadableFile for SlowReadable {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let sequential = self.next.swap(offset + len as u64, Ordering::Relaxed) == offset;
        self.device.charge(Op::Read, self.device.profile.cost(!sequential, len));
        self.inner.read_at(offset, len)
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len();
        let sequential = self.next.swap(offset + len as u64, Ordering::Relaxed) == offset;
        self.device.charge(Op::Read, self.device.profile.cost(!sequential, len));
        self.inner.read_exact_at(offset, buf)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }
}

struct SlowWritable {
    inner: Box<dyn WritableFile>,
    device: Arc<Device>,
}

impl WritableFile for SlowWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.device.charge(Op::Append, self.device.profile.cost(false, data.len()));
        self.inner.append(data)
    }

    fn sync(&mut self) -> Result<()> {
        self.device.charge(Op::Sync, self.device.profile.read_latency);
        self.inner.sync()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }
}

impl Fs for SlowFs {
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let f = self.inner.create(path)?;
        Ok(match self.device_of(path) {
            Some(device) => Box::new(SlowWritable { inner: f, device }),
            None => f,
        })
    }

    fn open(&self, path: &Path) -> Result<Arc<dyn ReadableFile>> {
        let f = self.inner.open(path)?;
        Ok(match self.device_of(path) {
            Some(device) => Arc::new(SlowReadable { inner: f, device, next: AtomicU64::new(u64::MAX) }),
            None => f,
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename(from, to)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.inner.remove(path)
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.inner.list(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.inner.sync_dir(dir)
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>> {
        self.inner.lock(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::FaultFs;

    #[test]
    fn reads_on_a_slowed_directory_pay_its_profile_and_others_do_not() {
        let profile = DeviceProfile { read_latency: Duration::from_millis(5), bandwidth: 1_000_000, channels: 1 };
        let fs = SlowFs::new(Arc::new(FaultFs::new()), [(PathBuf::from("/slow"), profile)]);
        for p in ["/slow/a", "/fast/a"] {
            let mut f = fs.create(Path::new(p)).unwrap();
            f.append(&[7u8; 10_000]).unwrap();
            f.sync().unwrap();
        }
        let dev = fs.device(Path::new("/slow")).unwrap().clone();
        let after_writes = dev.ops();
        assert_eq!(after_writes, 2, "one append and one sync on the slow device");
        // Each read is timed twice: by the clock, which a loaded machine only ever stretches (a
        // sleep never returns early), and by the device's own account of its busy time, which
        // is exact and is what the orderings below compare.
        let time = |p: &str, reads: &[(u64, usize)]| {
            let f = fs.open(Path::new(p)).unwrap();
            let busy = dev.busy();
            let t = Instant::now();
            for &(off, len) in reads {
                assert_eq!(f.read_at(off, len).unwrap(), vec![7u8; len]);
            }
            (t.elapsed(), dev.busy() - busy)
        };
        let ms = Duration::from_millis;
        // Two random 1,000-byte reads: 2 × (5 ms + 1 ms).
        let (random, random_busy) = time("/slow/a", &[(5000, 1000), (0, 1000)]);
        assert!(random >= ms(12), "{random:?}");
        assert!(random_busy >= ms(12) && random_busy < ms(13), "{random_busy:?}");
        // The same two reads in sequence: one positioning only, 5 + 2 ms.
        let (sequential, sequential_busy) = time("/slow/a", &[(0, 1000), (1000, 1000)]);
        assert!(sequential >= ms(7), "{sequential:?}");
        assert!(sequential_busy >= ms(7) && sequential_busy < ms(8), "{sequential_busy:?} vs {random_busy:?}");
        // The other directory is not slowed: its reads keep the device idle.
        let (_, fast_busy) = time("/fast/a", &[(5000, 1000), (0, 1000)]);
        assert_eq!(fast_busy, Duration::ZERO);
        assert_eq!(dev.ops(), after_writes + 4);
        assert!(dev.busy() >= ms(19), "{:?}", dev.busy());
    }

    /// Appends are written behind: small ones cost no sleep, sustained ones are held to the
    /// bandwidth, and a sync waits for every append before it.
    #[test]
    fn appends_are_written_behind_at_the_devices_bandwidth() {
        let fs = |bandwidth| {
            let profile = DeviceProfile { read_latency: Duration::from_millis(5), bandwidth, channels: 1 };
            SlowFs::new(Arc::new(FaultFs::new()), [(PathBuf::from("/d"), profile)])
        };
        // A thousand 1-byte appends at 1 GB/s: a microsecond of device time in all. Sleeping for
        // each would take at least a thousand of the kernel's shortest sleeps (50 µs or more, so
        // 50 ms); the bound leaves a loaded machine room below that.
        let fast = fs(1_000_000_000);
        let mut f = fast.create(Path::new("/d/wal")).unwrap();
        let t = Instant::now();
        for _ in 0..1000 {
            f.append(&[1]).unwrap();
        }
        assert!(t.elapsed() < Duration::from_millis(45), "{:?}", t.elapsed());
        assert_eq!(fast.device(Path::new("/d")).unwrap().ops(), 1000);
        // Twenty 10,000-byte appends at 1 MB/s: 200 ms of device time, of which the writer may
        // run ahead by the write-behind window; the sync then waits for the rest and its latency.
        let slow = fs(1_000_000);
        let mut f = slow.create(Path::new("/d/sst")).unwrap();
        let t = Instant::now();
        for _ in 0..20 {
            f.append(&[2u8; 10_000]).unwrap();
        }
        let appended = t.elapsed();
        assert!(appended >= Duration::from_millis(200) - WRITE_BEHIND, "{appended:?}");
        f.sync().unwrap();
        assert!(t.elapsed() >= Duration::from_millis(205), "{:?}", t.elapsed());
        // A read queues behind nothing now, and pays its positioning.
        let t = Instant::now();
        assert_eq!(slow.open(Path::new("/d/sst")).unwrap().read_at(0, 4).unwrap(), vec![2u8; 4]);
        assert!(t.elapsed() >= Duration::from_millis(5), "{:?}", t.elapsed());
    }

    #[test]
    fn one_channel_makes_concurrent_reads_queue() {
        let profile = DeviceProfile { read_latency: Duration::from_millis(10), bandwidth: 0, channels: 1 };
        let fs = Arc::new(SlowFs::new(Arc::new(FaultFs::new()), [(PathBuf::from("/d"), profile)]));
        let mut f = fs.create(Path::new("/d/x")).unwrap();
        f.append(&[1u8; 64]).unwrap();
        let t = Instant::now();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let fs = fs.clone();
                std::thread::spawn(move || fs.open(Path::new("/d/x")).unwrap().read_at(8, 8).unwrap())
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), vec![1u8; 8]);
        }
        // Four reads one after another on the single channel: at least 40 ms in all.
        assert!(t.elapsed() >= Duration::from_millis(40), "{:?}", t.elapsed());
    }
}
