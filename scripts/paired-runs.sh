#!/usr/bin/env bash
# Paired runs of two commits: builds strata-bench at BASE and at HEAD (release), then runs the
# two binaries one after the other on the same workloads, round after round, alternating which
# goes first, and prints each pair's figures with HEAD's ratio to BASE. A change on a hot path
# is run against its parent this way before it lands, so a regression shows the day it comes.
#
#   scripts/paired-runs.sh [options] BASE HEAD
#
#   BASE, HEAD   commits (anything `git rev-parse` takes; `WORKTREE` builds the working tree as it
#                is, uncommitted changes included)
#   --rounds N   rounds of every workload (default 3)
#   --only LIST  workloads to run, comma-separated, of: ycsb-c1 ycsb-c2 ycsb-a1 ycsb-a2 write-amp
#                laser-hw engine (default: all)
#   --rows N     rows for ycsb and laser-hw (default 1000000)
#   --duration S measured seconds of ycsb (default 20)
#   --features F strata-bench's features for both builds (default none: strata alone runs)
#   --fast-build build DataFusion and the crates over it (the SQL layer, the server, the cluster)
#                unoptimized, as the `ci` profile does: the workloads here run none of their
#                code, and a commit then builds in minutes instead of half an hour; strata, its
#                dependencies and strata-bench are built as in `release`
#   --out DIR    where binaries, each run's results.json and the pair table go
#                (default target/paired/<base>-<head>)
#   --report     build and run nothing: print the table of the runs already in DIR again
#
# The builds share one target directory (target/paired/build), so the dependencies are built
# once; each commit is checked out in a worktree of its own under target/paired/src. The
# machine should be otherwise idle while the runs go on: only figures taken side by side, in
# the same round, are compared. The table is printed at the end and written to DIR/pairs.md;
# each line is one round of one workload: BASE's figure, HEAD's, and HEAD/BASE, with the
# direction that is better (higher for rates, lower for times).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

rounds=3
only="ycsb-c1,ycsb-c2,ycsb-a1,ycsb-a2,write-amp,laser-hw,engine"
rows=1000000
duration=20
features=""
fast=0
out=""
report=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --rows) rows=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --features) features=$2; shift 2 ;;
        --fast-build) fast=1; shift ;;
        --out) out=$2; shift 2 ;;
        --report) report=1; shift ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
if [ $# -ne 2 ]; then
    echo "usage: scripts/paired-runs.sh [options] BASE HEAD (see --help)" >&2
    exit 2
fi

# A commit's short name, or WORKTREE for the working tree as it is.
name_of() {
    if [ "$1" = WORKTREE ]; then echo WORKTREE; else git rev-parse --short=9 "$1^{commit}"; fi
}
base=$(name_of "$1")
head=$(name_of "$2")
out=${out:-target/paired/$base-$head}
mkdir -p "$out/runs" target/paired/src
out=$(cd "$out" && pwd)
build_dir=$root/target/paired/build

# With --fast-build: the crates the strata-alone workloads never run, unoptimized.
fast_config=()
if [ "$fast" = 1 ]; then
    for p in datafusion datafusion-catalog datafusion-catalog-listing datafusion-common datafusion-common-runtime \
        datafusion-datasource datafusion-datasource-arrow datafusion-datasource-csv datafusion-datasource-json \
        datafusion-datasource-parquet datafusion-distributed datafusion-execution datafusion-expr \
        datafusion-expr-common datafusion-functions datafusion-functions-aggregate \
        datafusion-functions-aggregate-common datafusion-functions-nested datafusion-functions-table \
        datafusion-functions-window datafusion-functions-window-common datafusion-optimizer \
        datafusion-physical-expr datafusion-physical-expr-adapter datafusion-physical-expr-common \
        datafusion-physical-optimizer datafusion-physical-plan datafusion-proto datafusion-proto-common \
        datafusion-proto-models datafusion-pruning datafusion-session datafusion-sql sqlparser parquet \
        strata-sql strata-pg strata-cli strata-py strata-cluster; do
        fast_config+=(--config "profile.release.package.\"$p\".opt-level=0")
    done
fi

# Builds strata-bench at commit $1 into $out/strata-bench-$1.
build() {
    local c=$1 src
    local bin=$out/strata-bench-$c
    if [ -x "$bin" ] && [ "$c" != WORKTREE ]; then
        echo "== $c: built already ($bin)"
        return
    fi
    if [ "$c" = WORKTREE ]; then
        src=$root
    else
        src=$root/target/paired/src/$c
        if [ ! -d "$src" ]; then
            git worktree add --detach "$src" "$c" >/dev/null
        fi
    fi
    echo "== building $c (release${features:+, features $features})"
    local t0=$SECONDS
    (cd "$src" && CARGO_TARGET_DIR=$build_dir cargo build --release --locked -q -p strata-bench \
        ${features:+--features "$features"} "${fast_config[@]}")
    cp "$build_dir/release/strata-bench" "$bin"
    echo "   $((SECONDS - t0)) s"
}
if [ "$report" = 0 ]; then
    build "$base"
    build "$head"
fi

# The command of workload $1 (strata alone), run from $out/runs/<dir>.
command_of() {
    case "$1" in
        ycsb-c1) echo "ycsb --workload c --threads 1 --rows $rows --duration $duration --systems strata" ;;
        ycsb-c2) echo "ycsb --workload c --threads 2 --rows $rows --duration $duration --systems strata" ;;
        ycsb-a1) echo "ycsb --workload a --threads 1 --rows $rows --duration $duration --systems strata" ;;
        ycsb-a2) echo "ycsb --workload a --threads 2 --rows $rows --duration $duration --systems strata" ;;
        write-amp) echo "write-amp --fanouts 10 --systems strata" ;;
        laser-hw) echo "laser-hw --rows $rows --layouts lifecycle --systems strata" ;;
        engine) echo "engine --systems strata" ;;
        *) echo "unknown workload $1" >&2; return 2 ;;
    esac
}

IFS=, read -r -a workloads <<< "$only"
for w in "${workloads[@]}"; do command_of "$w" >/dev/null; done
for r in $(seq 1 "$((report ? 0 : rounds))"); do
    for w in "${workloads[@]}"; do
        # Odd rounds run BASE first, even ones HEAD first, so a drift of the machine over a
        # round does not favour one side.
        if [ $((r % 2)) -eq 1 ]; then order="$base $head"; else order="$head $base"; fi
        for c in $order; do
            dir=$out/runs/$w-r$r-$c
            rm -rf "$dir"
            mkdir -p "$dir"
            echo "== round $r/$rounds, $w, $c ($(date +%T))"
            # shellcheck disable=SC2046
            if ! "$out/strata-bench-$c" $(command_of "$w") --out "$dir" > "$dir/log" 2>&1; then
                echo "   failed; the end of its log:"
                tail -20 "$dir/log"
            fi
            rm -rf "$dir/data"
        done
    done
done

python3 - "$out" "$base" "$head" "$rounds" "$only" <<'EOF' | tee "$out/pairs.md"
import json, os, re, statistics, sys

out, base, head, rounds, only = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split(",")
# The figures printed per workload: regular expressions a metric's whole name matches.
FIGURES = {
    "ycsb": ["run throughput", "read p50", "read p99", "update p99", "load throughput"],
    "write-amp": [r"fanout 10, .*: writes/s", r"fanout 10, .*: bytes written", r"fanout 10, .*: write stalls"],
    "laser-hw": ["load", "Q2a get 1-30 mean", "Q3 max mean", "Q4 sum mean", "Q1-Q5 total time"],
    "engine": [r"insert \(single rows\)", r"insert \(batches of 1000\)", r"insert \(100 \+ fsync\)",
               "100 single gets", "multi_get of 100"],
}

def figures(path):
    try:
        doc = json.load(open(path))
    except (OSError, ValueError):
        return {}
    return {(r["metric"]): (r["value"], r["unit"]) for r in doc["results"] if r["system"] == "strata"}

def fmt(v):
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"

print(f"# Paired runs: {base} (base) and {head} (head), {rounds} rounds\n")
print("| workload | metric | round | base | head | head/base | better |")
print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
for w in only:
    family = "ycsb" if w.startswith("ycsb") else w
    for pattern in FIGURES[family]:
        ratios = []
        for r in range(1, rounds + 1):
            a = figures(os.path.join(out, "runs", f"{w}-r{r}-{base}", "results.json"))
            b = figures(os.path.join(out, "runs", f"{w}-r{r}-{head}", "results.json"))
            names = [m for m in a if re.fullmatch(pattern, m) and m in b]
            if not names:
                continue
            metric = names[0]
            (x, unit), (y, _) = a[metric], b[metric]
            higher = unit.endswith("/s")
            ratio = y / x if x else float("nan")
            ratios.append(ratio)
            print(f"| {w} | {metric} ({unit}) | {r} | {fmt(x)} | {fmt(y)} | {ratio:.3f} | "
                  f"{'higher' if higher else 'lower'} |")
        if len(ratios) > 1:
            print(f"| {w} | {metric} | median | | | **{statistics.median(ratios):.3f}** | |")
EOF
echo "(written to $out/pairs.md)"
