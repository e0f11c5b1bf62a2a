"""`replay` with one more impl, `slowed`: the `stochastic` kernels, each launch behind DELAY_US microseconds of extra
device work (a GPU sleep kernel; a host sleep on the CPU). docs/BENCH.md "Baselines" runs it to show that
`replay bench --compare-baseline F --fail-above R` fails a slowed kernel and passes the unchanged one:

    DELAY_US=0  python3 tools/slowed_bench.py bench fixtures/real-founding --impl slowed --save-baseline base.json
    DELAY_US=0  python3 tools/slowed_bench.py bench ... --compare-baseline base.json --fail-above 1.10   # exit 0
    DELAY_US=20 python3 tools/slowed_bench.py bench ... --compare-baseline base.json --fail-above 1.10   # exit 1
"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from replay_harness import impls  # noqa: E402
from replay_harness.cli import main  # noqa: E402
from replay_harness.impls.kernel_impls import StochasticSampler  # noqa: E402


class Slowed(StochasticSampler):
    def launch(self, state):
        us = float(os.environ.get("DELAY_US", "0"))
        if us > 0 and torch.cuda.is_available():
            torch.cuda._sleep(int(us * 1.98e3))  # cycles at about 1.98 GHz
        elif us > 0:
            time.sleep(us * 1e-6)
        return super().launch(state)


impls.register("slowed", Slowed)
sys.exit(main())
