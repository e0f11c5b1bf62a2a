#!/usr/bin/env bash
# The kernel copies this session's calls carry (run from the repo root, before the call that names them).
#   scratch/b9b, scratch/head: the kernels of 9b062f2 (before the thirty-second session) and 9149043 (this session's start)
#   scratch/b4k: call 4, head with bf16-sized position tiles (stochastic.STATS_BLOCK 4096, STATS_SPAN 16384); call 5 took
#                the same edit on the 2-warp-draw tree (5a below) and POSITION_MAXNREG 80
#   scratch/a2:  call 6, the 2-warp-draw tree with ahead2.patch (two bf16 tiles in flight)
#   scratch/pre: call 7, the 2-warp-draw tree (9149043's position launches)
#   scratch/chain: the next session's first call, HEAD + chain.patch (`make_variants.sh chain`: only that copy)
set -eu
if [ "${1:-}" = chain ]; then
  t=$(mktemp -d); git archive HEAD replay_kernels | tar -x -C $t  # outside the repo: git apply takes the paths as given
  (cd $t && git apply --include='replay_kernels/*' "$OLDPWD/docs/bench/2026-12-04-h200-s33/scripts/chain.patch")
  rm -rf scratch/chain && mkdir -p scratch/chain && mv $t/replay_kernels scratch/chain/ && rm -rf $t
  exit 0
fi
rm -rf scratch/b9b scratch/head scratch/b4k scratch/a2 scratch/pre
for c in b9b:9b062f2 head:9149043; do mkdir -p scratch/${c%%:*}; git archive ${c##*:} replay_kernels | tar -x -C scratch/${c%%:*}; done
mkdir -p scratch/pre && cp -r scratch/head/replay_kernels scratch/pre/  # + the 2-warp draw shape for 8-15 rows:
sed -i 's/(16, 512, 1, DRAW_PROGRAMS, True, 96)/(16, 512, 2, DRAW_PROGRAMS, True, 96)/' scratch/pre/replay_kernels/draw.py
mkdir -p scratch/b4k && cp -r scratch/pre/replay_kernels scratch/b4k/   # 5a
sed -i 's/^STATS_BLOCK = 2048/STATS_BLOCK = 4096/; s/^STATS_SPAN = 8192/STATS_SPAN = 16384/; s/^POSITION_MAXNREG = 64/POSITION_MAXNREG = 80/' \
  scratch/b4k/replay_kernels/stochastic.py
mkdir -p scratch/a2 && cp -r scratch/pre/replay_kernels scratch/a2/
(cd scratch/a2 && patch -p1 < ../../docs/bench/2026-12-04-h200-s33/scripts/ahead2.patch)
