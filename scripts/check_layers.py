#!/usr/bin/env python3
# The layering check (ctest: layering). LAYERS below is the one table of which layer of src/ may
# include which: every src/**/*.h and *.cc (-inl.h included) is scanned for #include "x/..." (and
# HWY_TARGET_INCLUDE "x/...") lines, and each include of a layer outside the including layer's
# allowed set is reported as one line, file:line: what is wrong. The CMake targets of src/ are held to
# the same table (a target may link only the libraries of layers it may include). Exit status 1 on any
# violation. `--self-test` plants wrong includes in a copy of src/ and checks that they are reported
# (ctest: layering_self_test). docs/engine.md ("Layers") describes the graph.
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# layer: the layers it builds on directly (its CMake target links theirs). A layer may include its
# own headers and those of every layer reachable from it here; nothing else. Bottom to top.
LAYERS = {
    "rope": [],                          # librope: include/rope/ (public) and src/rope/ (internal)
    "base": [],                          # base::Error, counter-based RNG, UTF-8
    "ops": ["rope", "base"],
    "io": ["base"],
    "plot": [],
    "analysis": ["rope"],
    "model": ["ops", "io", "rope"],
    "text": ["io", "base"],
    "data": ["text", "io", "base"],      # text: the corpus streams its file through text::CharTokenizer
    "load": ["model", "text"],           # the one loader of model directories: a model and its tokenizer
    "infer": ["load"],                   # inference pipelines over a loaded model: embed, classify, fill-mask, NER, QA, translate
    "train": ["infer", "data"],          # a run's predictions and validation BLEU go through the inference pipelines; plots are drawn by the command line (report hooks)
    "server": ["infer"],                 # roformer serve's HTTP server: one model thread over infer::Pipeline
}

# CMake targets of src/ → their layer (for the link check).
TARGETS = {f"roformer_{layer}": layer for layer in LAYERS if layer != "rope"}
TARGETS.update({"rope_static": "rope", "rope": "rope", "rope_objects": "rope"})
FORBIDDEN_IN_SRC = {"rope_internal": "librope's internal headers are for tests and the command line only"}

INCLUDE_RE = re.compile(r'^\s*#\s*(?:include|define\s+HWY_TARGET_INCLUDE)\s*"([^"]+)"')


def closure(layer):
    """The layers `layer` may include: itself and everything reachable through LAYERS."""
    seen, todo = {layer}, [layer]
    while todo:
        for dep in LAYERS[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def table_errors():
    errors = []
    for layer, deps in LAYERS.items():
        for dep in deps:
            if dep not in LAYERS:
                errors.append(f"{__file__}: layer {layer} builds on unknown layer {dep}")
            elif layer in closure(dep):
                errors.append(f"{__file__}: the layer table has a cycle: {layer} → {dep} → ... → {layer}")
    return errors


def layer_of_include(root, src_file, inc):
    """The layer `inc` (as written in src_file) names, or None for a header outside src/ and include/."""
    here = os.path.dirname(src_file)
    candidate = os.path.normpath(os.path.join(here, inc))
    if os.path.exists(candidate):  # the compiler looks beside the including file first
        rel = os.path.relpath(candidate, root).split(os.sep)
        if len(rel) >= 2 and rel[0] in ("src", "include"):
            return rel[1]
        return None
    first = inc.split("/")[0]
    if "/" in inc and first in LAYERS:
        return first
    return None  # a library's header (hwy/..., nlohmann/...) written with quotes


def check(root):
    """Every violation under root, as 'file:line: message' strings."""
    errors = table_errors()
    src = os.path.join(root, "src")
    allowed = {layer: closure(layer) for layer in LAYERS}
    for layer in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, layer)) and layer not in LAYERS:
            errors.append(f"src/{layer}: not in the layer table of scripts/check_layers.py")
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            layer = rel.split(os.sep)[1]
            if layer not in LAYERS:
                continue
            if name == "CMakeLists.txt":
                errors += cmake_errors(path, rel, layer, allowed[layer])
                continue
            if not (name.endswith(".h") or name.endswith(".cc")):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE_RE.match(line)
                    if not m:
                        continue
                    to = layer_of_include(root, path, m.group(1))
                    if to is None or to in allowed[layer]:
                        continue
                    if to not in LAYERS:
                        why = "which is not in the layer table"
                    elif layer in closure(to):
                        why = "which is above it"
                    else:
                        why = "which is not below it"
                    may = ", ".join(sorted(allowed[layer] - {layer})) or "nothing"
                    errors.append(f"{rel}:{lineno}: layer {layer} includes {m.group(1)} (layer {to}), {why} "
                                  f"({layer} may include: {may})")
    return errors


def cmake_errors(path, rel, layer, allowed):
    """target_link_libraries lines of src/<layer>/CMakeLists.txt that link a layer `layer` may not use."""
    errors = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for m in re.finditer(r"target_link_libraries\s*\(([^)]*)\)", text, re.S):
        lineno = text.count("\n", 0, m.start()) + 1
        words = m.group(1).split()
        for word in words[1:]:
            if word in FORBIDDEN_IN_SRC:
                errors.append(f"{rel}:{lineno}: {words[0]} links {word}: {FORBIDDEN_IN_SRC[word]}")
            elif word in TARGETS and TARGETS[word] not in allowed:
                errors.append(f"{rel}:{lineno}: {words[0]} (layer {layer}) links {word} (layer {TARGETS[word]}), "
                              f"which layer {layer} may not use")
    return errors


def plant(root, rel, after, text):
    path = os.path.join(root, rel)
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(after)) + 1
    lines.insert(i, text + "\n")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return f"{rel}:{i + 1}:"


def self_test(root):
    """The checker passes a copy of src/ and fails it once wrong includes are planted."""
    with tempfile.TemporaryDirectory(prefix="check_layers_") as tmp:
        for d in ("src", "include"):
            shutil.copytree(os.path.join(root, d), os.path.join(tmp, d), symlinks=True)
        clean = check(tmp)
        if clean:
            print("self-test: the unmodified copy already fails:\n" + "\n".join(clean))
            return 1
        expect = [
            (plant(tmp, "src/ops/dropout.cc", "#include", '#include "infer/pipeline.h"'), "layer ops includes infer/pipeline.h"),
            (plant(tmp, "src/data/mlm.cc", "#include", '#include "../model/config.h"'), "layer data includes ../model/config.h"),
            (plant(tmp, "src/base/random.h", "#pragma once", '#include "io/weights.h"'), "layer base includes io/weights.h"),
        ]
        with open(os.path.join(tmp, "src/text/CMakeLists.txt"), "a", encoding="utf-8") as f:
            f.write("target_link_libraries(roformer_text PRIVATE roformer_data)\n")
        expect.append(("src/text/CMakeLists.txt:", "roformer_text (layer text) links roformer_data"))
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", tmp],
                             capture_output=True, text=True)
        print(f"self-test: planted {len(expect)} violations; the checker says (status {run.returncode}):")
        print(run.stdout, end="")
        ok = run.returncode == 1
        for where, what in expect:
            if not any(line.startswith(where) and what in line for line in run.stdout.splitlines()):
                print(f"self-test: FAIL: no report starting '{where}' with '{what}'")
                ok = False
        print("self-test: " + ("ok" if ok else "FAIL"))
        return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description="Checks that src/ follows the layer graph (LAYERS).")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the checkout (holding src/ and include/)")
    ap.add_argument("--self-test", action="store_true", help="plant wrong includes in a copy and expect failures")
    args = ap.parse_args()
    if args.self_test:
        return self_test(args.root)
    errors = check(args.root)
    for e in errors:
        print(e)
    if errors:
        print(f"layering: {len(errors)} violation(s); the allowed graph is LAYERS in scripts/check_layers.py")
        return 1
    print(f"layering: ok ({len(LAYERS)} layers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
