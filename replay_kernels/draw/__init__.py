"""The plain sample (k = 0) and the one kernel every drawn token comes from. ``draw.py`` is that kernel (pruned
argmax / Gumbel-max over split rows, the draw plan's ``MODE_*``), launched by the plain samplers and by the verify
alike; ``plain.py`` is what the k = 0 samplers share (prepare / launch / sample, the route a filtered row takes);
``gumbel_max.py`` (``gumbel-max``) and ``serial_scan.py`` (``serial-scan``) are those samplers; ``sample_check.py``
applies top-k or top-p by drawing first and checking the drawn token (no bound search; the verify's top-p draws
too), ``one_launch.py`` does the same in one launch for small steps (per-row barriers, resident programs) and
``open_rows.py`` settles in one launch the rows a first check leaves open; ``draw64.py`` is the draw under the
``mrv2-fp64`` contract (float64 scores and noise, the same draw plan). Nothing is imported here: import the
module itself, so that importing the package loads no Triton.
"""
