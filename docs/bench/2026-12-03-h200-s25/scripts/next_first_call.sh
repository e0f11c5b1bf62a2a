#!/usr/bin/env bash
# Prepared for the next session's first GPU call (not run yet). 1) tests/test_ex2.py on the GPU (its fifth test,
# sums over tiles far below the running maximum, came after this session's last call). 2) A/B of the tree against
# two untimed variants of the bounded verify stats: `order` = bounded_order_by_tile.patch (the (value, id) order
# tested by value alone in tiles wholly before or after the draft), `s512` = BOUND_SUM_BLOCK 512 (3% faster at R = 8
# before ex2), `resid` = residual_held_once.patch (the first draw flags a one-hot RESIDUAL row's top as held once when
# the rejected draft is below it: the verify's first check then keeps such a drawn token unread; its CPU test is in
# the patch). Tokens compared in every step.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s25/scripts/next_first_call.sh")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/next; mkdir -p $G
timeout 150 python3 -m pytest -q tests/test_ex2.py -p no:cacheprovider > $G/ex2_tests.txt 2>&1
echo "ex2 tests rc=$?"; tail -2 $G/ex2_tests.txt
rm -rf scratch/order && mkdir -p scratch/order && cp -r replay_kernels scratch/order/ && \
  (cd scratch/order && patch -p1 < ../../docs/bench/2026-12-03-h200-s25/scripts/bounded_order_by_tile.patch)
rm -rf scratch/resid && mkdir -p scratch/resid && cp -r replay_kernels tests scratch/resid/ && \
  (cd scratch/resid && patch -p1 < ../../docs/bench/2026-12-03-h200-s25/scripts/residual_held_once.patch)
timeout 330 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$" \
  --variant tree=replay_kernels --variant order=scratch/order/replay_kernels --variant resid=scratch/resid/replay_kernels \
  --variant s512=replay_kernels \
  --set "s512:verify_stats.BOUND_SUM_BLOCK=tl.constexpr(512)" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt | head -20; grep "^\*" $G/ab.txt | grep "top-p" | head
