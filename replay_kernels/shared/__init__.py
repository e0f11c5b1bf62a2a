"""What the kernels of every sampler share, none of it a sampler: ``rng.py`` the ``mrv2`` RNG contract as
``@triton.jit`` device functions (Philox accept uniform, murmur3 Gumbel noise, ``noised_score`` and ``better``, the
argmax order of every merge); ``partials.py`` the per-program partials of a split row and their reduction by the
last program to arrive (``last_to_arrive``, ``block_argmax``, ``block_max``); ``launches.py`` the one path every
kernel is launched through (``launch``), a prepared state's launch sequence recorded once and replayed
(``run_recorded``), programmatic dependent launch (``pdl_wait``) and cooperative launches; ``ex2.py`` the softmax
terms' exp in one ``MUFU.EX2`` (``exp_terms``); ``interpret.py`` the ``TRITON_INTERPRET=1`` CPU path (whether
Triton interprets, its repeated language patching skipped). Nothing is imported here: import the module itself
(``from replay_kernels.shared.rng import gumbel_noise``), so that importing the package loads no Triton.
"""
