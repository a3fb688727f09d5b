#!/bin/bash
# pgbench's own schema and scripts, unmodified, against PostgreSQL 15 (fsync, synchronous_commit
# and full_page_writes off) and `strata serve`, side by side: `pgbench -i -s SCALE`, then
# `pgbench -S` (simple and prepared) with `-c 8 -j 2 -T T`, and the default TPC-B script for
# TB seconds (default T).
# Needs Debian's postgresql-15 (for pgbench, initdb and the server) and a release build of the
# CLI (`cargo build --release -p strata-cli`); run as root (PostgreSQL runs as user postgres).
# Usage: SCALE=10 T=30 TB=60 scripts/pgbench-default.sh     (files under /tmp/pgb)
# (strata-bench's `pgbench` workload runs its own TPC-B-like script with retries.)
set -u
mkdir -p /tmp/pgb
PGBIN=/usr/lib/postgresql/15/bin
STRATA=${STRATA:-$(cd "$(dirname "$0")/.." && pwd)/target/release/strata}
SCALE=${SCALE:-10}
T=${T:-30}
TB=${TB:-$T}
rm -rf /tmp/pgb/pgdata /tmp/pgb/strata
mkdir -p /tmp/pgb/pgdata && chown postgres /tmp/pgb/pgdata
su postgres -c "$PGBIN/initdb -D /tmp/pgb/pgdata -A trust -U strata >/dev/null"
su postgres -c "$PGBIN/pg_ctl -D /tmp/pgb/pgdata -o '-p 54329 -k /tmp -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c listen_addresses=127.0.0.1' -l /tmp/pgb/pgdata/pg.log start >/dev/null"
$STRATA --db /tmp/pgb/strata serve --pg 127.0.0.1:54330 > /tmp/pgb/strata.log 2>&1 &
SPID=$!
sleep 3
for sys in postgres:54329 strata:54330; do
  name=${sys%%:*}; port=${sys##*:}
  echo "== $name: pgbench -i -s $SCALE"
  /usr/bin/time -f "load %e s, max RSS of pgbench %M KB" pgbench -i -s $SCALE -h 127.0.0.1 -p $port -U strata postgres 2>&1 | tail -2
done
for mode in simple prepared; do
  for sys in postgres:54329 strata:54330; do
    name=${sys%%:*}; port=${sys##*:}
    echo "== $name: pgbench -S -M $mode -c 8 -j 2 -T $T"
    pgbench -S -M $mode -c 8 -j 2 -T $T -h 127.0.0.1 -p $port -U strata postgres 2>&1 | grep -E "^tps|failed|latency average"
  done
done
for sys in postgres:54329 strata:54330; do
  name=${sys%%:*}; port=${sys##*:}
  echo "== $name: pgbench (TPC-B) -c 8 -j 2 -T $TB"
  pgbench -c 8 -j 2 -T $TB -h 127.0.0.1 -p $port -U strata postgres 2>&1 | grep -E "^tps|failed|processed|latency average"
done
kill $SPID
su postgres -c "$PGBIN/pg_ctl -D /tmp/pgb/pgdata stop >/dev/null"
