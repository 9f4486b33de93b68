# Sourced by the device-machine scripts (bench/h200.sh, bench/h200_cuda.sh) after bench/device_bin.sh, with
# `store`, `log` and `results` set: the call's deadline (`upto`) and `record`, which runs one ksearch command
# time-boxed and appends its JSON result.
# The call's own deadline (a device call ends at 600 s): each step gets what is left of CALL_S less a margin for
# what follows and the copy back, and a step that would start with under 20 s left is recorded as skipped.
call_end=$(( $(date +%s) + ${CALL_S:-560} ))
upto() {  # upto SECONDS: SECONDS, or what is left of the call less a margin when that is less (at least 1)
  local left=$(( call_end - $(date +%s) - 15 ))
  (( left < 1 )) && left=1
  (( $1 < left )) && echo "$1" || echo "$left"
}
record() {  # record NAME LIMIT_S CMD...: runs ksearch (time-boxed), appends {name, command, wall_s, result}
  local name=$1 limit=$2; shift 2
  local t0 t1 line left
  left=$(( call_end - $(date +%s) - 15 ))
  if (( left < 20 )); then
    python3 -c 'import json, sys; print(json.dumps({"name": sys.argv[1], "command": "ksearch " + sys.argv[2] + " --json", "skipped": "the call deadline (CALL_S) was near"}))' \
      "$name" "$*" >> "$results"
    echo "== $name: skipped, the call deadline is near (run it in another call: SECTIONS picks some)" >> "$log"
    return
  fi
  (( limit > left )) && limit=$left
  t0=$(date +%s.%N)
  line=$(timeout "$limit" "$bin" --python python3 --store "$store" "$@" --json 2>>"$log" | tail -n 1)
  t1=$(date +%s.%N)
  python3 - "$name" "$*" "$line" "$t0" "$t1" >> "$results" <<'PY'
import json, sys
name, cmd, line, t0, t1 = sys.argv[1:]
try:
    result = json.loads(line)
except Exception:
    result = {"error": "no JSON result (failed or timed out)", "stdout_tail": line[-2000:]}
print(json.dumps({"name": name, "command": "ksearch " + cmd + " --json", "wall_s": round(float(t1) - float(t0), 2),
                  "result": result}))
PY
  echo "== $name ($(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s): $(tail -c 300 <<< "$line")" >> "$log"
}
