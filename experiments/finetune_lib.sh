# Sourced by the experiment scripts that fine-tune (chinese.sh, glue_en.sh, mrpc_diagnose.sh), which
# set $roformer: the one way they run a fine-tuning, so that a run cut short is continued by the next
# invocation, not restarted.
# finetune_or_resume DIR ARGS...: for a DIR without a finished run (the callers skip a DIR that holds
#   predictions.jsonl: they fine-tune with --predict), `roformer finetune --resume --out DIR` where it
#   holds a run cut short (a checkpoint named in DIR/latest), which ends bit-exact as the
#   uninterrupted run would (tests/cli/finetune.sh); else `roformer finetune ARGS... --out DIR` in a
#   cleared DIR. Its messages go to DIR.log (appended to on resume).
finetune_or_resume() {
  local dir="$1"
  shift
  if [ -f "$dir/latest" ]; then
    "$roformer" finetune --resume --out "$dir" --no-progress 2>> "$dir.log"
  else
    rm -rf "$dir"
    "$roformer" finetune "$@" --out "$dir" 2> "$dir.log"
  fi
}
