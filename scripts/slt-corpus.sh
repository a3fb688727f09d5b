#!/bin/bash
# SQLite's sqllogictest corpus through `strata serve`, over the simple and the extended protocol,
# counting records that pass (tools/slt-corpus; sqllogictest's runner and its PostgreSQL engines).
# The corpus is not part of this repository: CORPUS is a checkout of SQLite's sqllogictest
# (its `test/` directory holds select1.test ... and random/, index/).
# The sample: select1-5.test, and from every directory of random/ and index/ that holds test
# files, slt_good_0.test (or the lowest-numbered slt_good file the checkout has).
# Records marked `skipif postgresql` are skipped, as the corpus intends for PostgreSQL.
# Usage: CORPUS=/path/to/sqllogictest scripts/slt-corpus.sh [simple|extended ...]
#        (needs `cargo build --release -p strata-cli`; failures go to /tmp/slt-corpus-<protocol>.txt)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
: "${CORPUS:?CORPUS must name a checkout of the SQLite sqllogictest repository}"
STRATA=${STRATA:-$ROOT/target/release/strata}
PROTOCOLS=${*:-simple extended}
(cd "$ROOT/tools/slt-corpus" && CARGO_TARGET_DIR="$ROOT/target/slt-corpus" cargo build --release --quiet)
files=("$CORPUS"/test/select[1-5].test)
for dir in $(find "$CORPUS/test/random" "$CORPUS/test/index" -name 'slt_good_*.test' -printf '%h\n' | sort -u); do
  files+=("$(ls "$dir"/slt_good_*.test | sort -V | head -1)")
done
for protocol in $PROTOCOLS; do
  echo "== $protocol protocol, ${#files[@]} files"
  "$ROOT/target/slt-corpus/release/slt-corpus" --strata "$STRATA" --protocol "$protocol" --label postgresql \
    --failures "/tmp/slt-corpus-$protocol.txt" "${files[@]}" || true
done
