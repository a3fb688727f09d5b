#!/usr/bin/env bash
# Installs what strata-bench's peers need and builds strata-bench with them. Idempotent: what is
# already installed is left alone. Run from anywhere inside the repository.
#
#   sqlite    nothing to install (rusqlite builds its bundled SQLite with the C compiler)
#   postgres  Debian's PostgreSQL 15 server (initdb, pg_ctl); each run starts a private cluster
#   rocksdb   clang and libclang-dev, to build the rocksdb crate's bundled RocksDB (about 8 minutes
#             on 2 cores, once)
#   duckdb    a Python virtual environment in target/peers-venv with the PyPI wheels duckdb==1.5.5,
#             duckdb-extension-tpch==1.5.5 (TPC-H data and reference answers) and pyarrow
#             (seconds; strata-bench runs DuckDB in a helper process with it)
#   charts    fonts-dejavu-core, the font the PNG charts are labelled with
set -euo pipefail

cd "$(dirname "$0")/.."

packages=(postgresql-15 clang libclang-dev fonts-dejavu-core python3-venv)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
    echo "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "Debian packages present: ${packages[*]}"
fi

test -x /usr/lib/postgresql/15/bin/initdb || { echo "initdb not found under /usr/lib/postgresql/15/bin" >&2; exit 1; }
# As root the benchmark runs initdb as the postgres user, which the package creates.
if [ "$(id -u)" -eq 0 ]; then id postgres >/dev/null; fi

venv=target/peers-venv
if ! "$venv/bin/python3" -c 'import duckdb, duckdb_extension_tpch, pyarrow, sys; sys.exit(duckdb.__version__ != "1.5.5")' 2>/dev/null; then
    echo "making $venv with duckdb 1.5.5, its tpch extension and pyarrow"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "duckdb==1.5.5" "duckdb-extension-tpch==1.5.5" pyarrow
else
    echo "$venv has duckdb 1.5.5, its tpch extension and pyarrow"
fi

echo "building strata-bench with every peer"
cargo build --release --locked -p strata-bench --features peers
echo "done: target/release/strata-bench ycsb --systems strata,rocksdb,postgres,duckdb,sqlite"
echo "      target/release/strata-bench tpch --sf 1"
