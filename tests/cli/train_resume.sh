#!/usr/bin/env bash
# Resume is bit-exact: a run killed with SIGKILL and resumed, and a run stopped with SIGINT (which
# saves a checkpoint and exits 130) and resumed, both end with the same losses and the same final
# weights, byte for byte, as an uninterrupted run. A diverging run (NaN/inf loss) stops with status 3,
# names the step, and keeps its last good checkpoint. --keep-checkpoints keeps the newest N step
# checkpoints (2 by default). --patience stops a run whose validation loss stops falling, and --resume
# of that run trains nothing. --gradient-checkpointing trains to the same bytes.
# Usage: train_resume.sh ROFORMER_BINARY WORK_DIR
set -euo pipefail
roformer="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=2  # the same thread count in every run: same reduction order
source "$(dirname "$0")/resume_lib.sh"

# A small corpus written by the test itself: varied sentences with some UTF-8.
awk 'BEGIN { srand(7); split("the a river mountain city old young bright quiet café naïve über garden road stone light", w, " ");
             for (i = 0; i < 3000; i++) { s = ""; n = 4 + int(rand() * 8);
               for (j = 0; j < n; j++) s = s w[1 + int(rand() * 16)] " ";
               print s "and " i % 97 "." } }' > "$work/corpus.txt"

model=(--data "$work/corpus.txt" --layers 2 --hidden 32 --heads 2 --ff 64 --seq 32 --batch 4)
opts=("${model[@]}" --steps 40 --save-every 5 --eval-every 10 --eval-batches 2 --dropout 0.1 --sample-tokens 0 --no-progress)

losses() { grep -o '"loss":[^,]*\|"val_loss":[^,}]*' "$1/metrics.jsonl"; }
echo "== uninterrupted run"
"$roformer" train "${opts[@]}" --out "$work/a" 2> "$work/a.log"
echo "== --keep-checkpoints: the newest step checkpoints stay (2 by default)"
[ "$(ls -d "$work/a"/step-* | wc -l)" -eq 2 ] || { ls "$work/a" >&2; exit 1; }
"$roformer" train "${model[@]}" --steps 20 --save-every 5 --eval-every 0 --eval-batches 2 --sample-tokens 0 --no-progress \
  --keep-checkpoints 3 --out "$work/keep3" 2> "$work/keep3.log"
[ "$(cd "$work/keep3" && echo step-*)" = "step-000010 step-000015 step-000020" ] || { ls "$work/keep3" >&2; exit 1; }

echo "== SIGKILL at step >= 17, then --resume"
interrupt_and_resume KILL 17 "$work/b" train "${opts[@]}"
echo "== SIGINT at step >= 23 (checkpoint and exit 130), then --resume"
interrupt_and_resume INT 23 "$work/c" train "${opts[@]}"

for run in b c; do
  if ! diff <(losses "$work/a") <(losses "$work/$run") > "$work/$run.diff"; then
    echo "run $run: loss trajectory differs from the uninterrupted run:" >&2
    head -20 "$work/$run.diff" >&2
    exit 1
  fi
  cmp "$work/a/step-000040/model.safetensors" "$work/$run/step-000040/model.safetensors"
  cmp "$work/a/step-000040/optimizer.safetensors" "$work/$run/step-000040/optimizer.safetensors"
done
echo "resume: loss trajectories and final weights identical ($(losses "$work/a" | wc -l) values)"

echo "== --gradient-checkpointing: the same losses and final weights, byte for byte, recomputing the layers"
"$roformer" train "${opts[@]}" --gradient-checkpointing --out "$work/gc" 2> "$work/gc.log"
grep -q "gradient checkpointing" "$work/gc.log"
diff <(losses "$work/a") <(losses "$work/gc")
cmp "$work/a/step-000040/model.safetensors" "$work/gc/step-000040/model.safetensors"

echo "== --precision bf16: resumes bit for bit where the CPU multiplies bf16, and is refused by name elsewhere"
if "$roformer" train "${model[@]}" --steps 2 --sample-tokens 0 --no-progress --precision bf16 --out "$work/p0" 2> "$work/p0.log"; then
  grep -q "bf16 mixed precision" "$work/p0.log"
  "$roformer" train "${opts[@]}" --precision bf16 --out "$work/pa" 2> "$work/pa.log"
  interrupt_and_resume KILL 17 "$work/pb" train "${opts[@]}" --precision bf16
  [ "$(grep -c "bf16 mixed precision" "$work/pb.log")" -eq 2 ]  # the run and its resumption, from the saved options
  diff <(losses "$work/pa") <(losses "$work/pb")
  cmp "$work/pa/step-000040/model.safetensors" "$work/pb/step-000040/model.safetensors"
  cmp "$work/pa/step-000040/optimizer.safetensors" "$work/pb/step-000040/optimizer.safetensors"
  if diff -q <(losses "$work/a") <(losses "$work/pa") > /dev/null; then
    echo "--precision bf16 trained exactly as fp32" >&2; exit 1
  fi
  "$roformer" train "${model[@]}" --steps 1 --sample-tokens 0 --no-progress --precision auto --out "$work/pc" 2> "$work/pc.log"
  grep -q "bf16 mixed precision" "$work/pc.log"
else
  grep -q -- "--precision bf16: this CPU has no native bf16" "$work/p0.log"
  "$roformer" train "${model[@]}" --steps 1 --sample-tokens 0 --no-progress --precision auto --out "$work/pc" 2> "$work/pc.log"
  grep -q "threads, fp32" "$work/pc.log"
fi

echo "== a run without --resume refuses to overwrite an existing run"
if "$roformer" train "${opts[@]}" --out "$work/a" 2> "$work/refuse.log"; then
  echo "expected a refusal" >&2; exit 1
fi
grep -q "already holds a run" "$work/refuse.log"

echo "== --resume on a finished run says so and does nothing; --resume --steps N extends it"
cp -r "$work/a" "$work/x"
rm -f "$work/x/.lock"
before="$(wc -l < "$work/x/metrics.jsonl")"
"$roformer" train --resume --out "$work/x" 2> "$work/x_done.log"
grep -q "finished at step 40 of 40, nothing to do (--resume --steps N with N > 40 extends it" "$work/x_done.log"
[ "$(wc -l < "$work/x/metrics.jsonl")" -eq "$before" ]  # no evaluation, no new record
if "$roformer" train --resume --out "$work/x" --steps 30 2> "$work/x_less.log"; then
  echo "--resume --steps 30 shrank a 40-step run" >&2; exit 1
fi
grep -q -- "--steps 30: .* is at step 40 already; --steps extends a run" "$work/x_less.log"
"$roformer" train --resume --out "$work/x/" --steps 50 2> "$work/x_more.log"  # a trailing slash names the same run
grep -q "(from step 40)" "$work/x_more.log"
[ "$(cat "$work/x/latest")" = step-000050 ]
grep -q '"steps": 50' <(python3 -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; print(json.loads(f.read(n))['__metadata__']['options'])" "$work/x/step-000050/optimizer.safetensors")
if grep -q "//" "$work/x_more.log"; then echo "a path with // in the log:" >&2; grep "//" "$work/x_more.log" >&2; exit 1; fi

echo "== eval on a training checkpoint reads the windows training evaluated: the log's loss and baseline"
"$roformer" eval --model "$work/a/step-000040" --data "$work/corpus.txt" > "$work/eval_same.txt"
grep -q "as training's evaluation" "$work/eval_same.txt"
train_val="$(grep -o '"val_loss":[^,}]*' "$work/a/metrics.jsonl" | tail -1 | cut -d: -f2)"
eval_val="$(grep -o 'validation loss [0-9.]*' "$work/eval_same.txt" | cut -d' ' -f3)"
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 5e-4)" "$train_val" "$eval_val" ||
  { echo "eval says $eval_val, training's last evaluation $train_val" >&2; exit 1; }
grep -q "up to 2 batches of 4 × 32 tokens" "$work/eval_same.txt"

echo "== --resume refuses options it would not apply; a second process on a run directory is refused"
if "$roformer" train --resume --out "$work/a" --lr 1 2> "$work/resume_lr.log"; then
  echo "--resume accepted --lr" >&2; exit 1
fi
grep -q -- "--lr cannot change them" "$work/resume_lr.log"
"$roformer" train "${model[@]}" --steps 100000 --save-every 1000 --eval-every 0 --sample-tokens 0 --no-progress \
  --out "$work/busy" 2> "$work/busy.log" &
busy=$!
wait_for_steps "$work/busy" 2
for second in "train ${model[*]} --out $work/busy" "train --resume --out $work/busy"; do
  if $roformer $second 2> "$work/second.log"; then echo "a second process trained in $work/busy" >&2; exit 1; fi
  grep -q "another process is training in this run directory" "$work/second.log"
done
kill -KILL "$busy"; wait "$busy" || true

echo "== divergence: NaN/inf loss stops the run with status 3 and keeps the last good checkpoint"
status=0
"$roformer" train "${model[@]}" --steps 40 --lr 1e30 --warmup 0 --save-every 1 --sample-tokens 0 --no-progress --out "$work/d" 2> "$work/d.log" || status=$?
[ "$status" -eq 3 ] || { echo "divergence: expected status 3, got $status" >&2; cat "$work/d.log" >&2; exit 1; }
grep -E "became (NaN|infinite) at step [0-9]+; stopping. The last good checkpoint is .*step-0000" "$work/d.log"
# The kept checkpoint is complete and loads.
"$roformer" generate --model "$work/d/$(cat "$work/d/latest")" --prompt "the " --tokens 5 > /dev/null
echo "== eval and generate (sampling, beam search) on a checkpoint; generate refuses a masked LM"
"$roformer" eval --model "$work/a/step-000040" --data "$work/corpus.txt" --seq 32 --max-batches 2 > "$work/eval.txt"
grep -q "validation loss" "$work/eval.txt"
"$roformer" generate --model "$work/a/step-000040" --prompt "the river " --tokens 20 --seed 3 > "$work/g1.txt"
"$roformer" generate --model "$work/a/step-000040" --prompt "the river " --tokens 20 --seed 3 > "$work/g2.txt"
cmp "$work/g1.txt" "$work/g2.txt"  # seeded
"$roformer" generate --model "$work/a/step-000040" --prompt "the river " --tokens 12 --beam 4 > "$work/b1.txt"
grep -q "^the river " "$work/b1.txt"
if "$roformer" generate --model "$work/a/step-000040" --beam 4 --temperature 1 2> "$work/beam.err"; then
  echo "generate accepted --beam 4 with --temperature" >&2; exit 1
fi
grep -q "beam search is deterministic" "$work/beam.err"
"$roformer" train "${model[@]}" --steps 2 --task mlm --position learned --sample-tokens 0 --no-progress --out "$work/e" 2> "$work/e.log"
if "$roformer" generate --model "$work/e/step-000002" --prompt "the" 2> "$work/e.err"; then
  echo "generate accepted a masked LM" >&2; exit 1
fi
grep -q "causal LM" "$work/e.err"

echo "== WordPiece MLM with whole-word masking: SIGKILL, then --resume; eval reads the HF directory"
"$roformer" vocab --data "$work/corpus.txt" --size 150 --out-dir "$work/tok" 2> /dev/null
wp=("${model[@]}" --tokenizer wordpiece --vocab "$work/tok" --task mlm --whole-word-mask --steps 20 --save-every 5
    --eval-every 10 --eval-batches 2 --dropout 0.1 --no-progress)
"$roformer" train "${wp[@]}" --out "$work/wa" 2> "$work/wa.log"
interrupt_and_resume KILL 9 "$work/wb" train "${wp[@]}"
diff <(losses "$work/wa") <(losses "$work/wb")
cmp "$work/wa/step-000020/model.safetensors" "$work/wb/step-000020/model.safetensors"
cmp "$work/wa/step-000020/vocab.txt" "$work/tok/vocab.txt"
"$roformer" eval --model "$work/wa/step-000020" --data "$work/corpus.txt" --seq 32 --max-batches 2 | grep -q "validation loss"
if "$roformer" train "${model[@]}" --tokenizer wordpiece --steps 1 --out "$work/wc" 2> "$work/wc.err"; then
  echo "wordpiece without --vocab was accepted" >&2; exit 1
fi
grep -q "needs --vocab" "$work/wc.err"
if "$roformer" train "${model[@]}" --whole-word-mask --steps 1 --out "$work/wd" 2> "$work/wd.err"; then
  echo "--whole-word-mask on a char causal LM was accepted" >&2; exit 1
fi
grep -q "whole-word-mask needs" "$work/wd.err"

echo "== --patience on the validation loss: training on 'a' lines, validating on 'b' lines, stops early; --resume trains nothing"
python3 -c "print(('a' * 40 + '\n') * 400 + ('b' * 40 + '\n') * 22, end='')" > "$work/ab.txt"  # the last 5%: b lines
"$roformer" train --data "$work/ab.txt" --layers 1 --hidden 32 --heads 2 --ff 64 --seq 32 --batch 4 --steps 40 --lr 1e-2 \
  --warmup 0 --eval-every 5 --eval-batches 2 --save-every 7 --patience 2 --sample-tokens 0 --no-progress \
  --out "$work/early" 2> "$work/early.log"
grep -q "^stopped early (--patience: no lower validation loss): 15 steps" "$work/early.log" || { cat "$work/early.log" >&2; exit 1; }
[ "$(cat "$work/early/latest")" = step-000015 ]  # the early stop's checkpoint (not a multiple of --save-every)
before="$(wc -l < "$work/early/metrics.jsonl")"
"$roformer" train --resume --out "$work/early" 2> "$work/early-resume.log"
grep -q "stopped early at step 15 (2 evaluations without a better validation loss, --patience 2), nothing to do" \
  "$work/early-resume.log"
[ "$(wc -l < "$work/early/metrics.jsonl")" -eq "$before" ]
echo "ok"
