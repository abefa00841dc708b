# Sourced by the Hugging Face comparison scripts (roundtrip.sh, jieba_py.sh, bench_infer_peer.sh).
# find_hf_python PROBE: sets $python and $versions to the first interpreter that runs the Python
# code PROBE ($ROFORMER_PYTHON only, when set), else exits 77 (ctest skip), or 1 when
# ROFORMER_REQUIRE_HF=1.
# hf_probe CLASS [EXTRA]: prints a probe that imports torch, transformers (usable with this torch) and
# transformers' real RoFormer CLASS, runs the Python line(s) EXTRA, and prints the versions.
# hf_jieba_probe CLASS: the same, also importing rjieba or jieba (for RoFormerTokenizer).
# make_work_dir [DIR]: sets $work to DIR (emptied) or to a temporary directory removed at exit.
find_hf_python() {
  local probe="$1" candidate
  local candidates=(/work/venv-ref/bin/python "$repo/build/hf-venv/bin/python" python3 /usr/bin/python3)
  [ -n "${ROFORMER_PYTHON:-}" ] && candidates=("$ROFORMER_PYTHON")
  python=""
  for candidate in "${candidates[@]}"; do
    command -v "$candidate" > /dev/null 2>&1 || continue
    if versions="$("$candidate" -c "$probe" 2> /dev/null)"; then
      python="$candidate"
      break
    fi
  done
  if [ -z "$python" ]; then
    echo "no Python that runs transformers' RoFormer (see the probe in $0) found; create one with" \
         "scripts/hf-env.sh or set ROFORMER_PYTHON" >&2
    [ "${ROFORMER_REQUIRE_HF:-0}" = 1 ] && exit 1
    exit 77
  fi
  echo "python: $python ($versions)"
}

hf_probe() {
  cat <<PY
import torch, safetensors.torch, transformers
from transformers.utils import is_torch_available
assert is_torch_available(), "transformers cannot use this torch"
from transformers import $1
assert "modeling_roformer" in $1.__module__, "dummy RoFormer classes"
${2:-}
print(f"transformers {transformers.__version__}, torch {torch.__version__}")
PY
}

hf_jieba_probe() {
  hf_probe "$1" 'try:
    import rjieba
except ImportError:
    import jieba'
}

make_work_dir() {
  if [ -n "${1:-}" ]; then
    work="$1"
    rm -rf "$work"
    mkdir -p "$work"
  else
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
  fi
}
