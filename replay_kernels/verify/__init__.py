"""The speculative verify step (k > 0 drafts a request). ``stochastic.py`` is the ``stochastic`` sampler: MRV2's
rejection sample (greedy and stochastic requests mixed, plain samples too), its position launches and each
request's walk, then the draw of ``draw/draw.py``; ``accept.py`` is the accept test of one draft position (greedy,
stochastic, bounded) and the end of a request's walk; ``verify_stats.py`` the span statistics of a verify row (max,
sum-exp, argmax; the masses top-p bounds need) and its log-sum-exp; ``verify_bounds.py`` the top-p accept tests
decided by bounds on the kept mass, and the exact-cut fallback for those left undecided (its filter passes:
``filters/filter_loop.py``). ``methods.py`` runs a step with block or FLy requests or under the ``mrv2-fp64``
contract (``method_rows.py``: the per-row quantities; ``method_walk.py``: each request's walk; then one draw, float64
under that contract: ``draw/draw64.py``). Nothing is imported here: import the module itself, so that importing the package
loads no Triton.
"""
