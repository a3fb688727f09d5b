#!/usr/bin/env bash
# YCSB C, B, A and write-only at 16, 12, 8, 4 and 1 client threads, strata beside RocksDB, one
# run per line (issue 39's many-core table). Made for a lent many-core machine with no network:
# put a stripped, xz-compressed release binary built with `--features rocksdb` (or `peers`)
# beside this script as `strata-bench.xz`, carry the folder there, and run
#   OUT=<dir for results> DUR=5 bash many-core-ycsb.sh
# It writes $OUT/ycsb.log (every run's table, with --lock-waits) and $OUT/results.tar (each
# run's results.json). With 1,000,000 rows and DUR=5 the 20 runs take about eight minutes on
# 16 cores.
set -u
cd "$(dirname "$0")"
: "${OUT:?set OUT to the directory for results}"
if [ -f strata-bench.xz ]; then xz -d -T4 -f strata-bench.xz; fi
chmod +x strata-bench
log="$OUT/ycsb.log"
{ nproc; free -g | head -2; uname -a; } > "$log" 2>&1
ldd ./strata-bench | grep -i "not found" >> "$log" 2>&1
dur=${DUR:-5}
# Most threads first: the 16-thread lines are the ones the targets name, so a run cut short by
# a time limit loses the single-thread lines, not those.
for t in 16 12 8 4 1; do
  for w in c b a write-only; do
    echo "=== workload $w threads $t (started $(date +%T))" >> "$log"
    out="/tmp/many-core-$w-$t"
    ./strata-bench ycsb --workload "$w" --threads "$t" --rows 1000000 --duration "$dur" \
      --systems strata,rocksdb --lock-waits --out "$out" >> "$log" 2>/tmp/many-core-err \
      || { echo "exit $?:"; tail -20 /tmp/many-core-err; } >> "$log"
    cp "$out/results.json" "/tmp/many-core-res-$w-$t.json" 2>/dev/null
    rm -rf "$out"
  done
done
tar -C /tmp -cf "$OUT/results.tar" $(cd /tmp && ls many-core-res-*.json)
