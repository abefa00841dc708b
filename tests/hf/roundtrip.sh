#!/usr/bin/env bash
# Checkpoints load in Hugging Face transformers and give our logits: for each case (masked LM,
# causal LM, masked LM with an embedding projection, all with RoPE) this trains a tiny model with
# `roformer train`, loads the checkpoint with RoFormerFor{MaskedLM,CausalLM}.from_pretrained
# (hf_logits.py: every weight must load, none newly initialised), runs it on a padded batch, and
# compares embeddings, every hidden state, every attention map and the logits with our forward pass
# of the same checkpoint at |ours − HF| <= 1e-5 + 1e-4·|HF| (model_tests, tests/model/roformer_parity_test.cc, with
# ROFORMER_ROUNDTRIP_DIR). Then it checks that the check can fail: a perturbed weight makes the
# comparison fail, a dropped weight makes the load fail, and a non-rope checkpoint is refused
# (transformers' RoFormer has only RoPE; see hf_logits.py).
#
# Usage: roundtrip.sh ROFORMER_BINARY PARITY_TEST_BINARY [WORK_DIR]
# Python: $ROFORMER_PYTHON if set (it must work), else the first of /work/venv-ref/bin/python,
# build/hf-venv/bin/python (scripts/hf-env.sh), python3, /usr/bin/python3 that has torch, safetensors
# and a transformers whose RoFormer models are usable with that torch. None: exit 77 (ctest skip),
# or 1 when ROFORMER_REQUIRE_HF=1.
set -euo pipefail
roformer="$1"
parity="$2"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

python=""
source "$(dirname "$0")/common.sh"
probe="$(hf_probe RoFormerForMaskedLM 'from transformers import RoFormerForCausalLM')"
find_hf_python "$probe"
make_work_dir "${3:-}"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export PYTHONDONTWRITEBYTECODE=1

# A small corpus written here: varied English with some UTF-8 (accents, Greek, Cyrillic, CJK, ²).
cat > "$work/seed.txt" << 'EOF'
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs!
Rotary position embeddings rotate each pair of query and key features by an angle proportional to the position.
Über den Wolken muss die Freiheit wohl grenzenlos sein: café, naïve, façade, jalapeño, smörgåsbord.
In 1905, Einstein published four papers; one of them introduced E = mc². Numbers: 0 1 2 3 4 5 6 7 8 9.
Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. Съешь же ещё этих мягких французских булок.
旋转位置编码把位置信息写进注意力。日本語のテキストも少し。 Quotes “like this” and ‘this’.
She sells sea shells by the sea shore; the shells she sells are surely seashells.
A journey of a thousand miles begins with a single step. To be, or not to be: that is the question.
EOF
for i in 1 2 3 4 5 6 7 8; do
  tail -n +"$i" "$work/seed.txt"
  head -n "$i" "$work/seed.txt"
done > "$work/corpus.txt"

seq_len=32
common=(--data "$work/corpus.txt" --layers 2 --hidden 64 --heads 4 --ff 128 --seq "$seq_len" --batch 4
        --steps 20 --lr 0.01 --warmup 2 --eval-every 0 --eval-batches 1 --save-every 0 --sample-tokens 0
        --no-progress)

train() {  # name, extra options...: trains into $work/name, prints the checkpoint directory
  local name="$1"
  shift
  "$roformer" train "${common[@]}" --out "$work/$name" "$@" > "$work/$name.log" 2>&1 ||
    { echo "roformer train ($name) failed:" >&2; cat "$work/$name.log" >&2; return 1; }
  echo "$work/$name/$(cat "$work/$name/latest")"
}

compare() {  # checkpoint dir holding io.safetensors: runs our forward and compares; 0 when it matches
  local dir="$1" log
  log="$(ROFORMER_ROUNDTRIP_DIR="$dir" "$parity" --gtest_filter='RoformerRoundTrip.*' 2>&1)" &&
    grep -q '\[  PASSED  \] 1 test' <<< "$log" && ! grep -q '\[  SKIPPED \]' <<< "$log" && {
      grep 'logits max' <<< "$log"
      return 0
    }
  echo "$log" | grep -E 'drift|Failure|error|SKIPPED|has no|logits max' | head -8
  return 1
}

failed=0
for case in "mlm --task mlm" \
            "clm --task clm --dropout 0.1" \
            "mlm_embproj --task mlm --embedding-size 32 --max-positions $seq_len"; do
  read -r -a args <<< "$case"
  name="${args[0]}"
  args=("${args[@]:1}")
  echo "== $name: roformer train ${args[*]}"
  ckpt="$(train "$name" "${args[@]}")"
  "$python" "$here/hf_logits.py" "$ckpt" "$ckpt/io.safetensors" --seq "$seq_len"
  if compare "$ckpt"; then
    echo "$name: ok"
  else
    echo "$name: FAIL: our forward of $ckpt differs from transformers'" >&2
    failed=1
  fi
done

echo "== the check can fail: a perturbed weight (query weight of layer 0, +0.01 at [0,0])"
mkdir -p "$work/tampered"
cp "$work/mlm/$(cat "$work/mlm/latest")"/{config.json,model.safetensors,io.safetensors} "$work/tampered/"
"$python" - "$work/tampered/model.safetensors" << 'EOF'
import sys
from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1])
w["roformer.encoder.layer.0.attention.self.query.weight"][0, 0] += 0.01
save_file(w, sys.argv[1], metadata={"format": "pt"})
EOF
if out="$(compare "$work/tampered")"; then
  echo "FAIL: a perturbed weight went unnoticed" >&2
  failed=1
elif grep -q 'drifts first' <<< "$out"; then
  echo "perturbed weight: detected ($(grep -o '[a-z_]*\[*[0-9]*\]* drifts first.*' <<< "$out"))"
else
  echo "FAIL: the perturbed checkpoint failed for another reason:" >&2
  echo "$out" >&2
  failed=1
fi

echo "== the check can fail: a weight missing from the checkpoint (roformer.embeddings_project.bias)"
mkdir -p "$work/missing"
cp "$work/mlm_embproj/$(cat "$work/mlm_embproj/latest")"/{config.json,model.safetensors} "$work/missing/"
"$python" - "$work/missing/model.safetensors" << 'EOF'
import sys
from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1])
del w["roformer.embeddings_project.bias"]
save_file(w, sys.argv[1], metadata={"format": "pt"})
EOF
status=0
"$python" "$here/hf_logits.py" "$work/missing" "$work/missing/io.safetensors" > "$work/missing.log" 2>&1 || status=$?
if [ "$status" -eq 1 ] && grep -q "missing_keys: \['roformer.embeddings_project.bias'\]" "$work/missing.log"; then
  echo "missing weight: refused (newly initialised by transformers)"
else
  echo "FAIL: hf_logits.py accepted a checkpoint with a missing weight (status $status):" >&2
  cat "$work/missing.log" >&2
  failed=1
fi

echo "== only rope checkpoints are HF RoFormer: a sinusoidal one is refused"
ckpt="$(train sinusoidal --task mlm --position sinusoidal)"
status=0
"$python" "$here/hf_logits.py" "$ckpt" "$ckpt/io.safetensors" > "$work/sinusoidal-hf.log" 2>&1 || status=$?
if [ "$status" -eq 2 ] && grep -q 'position_encoding="sinusoidal"' "$work/sinusoidal-hf.log"; then
  echo "sinusoidal: refused: $(cat "$work/sinusoidal-hf.log")"
else
  echo "FAIL: hf_logits.py did not refuse a sinusoidal checkpoint (status $status):" >&2
  cat "$work/sinusoidal-hf.log" >&2
  failed=1
fi

[ "$failed" -eq 0 ] && echo "hf roundtrip: all cases match transformers" || echo "hf roundtrip: FAILED" >&2
exit "$failed"
