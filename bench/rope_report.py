#!/usr/bin/env python3
"""Markdown tables for docs/perf.md from `roformer bench rope --json` output (standard library only).

    build/release/tools/roformer bench rope --json > ours.json
    python3 bench/rope_report.py ours.json
"""
import json
import sys


def main(path):
    data = json.load(open(path))
    print(f"SIMD target: {data.get('cpu_target', '?')}\n")
    print("Memory floor (same bytes, same threads):\n")
    print("| case | dtype | threads | in-place scale ms | GB/s | copy ms | GB/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    floors = {}
    for f in data["floor"]:
        floors[(f["case"], f["dtype"], f["threads"], f["name"])] = f
    for case in ("prefill", "decode", "decode_q"):
        for dtype in ("f32", "bf16"):
            for t in (1, 2):
                a = floors.get((case, dtype, t, "inplace_scale"))
                b = floors.get((case, dtype, t, "stream_copy"))
                if a and b:
                    print(f"| {case} | {dtype} | {t} | {a['ms']:.4f} | {a['gbps']:.1f} | {b['ms']:.4f} | {b['gbps']:.1f} |")
    print("\nlibrope, forward (ms; % of the matching floor in parentheses):\n")
    print("| case | dtype | layout | place | threads | table | on the fly |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    res = {}
    for r in data["results"]:
        res[(r["case"], r["dtype"], r["layout"], r["direction"], r["inplace"], r["mode"], r["threads"])] = r
    for case in ("prefill", "decode", "decode_q"):
        for dtype in ("f32", "bf16"):
            for layout in ("interleaved", "half"):
                for inplace in (True, False):
                    for t in (1, 2):
                        cells = []
                        for mode in ("table", "on_the_fly"):
                            r = res.get((case, dtype, layout, "fwd", inplace, mode, t))
                            cells.append(f"{r['ms']:.4f} ({100 * r['floor_fraction']:.0f}%)" if r else "-")
                        place = "in" if inplace else "out"
                        print(f"| {case} | {dtype} | {layout} | {place} | {t} | {cells[0]} | {cells[1]} |")
    print("\nBackward / forward time ratio (table mode, in place):\n")
    ratios = []
    for key, r in res.items():
        case, dtype, layout, direction, inplace, mode, t = key
        if direction == "bwd" and mode == "table" and inplace:
            f = res.get((case, dtype, layout, "fwd", inplace, mode, t))
            if f:
                ratios.append(r["ms"] / f["ms"])
    if ratios:
        ratios.sort()
        print(f"median {ratios[len(ratios) // 2]:.2f}, range {ratios[0]:.2f}–{ratios[-1]:.2f} over {len(ratios)} pairs")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ours.json")
