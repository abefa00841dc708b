# Sourced by the resume tests (train_resume.sh, finetune.sh), which set $roformer: stop a run in the
# background part-way and resume it.
# steps_logged DIR: the lines of DIR/metrics.jsonl (one per optimiser step).
# wait_for_steps DIR N: waits (at most 30 s) until the run in DIR has logged N steps.
# interrupt_and_resume SIGNAL N DIR SUBCOMMAND ARGS...: runs `roformer SUBCOMMAND ARGS... --out DIR`
#   (stderr to DIR.log), sends SIGNAL (KILL or INT) once it has logged N steps (INT: it must save,
#   say "interrupted at step" and exit 130), then runs `roformer SUBCOMMAND --resume --out DIR`.
steps_logged() { [ -f "$1/metrics.jsonl" ] && wc -l < "$1/metrics.jsonl" || echo 0; }
wait_for_steps() {
  for _ in $(seq 1 600); do
    [ "$(steps_logged "$1")" -ge "$2" ] && return 0
    sleep 0.05
  done
  echo "run in $1 did not reach step $2" >&2
  return 1
}
interrupt_and_resume() {
  local signal="$1" at="$2" dir="$3" command="$4" pid status=0
  shift 4
  "$roformer" "$command" "$@" --out "$dir" 2> "$dir.log" &
  pid=$!
  wait_for_steps "$dir" "$at"
  kill -"$signal" "$pid"
  wait "$pid" || status=$?
  if [ "$signal" = INT ]; then
    [ "$status" -eq 130 ] || { echo "SIGINT: expected status 130, got $status" >&2; cat "$dir.log" >&2; exit 1; }
    grep -q "interrupted at step" "$dir.log"
  fi
  echo "stopped by SIG$signal after $(steps_logged "$dir") logged steps; latest = $(cat "$dir/latest")"
  "$roformer" "$command" --resume --out "$dir" --no-progress 2>> "$dir.log"
}
