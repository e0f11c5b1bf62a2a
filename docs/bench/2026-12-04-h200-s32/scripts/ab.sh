# Sourced by this session's call scripts (G = the call's results folder under $OUT):
# ab OUTFILE TIMEOUT ARGS... runs tools/ab_kernels.py ARGS under a timeout, keeps its output in $G/OUTFILE and
# prints the tables, any differing tokens or errors, and the per-kernel lines.
ab() {
  local f=$1 t=$2; shift 2
  timeout $t python3 tools/ab_kernels.py "$@" 2>&1 | grep -v -i warn > $G/$f
  echo "== $f rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error|^\* " $G/$f
}
