#!/usr/bin/env python3
"""Prints a strata-bench results.json as a Markdown table: one line per metric, one column per
system (strata's variants as strata:<variant>), then strata/peer ratios against strata's first
column, oriented so that above 1 means strata is better (higher for units ending in /s, lower
otherwise). Ratios below 1 are set in bold.

    scripts/results-table.py bench-out/results.json [--metrics 'Q3,Q4'] [--columns 'strata:row,rocksdb']
        [--no-ratios]
"""

import argparse
import json


def label(r):
    return f"{r['system']}:{r['variant']}" if r.get("variant") else r["system"]


def number(v):
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--metrics", help="comma-separated substrings; keep metrics containing one of them")
    ap.add_argument("--columns", help="comma-separated column labels to show (ratios still use strata's first)")
    ap.add_argument("--no-ratios", action="store_true", help="leave out the strata/peer ratios")
    a = ap.parse_args()
    doc = json.load(open(a.results))
    columns, metrics, cell = [], [], {}
    for r in doc["results"]:
        c = label(r)
        if c not in columns:
            columns.append(c)
        m = (r["metric"], r["unit"])
        if m not in metrics:
            metrics.append(m)
        cell[(c, r["metric"])] = r["value"]
    if a.metrics:
        keep = a.metrics.split(",")
        metrics = [m for m in metrics if any(k in m[0] for k in keep)]
    ours = next((c for c in columns if c.split(":")[0] == "strata"), None)
    peers = [] if a.no_ratios else [c for c in columns if c.split(":")[0] != "strata"]
    shown = a.columns.split(",") if a.columns else columns
    head = ["metric", "unit"] + shown + [f"{ours}/{p}" for p in peers if ours]
    print("| " + " | ".join(head) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in head[2:]) + " |")
    for metric, unit in metrics:
        row = [metric, "µs" if unit == "us" else unit]
        row += [number(cell[(c, metric)]) if (c, metric) in cell else "-" for c in shown]
        for p in peers if ours else []:
            o, t = cell.get((ours, metric)), cell.get((p, metric))
            if not o or not t:
                row.append("-")
                continue
            ratio = o / t if unit.endswith("/s") else t / o
            text = f"{ratio:.3f}x" if ratio < 0.1 else f"{ratio:.2f}x"
            row.append(f"**{text}**" if ratio < 0.995 else text)
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
