#!/usr/bin/env bash
# Data-parallel training (docs/distributed.md), run by ctest in the mpi preset. A masked LM with
# dropout (so that MLM masks and dropout masks are both exercised) trains for 60 steps:
# - with 1 process, with mpirun -np 2 and -np 4, with 1 process and --grad-accum 4, and with -np 2
#   and buckets small enough that each layer is reduced during the backward: the loss trajectories
#   and the final weights agree within fp32 tolerance (the ranks' gradients are summed in another
#   order, nothing else differs);
# - -np 2 twice, and -np 2 with ZeRO-1 (sharded AdamW moments): identical losses, weights and
#   optimizer checkpoints, byte for byte;
# - a ZeRO-1 run saved by -np 2 at step 30 resumes with -np 4 and with 1 process and ends as the
#   uninterrupted run does, within the same tolerance;
# - SIGINT to mpirun (Ctrl-C): every rank stops after the same step and rank 0 saves once;
# - a rank killed with SIGKILL ends the whole job with a non-zero status within seconds, and -np 2
#   resumed from the last checkpoint ends with the uninterrupted run's losses and weights, bit for bit.
# - roformer finetune (the roformer-hf case1 fixture, a generated sentiment task) with -np 2 gives
#   the 1-process run's losses and validation metrics within the same tolerance, and rank 0 alone
#   writes.
# Usage: train_mpi.sh ROFORMER_BINARY MPIEXEC WORK_DIR FIXTURES
set -euo pipefail
roformer="$1"
mpiexec="$2"
work="$3"
fixtures="$4"
rm -rf "$work"
mkdir -p "$work"
source "$(dirname "$0")/resume_lib.sh"
# Root needs --allow-run-as-root; more ranks than cores needs --oversubscribe. Shared memory and TCP
# on loopback only (a CI container has no other network to probe).
mpirun=("$mpiexec" --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)

awk 'BEGIN { srand(11); split("the a river mountain city old young bright quiet garden road stone light dark sea", w, " ");
             for (i = 0; i < 4000; i++) { s = ""; n = 4 + int(rand() * 8);
               for (j = 0; j < n; j++) s = s w[1 + int(rand() * 16)] " ";
               print s "and " i % 89 "." } }' > "$work/corpus.txt"
model=(--data "$work/corpus.txt" --task mlm --layers 2 --hidden 64 --heads 2 --ff 128 --seq 32 --batch 8 --lr 3e-3
       --warmup 6 --eval-every 20 --eval-batches 4 --dropout 0.1 --threads 1 --no-progress)
opts=("${model[@]}" --steps 60 --save-every 30)

run() {  # NAME NPROCS [extra options]: trains into $work/NAME
  local name="$1" n="$2"
  shift 2
  if [ "$n" = 1 ]; then
    "$roformer" train "${opts[@]}" "$@" --out "$work/$name" 2> "$work/$name.log"
  else
    "${mpirun[@]}" -np "$n" "$roformer" train "${opts[@]}" "$@" --out "$work/$name" > "$work/$name.log" 2>&1
  fi
}
# compare A B: the per-step training and validation losses agree within 1e-5 (relative), and every
# weight of the final checkpoints within 2e-3 of its tensor's largest value. The losses agree to
# ~1e-8; the weights less closely, because AdamW turns a tiny difference in a near-zero gradient
# into a difference of up to the learning rate.
compare() {
  python3 - "$work/$1" "$work/$2" <<'PY'
import array, json, struct, sys
a, b = sys.argv[1], sys.argv[2]
loss_tol, weight_tol = 1e-5, 2e-3
def log(d):
    return [json.loads(l) for l in open(d + "/metrics.jsonl")]
la, lb = log(a), log(b)
assert len(la) == len(lb) == 60, (len(la), len(lb))
worst = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(la, lb) for k in ("loss", "val_loss") if k in x)
def tensors(d):
    raw = open(d + "/step-000060/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__": continue
        lo, hi = t["data_offsets"]
        out[name] = array.array("f", raw[8 + n + lo:8 + n + hi])
    return out
ta, tb = tensors(a), tensors(b)
assert ta.keys() == tb.keys()
wworst = max(max(abs(x - y) for x, y in zip(ta[k], tb[k])) / max(max(abs(x) for x in ta[k]), 1e-30) for k in ta)
print(f"{b} vs {a}: largest relative loss difference {worst:.2e}, weights {wworst:.2e}")
sys.exit(0 if worst <= loss_tol and wworst <= weight_tol else 1)
PY
}

# same_tensors A B: two safetensors files hold the same tensors, bit for bit (their metadata, which
# records the options, may differ).
same_tensors() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]] for k, t in head.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
bad = [k for k in a if a[k] != b.get(k)] + [k for k in b if k not in a]
if bad: sys.exit(f"{sys.argv[2]} differs from {sys.argv[1]} in {len(bad)} tensors, e.g. {bad[0]}")
PY
}

echo "== 1 process, -np 2, -np 4, 1 process with --grad-accum 4"
run one 1
run two 2
run four 4
run accum 1 --grad-accum 4
run buckets 2 --bucket-mb 0.02  # 20 KiB buckets: the gradients reduced layer by layer during the backward
grep -q "2 processes (mpi) × 1 threads" "$work/two.log" || { cat "$work/two.log" >&2; exit 1; }
compare one two
compare one four
compare one accum
compare one buckets

echo "== -np 2 again, and -np 2 with ZeRO-1: bit-identical"
run two_again 2
run two_zero1 2 --zero1
grep -q "AdamW moments sharded (ZeRO-1)" "$work/two_zero1.log" || { cat "$work/two_zero1.log" >&2; exit 1; }
for other in two_again two_zero1; do
  cmp <(grep -o '"loss":[^,]*' "$work/two/metrics.jsonl") <(grep -o '"loss":[^,]*' "$work/$other/metrics.jsonl")
  for f in step-000030/optimizer.safetensors step-000060/model.safetensors step-000060/optimizer.safetensors; do
    same_tensors "$work/two/$f" "$work/$other/$f"
  done
done

echo "== saved by -np 2 with ZeRO-1 at step 30, resumed by -np 4 (ZeRO-1: 4 shards) and by 1 process"
for n in 4 1; do
  cp -r "$work/two_zero1" "$work/resume$n"
  rm -rf "$work/resume$n/step-000060"
  echo step-000030 > "$work/resume$n/latest"
  if [ "$n" = 1 ]; then
    "$roformer" train --resume --out "$work/resume$n" --no-progress 2>> "$work/resume$n.log"
  else
    "${mpirun[@]}" -np "$n" "$roformer" train --resume --out "$work/resume$n" --no-progress >> "$work/resume$n.log" 2>&1
  fi
  compare one "resume$n"
done

echo "== SIGINT to the launcher (Ctrl-C): every rank stops after the same step, rank 0 saves once"
"${mpirun[@]}" -np 2 "$roformer" train "${model[@]}" --steps 100000 --save-every 0 --out "$work/interrupted" \
  > "$work/interrupted.log" 2>&1 &
launcher=$!
wait_for_steps "$work/interrupted" 25
kill -INT "$launcher"
status=0
wait "$launcher" || status=$?
[ "$status" -ne 0 ] || { echo "an interrupted job exited 0" >&2; exit 1; }
[ "$(grep -c "interrupted at step" "$work/interrupted.log")" = 1 ] || { cat "$work/interrupted.log" >&2; exit 1; }
saved=$(cat "$work/interrupted/latest")
[ "$saved" = "step-$(printf %06d "$(steps_logged "$work/interrupted")")" ] || { echo "latest $saved" >&2; exit 1; }
[ "$(grep -c "^training masked LM" "$work/interrupted.log")" = 1 ] && [ "$(grep -c "^step 20/" "$work/interrupted.log")" = 1 ] ||
  { echo "a rank other than 0 printed" >&2; cat "$work/interrupted.log" >&2; exit 1; }
echo "SIGINT: $saved saved once, the job exited with status $status"

echo "== a killed rank ends the job; -np 2 resumes from the last checkpoint exactly"
killed=("${model[@]}" --steps 300 --save-every 5)
"${mpirun[@]}" -np 2 "$roformer" train "${killed[@]}" --out "$work/killed_ref" > "$work/killed_ref.log" 2>&1
"${mpirun[@]}" -np 2 "$roformer" train "${killed[@]}" --out "$work/killed" > "$work/killed.log" 2>&1 &
launcher=$!
wait_for_steps "$work/killed" 8
victim=$(pgrep -f -n -- "--out $work/killed\$")
kill -KILL "$victim"
status=0
for _ in $(seq 1 300); do  # at most 30 s
  kill -0 "$launcher" 2> /dev/null || break
  sleep 0.1
done
if kill -0 "$launcher" 2> /dev/null; then
  echo "the job still runs 30 s after a rank was killed" >&2
  pkill -KILL -f -- "--out $work/killed\$" || true
  exit 1
fi
wait "$launcher" || status=$?
[ "$status" -ne 0 ] || { echo "the job exited 0 after a rank was killed" >&2; exit 1; }
saved=$(cat "$work/killed/latest")
[ "$saved" != step-000300 ] || { echo "the job finished before the kill" >&2; exit 1; }
"${mpirun[@]}" -np 2 "$roformer" train --resume --out "$work/killed" --no-progress >> "$work/killed.log" 2>&1
cmp <(grep -o '"loss":[^,]*' "$work/killed_ref/metrics.jsonl") <(grep -o '"loss":[^,]*' "$work/killed/metrics.jsonl")
same_tensors "$work/killed_ref/step-000300/model.safetensors" "$work/killed/step-000300/model.safetensors"
echo "killed rank: job ended with status $status; resumed from $saved, it ends as the uninterrupted run, bit for bit"
echo "== roformer finetune: -np 2 as 1 process"
python3 - "$work" <<'PY'
import json, random, sys
rng = random.Random(3)
POS, NEG, FILL = ["love", "yes", "good"], ["stop", "no", "bad"], ["the", "quick", "brown", "fox", "lazy", "world", "he"]
for name, n in (("train", 96), ("val", 24)):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for _ in range(n):
            y = rng.randint(0, 1)
            w = [rng.choice(FILL) for _ in range(rng.randint(2, 8))]
            w.insert(rng.randint(0, len(w)), rng.choice(POS if y else NEG))
            f.write(json.dumps({"sentence": " ".join(w), "label": "positive" if y else "negative"}) + "\n")
PY
ft=(--model "$fixtures/case1_mlm_basic" --train "$work/train.jsonl" --validation "$work/val.jsonl" --max-length 16
    --batch 8 --epochs 2 --eval-every 6 --lr 5e-4 --dropout 0.1 --threads 1 --no-progress)
"$roformer" finetune "${ft[@]}" --out "$work/ft_one" > "$work/ft_one.log" 2>&1
"${mpirun[@]}" -np 2 "$roformer" finetune "${ft[@]}" --out "$work/ft_two" > "$work/ft_two.log" 2>&1
[ "$(grep -c "^best " "$work/ft_two.log")" = "$(grep -c "^best " "$work/ft_one.log")" ] ||
  { echo "finetune: rank 0 alone should print the results" >&2; cat "$work/ft_two.log" >&2; exit 1; }
python3 - "$work/ft_one/metrics.jsonl" "$work/ft_two/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 24, (len(a), len(b))
keys = [k for k in a[-1] if k == "loss" or k.startswith("val_")]
worst = max(abs(x[k] - y[k]) / max(abs(x[k]), 1e-3) for x, y in zip(a, b) for k in keys if k in x)
print(f"finetune -np 2 vs 1 process: largest relative difference {worst:.2e} over {keys}")
sys.exit(0 if worst <= 1e-5 else 1)
PY

echo "== ranks agree before they start: a rank with other data, or other options, stops the job before a step"
# Each rank runs through a wrapper that gives rank 1 a corpus whose last line differs, or a --seed of its own.
cp "$work/corpus.txt" "$work/corpus1.txt"
echo "the dark sea and the river." >> "$work/corpus1.txt"  # no new character: the same vocabulary
cat > "$work/per_rank.sh" <<'SH'
#!/usr/bin/env bash
# per_rank.sh WHAT ROFORMER ARGS...: rank 1 trains on corpus1.txt (WHAT=data) or with --seed 2 (WHAT=seed).
what="$1" roformer="$2"; shift 2
args=("$@")
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then
  if [ "$what" = data ]; then args=("${args[@]/corpus.txt/corpus1.txt}"); else args+=(--seed 2); fi
fi
exec "$roformer" "${args[@]}"
SH
chmod +x "$work/per_rank.sh"
for what in data seed; do
  status=0
  "${mpirun[@]}" -np 2 "$work/per_rank.sh" "$what" "$roformer" train "${opts[@]}" --out "$work/differ_$what" \
    > "$work/differ_$what.log" 2>&1 || status=$?
  [ "$status" -ne 0 ] || { echo "ranks that differ in $what trained" >&2; exit 1; }
  case "$what" in
    data) grep -q "rank 1 differs from rank 0 in its data (here: .*corpus1.txt, [0-9]* bytes): every rank must run the same binary" "$work/differ_$what.log" ;;
    seed) grep -q "rank 1 differs from rank 0 in its options (here: the run's options)" "$work/differ_$what.log" ;;
  esac || { echo "no error line naming rank 1 and its $what:" >&2; cat "$work/differ_$what.log" >&2; exit 1; }
  # (Rank 0's own line, naming rank 1, may be cut short when rank 1's MPI_Abort ends the job first.)
  if [ -e "$work/differ_$what/metrics.jsonl" ] && grep -q '"step"' "$work/differ_$what/metrics.jsonl"; then
    echo "a step was taken by ranks that differ in $what" >&2; exit 1
  fi
done

echo "all data-parallel checks passed"
