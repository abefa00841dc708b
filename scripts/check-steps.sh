# Sourced by the hardware check scripts (cuda-check.sh, amx-check.sh): `step NAME COMMAND...` runs the
# command with its output in $out/NAME.log, appends PASS or FAIL (with the seconds it took) to
# $out/summary.txt, prints a failure's tail, and sets status=1 on failure. Sourcing starts an empty
# summary with status=0; the caller sets out first and ends with `exit "$status"`.
status=0
step() {
  local name="$1"; shift
  local t0=$SECONDS
  if "$@" > "$out/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
  else
    echo "FAIL $name ($((SECONDS - t0)) s): tail of $out/$name.log" | tee -a "$out/summary.txt"
    tail -25 "$out/$name.log"
    status=1
  fi
}
: > "$out/summary.txt"
