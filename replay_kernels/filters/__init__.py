"""The sampling parameters of a row as one filter bound ``(cut_val, cut_idx)``, applied while the logits are read
(no processed copy is ever written). ``params.py`` says what the bound means and applies it (temperature, then
``load_processed`` / ``process_loaded``), with the per-row parameters a sampler prepares; ``bound_rules.py`` holds
the rules every search shares (keep mask, float keys, 16-way narrowing, min-p bound, the top-p cut inside a tie
group); ``filters.py`` searches the bound with many programs per row (where min-p, top-k and top-p get their cut);
``filter_loop.py`` runs the same passes in one cooperative launch (the verify fallback's exact top-p cuts);
``topk_gather.py`` finds a top-k row's bound from the values gathered at or above its k-th block maximum, and
``candidate_draw.py`` draws such a row from those candidates. Before all of them, ``processors.py`` writes the
float32 rows of a batch with the grammar mask and the logits processors (the samplers then read those rows); after
the sampler, ``logprobs.py`` computes the logprobs, top-n, ranks and kept sets of the emitted slots. Nothing is
imported here: import the module itself, so that importing the package loads no Triton.
"""
