#!/usr/bin/env bash
# Runs one of the Python checks of tests/hf that need transformers' RoFormer classes and a jieba
# (RoFormerTokenizer; rjieba_shim.py lets jieba stand in for rjieba):
#   serve_vs_hf.py     fill-mask, classify and embed give transformers' pipeline outputs, on the
#                      roformer-hf case1 fixture and on RoFormerForSequenceClassification checkpoints
#                      that transformers saves (safetensors and pytorch_model.bin);
#   finetune_vs_hf.py  `roformer finetune` output loads with RoFormerForSequenceClassification and
#                      gives our logits (single-label, regression, multi-label);
#   heads_vs_hf.py     every task head (sequence and token classification, QA, multiple choice)
#                      gives transformers' logits on randomly initialised checkpoints it saves;
#   ner_vs_hf.py       token-classification fine-tuning against transformers and seqeval;
#   mc_vs_hf.py        multiple-choice fine-tuning against transformers;
#   qa_vs_hf.py        question-answering fine-tuning against transformers, run_qa and SQuAD v1.1;
#   pipelines_vs_hf.py roformer ner and qa against transformers' token-classification and QA pipelines;
#   pretrain_wordpiece_vs_hf.py  WordPiece pre-training output and --init-from against transformers;
#   vocab_vs_hf.py     `roformer vocab` directories tokenise in transformers as in ours, and the
#                      vocabulary matches HF tokenizers' trainer's quality.
# Usage: jieba_py.sh SCRIPT.py ROFORMER_BINARY FIXTURES [WORK_DIR]
# Python: as tests/hf/roundtrip.sh ($ROFORMER_PYTHON, /work/venv-ref, build/hf-venv, python3), which
# must also import rjieba or jieba. None: exit 77 (ctest skip), or 1 when ROFORMER_REQUIRE_HF=1.
set -euo pipefail
script="$1"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

source "$here/common.sh"
find_hf_python "$(hf_jieba_probe RoFormerForSequenceClassification)"
make_work_dir "${4:-}"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONDONTWRITEBYTECODE=1
"$python" "$here/$script" "$2" "$3" "$work"
