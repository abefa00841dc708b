#!/usr/bin/env python3
"""The documentation's commands, run as written (ctest docs_commands; docs/reliability.md, "Docs test").

Every fenced block whose info string is `sh run` in README.md and docs/**/*.md is runnable: a reader
copy-pastes it, after the main job, in the repository's root. This script runs them that way:

    run_docs.py --root REPO --roformer BIN --work DIR [--python PY] [--file README.md ...] [--list]

The work directory stands in for a fresh clone after `scripts/run.sh`: `roformer` (BIN) on the PATH,
`scripts/` and `bench/` of REPO, `data/kjv.txt` (REPO's, from scripts/corpus.sh), `runs/kjv`
linking to a run of `roformer train` with the main job's steps, checkpoints and corpus on a smaller
model (the commands read its files, not its quality), and `.venv`, the Python environment with the
clients that the README has the reader make. The blocks of one file run in order in one
bash, with `set -euo pipefail`, so a server started by one block answers the next; each block is
announced as FILE:LINE, and a failing command fails the test naming that block. Processes a file
leaves behind (a server not stopped) are killed and fail the test: the docs must stop what they
start. That `.venv` is the first of $ROFORMER_PYTHON, build/hf-venv's python and python3 that imports
openai and huggingface_hub (a virtual environment linked whole, another interpreter as .venv/bin/python). Without data/kjv.txt or such a Python the test skips
(exit 77) and says how to get them; with ROFORMER_REQUIRE_HF=1 (CI) a skip is a failure.
"""
import argparse
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


def runnable_blocks(path: pathlib.Path):
    """[(line of the block's first command, text)] of the `sh run` blocks of a Markdown file."""
    blocks, lines = [], path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).split()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        if j == len(lines):
            raise SystemExit(f"{path}:{i + 1}: the fenced block opened here is never closed")
        if info[:2] == ["sh", "run"]:
            body = [l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j]]
            blocks.append((i + 2, "\n".join(body)))
        i = j + 1
    return blocks


def doc_files(root: pathlib.Path):
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def prepare(root: pathlib.Path, work: pathlib.Path, roformer: pathlib.Path, python: str, env: dict):
    """The fresh clone after the main job, in `work`."""
    if work.exists():
        shutil.rmtree(work)
    (work / "data").mkdir(parents=True)
    (work / "bin").mkdir()
    (work / "bin" / "roformer").symlink_to(roformer.resolve())
    interpreter = pathlib.Path(shutil.which(python)).absolute()
    if (interpreter.parent.parent / "pyvenv.cfg").is_file():  # a venv works only through its own path
        (work / ".venv").symlink_to(interpreter.parent.parent)
    else:
        (work / ".venv" / "bin").mkdir(parents=True)
        (work / ".venv" / "bin" / "python").symlink_to(interpreter)
    for name in ("scripts", "bench"):
        (work / name).symlink_to(root / name)
    (work / "data" / "kjv.txt").symlink_to(root / "data" / "kjv.txt")
    if (root / "data" / "downloads").is_dir():  # scripts/datasets.sh's downloads, kept between runs
        (work / "data" / "downloads").symlink_to(root / "data" / "downloads")
    # The main job's run: its steps (600), evaluation and checkpoints (250, 500, 600), 2 layers of 64.
    subprocess.run(["roformer", "train", "--data", "data/kjv.txt", "--out", "runs/kjv-docs", "--layers", "2",
                    "--hidden", "64", "--heads", "2", "--ff", "128", "--batch", "4", "--eval-batches", "4",
                    "--no-progress"], cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)
    (work / "runs" / "kjv").symlink_to("kjv-docs")


def run_file(path: pathlib.Path, root: pathlib.Path, work: pathlib.Path, env: dict, grace_s: float = 30) -> bool:
    rel = path.relative_to(root)
    blocks = runnable_blocks(path)
    if not blocks:
        return True
    script = ["set -euo pipefail"]
    for line, text in blocks:
        script.append(f"echo '== {rel}:{line}' >&2")
        script.append(f"trap 'echo \"docs_commands: {rel}:{line}: a command of this block failed\" >&2' ERR")
        script.append(text)
    print(f"docs_commands: {rel}: {len(blocks)} runnable blocks", flush=True)
    proc = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=work, env=env, start_new_session=True)
    status = proc.wait()
    # Whatever the blocks started and did not stop (a server left running) is the docs' fault; a
    # server told to stop gets grace_s to finish its shutdown.
    for _ in range(int(grace_s * 10)):
        leftover = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
        if not leftover:
            break
        time.sleep(0.1)
    if leftover:
        os.killpg(proc.pid, signal.SIGKILL)
        print(f"docs_commands: {rel}: processes {', '.join(leftover)} were still running after its last block "
              "(a block must stop what it starts)", file=sys.stderr)
        return False
    if status != 0:
        print(f"docs_commands: {rel}: failed (status {status})", file=sys.stderr)
    return status == 0


def client_python(root: pathlib.Path):
    """The first Python that imports the clients the docs use, or None."""
    env = os.environ.get("ROFORMER_PYTHON")
    for candidate in [env] if env else [str(root / "build/hf-venv/bin/python"), "python3"]:
        try:
            if subprocess.run([candidate, "-c", "import openai, huggingface_hub"], capture_output=True).returncode == 0:
                return candidate
        except OSError:
            pass
    return None


def skip(reason: str) -> int:
    print(f"docs_commands: skipped: {reason}")
    return 1 if os.environ.get("ROFORMER_REQUIRE_HF") == "1" else 77


def self_test() -> int:
    """The checker fails where it should: a failing command, a process left running, an unclosed fence;
    and it runs only `sh run` blocks, in order, in one shell."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        env = dict(os.environ)
        def case(name, text):
            (root / name).write_text(text, encoding="utf-8")
            return run_file(root / name, root, root, env, grace_s=1)
        fence = "`" * 3
        checks = {
            "a passing file passes": case("ok.md", f"{fence}sh run\nx=1\n{fence}\n{fence}sh\nfalse\n{fence}\n"
                                               f"{fence}sh run\ntest $x = 1\n{fence}\n"),
            "a failing command fails": not case("fail.md", f"{fence}sh run\ntrue\nfalse\necho unreachable\n{fence}\n"),
            "a failing pipeline fails": not case("pipe.md", f"{fence}sh run\nfalse | cat\n{fence}\n"),
            "a process left running fails": not case("left.md", f"{fence}sh run\nsleep 60 &\n{fence}\n"),
        }
        (root / "open.md").write_text(f"{fence}sh run\ntrue\n", encoding="utf-8")
        try:
            runnable_blocks(root / "open.md")
            checks["an unclosed fence is an error"] = False
        except SystemExit:
            checks["an unclosed fence is an error"] = True
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", type=pathlib.Path)
    p.add_argument("--roformer", type=pathlib.Path)
    p.add_argument("--work", type=pathlib.Path)
    p.add_argument("--self-test", action="store_true", help="check that the checker fails where it should")
    p.add_argument("--file", action="append", help="only this file (relative to --root)")
    p.add_argument("--list", action="store_true", help="list the runnable blocks and exit")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if not a.root or not a.roformer or not a.work:
        p.error("--root, --roformer and --work are required")
    root = a.root.resolve()
    files = [root / f for f in a.file] if a.file else doc_files(root)
    if a.list:
        for f in files:
            for line, text in runnable_blocks(f):
                print(f"{f.relative_to(root)}:{line}: {text.splitlines()[0] if text else ''}")
        return 0
    if not (root / "data" / "kjv.txt").is_file():
        return skip("data/kjv.txt is missing (scripts/corpus.sh makes it; scripts/test.sh does)")
    python = client_python(root)
    if python is None:
        return skip("no Python with the openai and huggingface_hub clients (scripts/hf-env.sh build/hf-venv)")
    work = a.work.resolve()
    env = dict(os.environ, PATH=f"{work / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    prepare(root, work, a.roformer, python, env)
    ok = all([run_file(f, root, work, env) for f in files])
    print("docs_commands: " + ("every runnable block ran" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
