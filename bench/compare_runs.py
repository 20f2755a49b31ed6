#!/usr/bin/env python3
"""Before/after ratios from scripts/gpu-before-after's logs: per benchmark row, the median over rounds of each
side's time, and after / before. Rows are matched by problem and variant (the standard table's JSON) or by shape,
inputs and variant (bench --exp-matmul's text)."""
import glob
import json
import os
import statistics
import sys


def standard(path):
    with open(path) as f:
        return {(r["problem"], r["spec"]): r["ms"] for r in json.load(f)["rows"]}


def exp_matmul(path):
    rows = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            # shape inputs variant(words) ms terms/s max_rel mean_rel repaired checked: a data row starts with a
            # shape like 64x512x512x512
            if len(parts) >= 9 and parts[0].count("x") == 3 and parts[0][0].isdigit():
                try:
                    rows[(parts[0], parts[1], " ".join(parts[2:-6]))] = float(parts[-6])
                except ValueError:
                    pass
    return rows


def tune(path):
    # "  median ms  candidate" rows: the time, then the candidate's spec (and a marker on the best)
    rows = {}
    with open(path) as f:
        for line in f:
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[1].startswith("semiring="):
                try:
                    rows[parts[1].split("  [")[0].strip()] = float(parts[0])
                except ValueError:
                    pass
    return rows


def collect(out, pattern, read):
    runs = {"before": [], "after": []}
    for side in runs:
        for path in sorted(glob.glob(os.path.join(out, pattern.format(side=side)))):
            try:
                runs[side].append(read(path))
            except (OSError, ValueError, KeyError):
                print(f"unreadable: {path}")
    return runs


def table(title, runs):
    print(f"== {title}: median over {len(runs['before'])} / {len(runs['after'])} rounds")
    keys = [k for k in (runs["before"][0] if runs["before"] else {})]
    ratios = []
    for key in keys:
        b = [r[key] for r in runs["before"] if key in r]
        a = [r[key] for r in runs["after"] if key in r]
        if not a or not b:
            print(f"  missing after: {key}")
            continue
        mb, ma = statistics.median(b), statistics.median(a)
        ratios.append(ma / mb)
        spread = max(b) / min(b) if min(b) > 0 else float("nan")
        print(f"  {ma / mb:6.3f}  before {mb:9.4f} ms  after {ma:9.4f} ms  (before's spread {spread:5.3f})  "
              f"{(key if isinstance(key, str) else ' '.join(str(k) for k in key))[:150]}")
    if ratios:
        print(f"  after/before: geometric mean {statistics.geometric_mean(ratios):.3f}, "
              f"min {min(ratios):.3f}, max {max(ratios):.3f} over {len(ratios)} rows")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "before-after-out"
    table("jitbmm bench", collect(out, "bench-{side}-*.json", standard))
    table("jitbmm bench --exp-matmul", collect(out, "em-{side}-*.txt", exp_matmul))
    tunes = sorted({os.path.basename(p).rsplit("-", 1)[1] for p in glob.glob(os.path.join(out, "tune-*-*-*.txt"))})
    for t in tunes:
        table(f"jitbmm tune #{t.split('.')[0]}", collect(out, "tune-{side}-*-" + t, tune))


if __name__ == "__main__":
    main()
