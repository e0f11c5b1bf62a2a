"""The ninth session's A/B baseline for the archived sweep scripts next to this file."""
import importlib.util
import sys


def load_old_draw():
    """ece9e68's replay_kernels/draw.py (the A/B baseline), from git, as module replay_kernels._draw_old (its
    rng.NOISE_MAX, since removed, defined in place)."""
    import subprocess
    import tempfile
    src = subprocess.check_output(["git", "show", "ece9e68:replay_kernels/draw.py"], text=True)
    src = src.replace("from .rng import (NOISE_MAX, gumbel_upper_bound,", "from .rng import (gumbel_upper_bound,")
    src = src.replace("MODE_NONE = tl.constexpr(0)", "NOISE_MAX = tl.constexpr(23.0)\nMODE_NONE = tl.constexpr(0)", 1)
    path = tempfile.NamedTemporaryFile("w", suffix="_draw_old.py", delete=False)
    path.write(src)
    path.close()
    spec = importlib.util.spec_from_file_location("replay_kernels._draw_old", path.name)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "replay_kernels"
    sys.modules["replay_kernels._draw_old"] = module
    spec.loader.exec_module(module)
    return module
