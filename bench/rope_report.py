#!/usr/bin/env python3
"""Markdown tables for docs/perf.md from `roformer bench rope --json` output (standard library only).

    build/release/tools/roformer bench rope --json > ours.json
    python3 bench/rope_report.py ours.json
    python3 bench/rope_report.py --targets ours.json [--ggml ggml.json] [--torch torch.json]

--targets prints issue 17's target table instead (forward, interleaved, table mode): floor, ours,
fraction of the floor (time over the floor for decode), PyTorch's best formulation and ggml's
ggml_rope_ext from the peer scripts' --json files of the same run (bench/rope_side_by_side.sh), and
then every case each peer ran, counted: where librope is faster and where it is not.
"""
import argparse
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


def targets(ours_path, ggml_path, torch_path):
    data = json.load(open(ours_path))
    avx2 = data.get("cpu_target") == "AVX2"
    floors = {(f["case"], f["dtype"], f["threads"], f["name"] == "inplace_scale"): f["ms"] for f in data["floor"]}
    res = {(r["case"], r["dtype"], r["layout"], r["inplace"], r["threads"]): r["ms"] for r in data["results"]
           if r["direction"] == "fwd" and r["mode"] == "table"}
    ggml = {}
    if ggml_path:
        for r in json.load(open(ggml_path))["results"]:
            ggml[(r["case"], "f32", r["layout"], r["inplace"], r["threads"])] = r["ggml_ms"]
    torch = {}
    if torch_path:
        for r in json.load(open(torch_path))["results"]:
            if r["direction"] == "fwd":
                torch[(r["case"], r["dtype"], r["layout"], r["threads"])] = (r["ms"], r["variant"])
    print(f"SIMD target: {data.get('cpu_target', '?')}\n")
    print("| case | floor ms | ours ms | of floor | target | met? | PyTorch best ms (out of place) | ggml ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = [("prefill", dt, place, t) for dt in ("f32", "bf16") for place in (True, False) for t in (1, 2)]
    rows += [("decode", "f32", True, 1), ("decode", "bf16", True, 1)]
    for case, dt, place, t in rows:
        fl, ms = floors[(case, dt, t, place)], res[(case, dt, "interleaved", place, t)]
        if case == "decode":
            want = 1.3 if dt == "f32" else 2.0
            frac, target, met = f"{ms / fl:.2f}×", f"≤ {want}×", ms / fl <= want
            fl_s, ms_s = f"{fl * 1e3:.1f} µs", f"{ms * 1e3:.1f} µs"
        else:
            want = 0.75 if dt == "bf16" else 0.85 if avx2 else 0.9
            frac, target, met = f"{100 * fl / ms:.0f}%", f"≥ {100 * want:.0f}%", fl / ms >= want
            fl_s, ms_s = f"{fl:.2f}", f"{ms:.2f}"
        unit = (1e3, " µs") if case == "decode" else (1, "")
        tv = torch.get((case, dt, "interleaved", t))
        tv_s = f"{tv[0] * unit[0]:.3g}{unit[1]} ({tv[1]})" if tv else "-"
        gv = ggml.get((case, dt, "interleaved", place, t))
        gv_s = f"{gv * unit[0]:.3g}{unit[1]}" if gv else "-"
        name = f"{case} {dt} {'in place' if place else 'out of place'}, {t} thread{'s' if t > 1 else ''}"
        print(f"| {name} | {fl_s} | {ms_s} | {frac} | {target} | {'yes' if met else '**no**'} | {tv_s} | {gv_s} |")
    # Every case each peer ran: ratio = peer / ours (> 1: librope faster).
    for peer, table, ours_of in (
            ("PyTorch (its best formulation, out of place) / our out of place", torch,
             lambda k: res.get((k[0], k[1], k[2], False, k[3]))),
            ("ggml / ours (same place)", ggml, lambda k: res.get(k))):
        ratios = sorted(((v[0] if isinstance(v, tuple) else v) / ours_of(k), k) for k, v in table.items() if ours_of(k))
        if ratios:
            slower = [f"{'/'.join(str(x) for x in k)} {r:.2f}×".replace("True", "in").replace("False", "out")
                      for r, k in ratios if r <= 1]
            print(f"\n{peer}: {len(ratios) - len(slower)} of {len(ratios)} cases faster, "
                  f"ratio {ratios[0][0]:.2f}–{ratios[-1][0]:.2f}×" + (f"; not faster: {', '.join(slower)}" if slower else ""))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--targets":
        ap = argparse.ArgumentParser()
        ap.add_argument("--targets", required=True, metavar="OURS.json")
        ap.add_argument("--ggml")
        ap.add_argument("--torch")
        a = ap.parse_args()
        targets(a.targets, a.ggml, a.torch)
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "ours.json")
