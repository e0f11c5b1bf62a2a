"""Fixture schema v1, tabled once: names, versions, file layout, route codes and every step tensor.

docs/FIXTURES.md is the normative description; this module is the one table the code reads it from
(``store`` writes and reads it, ``validate`` checks it, ``recorder`` converts to it, ``step`` holds it,
``impls.external`` sends it). Adding a field means one row in :data:`FIELDS` (plus the rule that checks
its values in ``validate``, if any).

Shapes are written with the symbols of docs/FIXTURES.md: R requests, N = sum(1 + k_r) logits rows,
V vocabulary, ``N-R`` verify rows, ``K+1`` = max k_r + 1 emitted slots, ``R+1`` prefix-sum entries,
``W`` = ceil(V / 32) bitmask words, ``L`` logprob columns (>= 1 + the largest count asked for) and ``*`` a
ragged list split by request by its ``ragged`` partner (an ``[R+1]`` prefix sum).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

# ----------------------------------------------------------------------------- names and versions
RECORDING_SCHEMA = "replay.recording"
STEP_SCHEMA = "replay.step"
SCHEMA_MAJOR = 1
SCHEMA_MINOR = 2  # 1 (2026-12-04): digest_algorithm, expected_tokens, write_stats; 2 (2026-12-07): the sampling
                  # pipeline's inputs (histories, penalties, bias, allowed / bad / stop tokens, min-tokens, grammar
                  # masks, logprob requests) and the emitted logprobs and kept sets (docs/FIXTURES.md)
RECORDING_SCHEMA_ID = f"{RECORDING_SCHEMA}/{SCHEMA_MAJOR}"  # manifest.json "schema"
STEP_SCHEMA_ID = f"{STEP_SCHEMA}/{SCHEMA_MAJOR}"            # each step file's metadata "schema"

# ----------------------------------------------------------------------------- layout on disk
MANIFEST = "manifest.json"
STEPS_DIR = "steps"
STEP_RE = re.compile(r"^step-([0-9]{6,})\.safetensors\Z")  # ASCII digits; \Z: "$" would take a final newline
METADATA_KEY = "replay"  # the one safetensors metadata key (one key keeps header order stable)


# ----------------------------------------------------------------------------- manifest.json
@dataclass(frozen=True)
class ManifestKey:
    """One key of ``manifest.json`` (docs/FIXTURES.md, "manifest.json").

    kind      what its value must be: "schema" (the recording schema id, major checked by readers),
              "count" (int >= 0), "positive" (int >= 1), "name" (non-empty string), "bool", "object",
              "digest" (lowercase hex: 64 characters for sha256, 32 for xxh3-128), "algorithm" (a digest
              algorithm's name), "expected" (the string "reference")
    closed    required only once the recording is closed (``complete`` is true); before, any value
    """

    name: str
    kind: str
    closed: bool = False


MANIFEST_KEYS = (
    ManifestKey("schema", "schema"),
    ManifestKey("schema_minor", "count"),
    ManifestKey("vocab_size", "positive"),
    ManifestKey("rng_contract", "name"),
    ManifestKey("synthetic", "bool"),
    ManifestKey("source", "object"),
    ManifestKey("complete", "bool"),
    ManifestKey("num_steps", "count", closed=True),
    ManifestKey("digest", "digest", closed=True),
)
# Optional keys: a writer may leave them out (readers take the default); when present, of their kind.
OPTIONAL_MANIFEST_KEYS = (
    ManifestKey("dropped_steps", "count"),  # steps an asynchronous writer skipped, queue full; absent: 0
    ManifestKey("digest_algorithm", "algorithm"),  # "sha256" (absent) or "xxh3-128"
    ManifestKey("expected_tokens", "expected"),  # "reference": emitted_* hold the reference's tokens (synth)
    ManifestKey("write_stats", "object"),  # what the writer did: steps, bytes, seconds, MBps, phases (informative)
)


def step_file_name(index: int) -> str:
    """``step-000042.safetensors``: the name of step ``index``'s file in :data:`STEPS_DIR`."""
    return f"step-{index:06d}.safetensors"


# ----------------------------------------------------------------------------- routes
# The path a request took in a step (see step.expected_route). Stored as int8 codes: the index here.
ROUTES = ("greedy-sample", "random-sample", "greedy-verify", "stochastic-verify", "refused")
ROUTE_CODE = {name: code for code, name in enumerate(ROUTES)}
UNKNOWN_ROUTE = -1


def route_name(code: int) -> str:
    return ROUTES[code] if 0 <= code < len(ROUTES) else "unknown"


# ----------------------------------------------------------------------------- step tensors
INPUT, EMITTED, UNSUPPORTED = "input", "emitted", "unsupported"
FLOATS = (torch.float32, torch.bfloat16, torch.float16)  # logits dtypes kept as recorded (lossless)


@dataclass(frozen=True)
class Field:
    """One tensor name of a step file.

    dtypes    allowed dtypes; the first is the one writers convert to (empty: unsupported)
    shape     symbolic dims (see the module docstring); the first names what it is one-per
    role      INPUT (a :class:`~replay_harness.recording.step.Step` field), EMITTED (the engine's
              answer) or UNSUPPORTED (reserved name; a step carrying it is refused)
    required  whether every step file holds it
    ragged    for shape ``("*",)``: the ``[R+1]`` prefix-sum field whose entries split it by request
    """

    name: str
    dtypes: tuple[torch.dtype, ...]
    shape: tuple[str, ...]
    role: str
    required: bool = True
    ragged: str | None = None

    @property
    def dtype(self) -> torch.dtype:
        """The dtype writers store it as."""
        return self.dtypes[0]


_I32, _I64, _I8, _F32 = (torch.int32,), (torch.int64,), (torch.int8,), (torch.float32,)

# The one table. Row order is the order tensors are named, converted and checked in (messages list
# problems in it): inputs as Step holds them, then what the engine emitted, then the reserved names.
FIELDS = (
    Field("logits", FLOATS, ("N", "V"), INPUT),
    Field("cu_num_logits", _I32, ("R+1",), INPUT),
    Field("draft_token_ids", _I32, ("N",), INPUT),
    Field("positions", _I64, ("N",), INPUT),
    Field("temperature", _F32, ("R",), INPUT),
    Field("top_k", _I32, ("R",), INPUT),
    Field("top_p", _F32, ("R",), INPUT),
    Field("min_p", _F32, ("R",), INPUT),
    Field("seed", _I64, ("R",), INPUT),
    Field("request_ids", _I64, ("R",), INPUT),
    Field("draft_logits", FLOATS, ("N-R", "V"), INPUT, required=False),
    # Schema minor 2: the sampling pipeline's inputs (docs/FIXTURES.md, "The sampling pipeline"). Absent: the
    # rule is off. Per request, then the ragged lists (each split by request by its cu_* partner), then per row.
    Field("repetition_penalty", _F32, ("R",), INPUT, required=False),
    Field("frequency_penalty", _F32, ("R",), INPUT, required=False),
    Field("presence_penalty", _F32, ("R",), INPUT, required=False),
    Field("min_tokens", _I32, ("R",), INPUT, required=False),
    Field("has_grammar", _I8, ("R",), INPUT, required=False),
    Field("logprobs", _I32, ("R",), INPUT, required=False),
    Field("logprobs_mode", _I8, ("R",), INPUT, required=False),
    *(f for name, dt in (("prompt_token_ids", _I32), ("output_token_ids", _I32), ("allowed_token_ids", _I32),
                         ("stop_token_ids", _I32), ("bad_words_token_ids", _I32), ("bad_words_lengths", _I32))
      for f in (Field(name, dt, ("*",), INPUT, required=False, ragged="cu_" + name),
                Field("cu_" + name, _I32, ("R+1",), INPUT, required=False))),
    Field("logit_bias_ids", _I32, ("*",), INPUT, required=False, ragged="cu_logit_bias"),
    Field("logit_bias_values", _F32, ("*",), INPUT, required=False, ragged="cu_logit_bias"),
    Field("cu_logit_bias", _I32, ("R+1",), INPUT, required=False),
    Field("grammar_bitmask", _I32, ("N", "W"), INPUT, required=False),
    # How drafts were verified and drawn (docs/FIXTURES.md, "Verification methods"). Absent: standard, greedy.
    Field("verify_method", _I8, ("R",), INPUT, required=False),
    Field("fly_window", _I32, ("R",), INPUT, required=False),
    Field("fly_entropy_threshold", _F32, ("R",), INPUT, required=False),
    Field("fly_entropy_top_k", _I32, ("R",), INPUT, required=False),
    Field("draft_sampling", _I8, ("R",), INPUT, required=False),
    Field("tree_parent", _I32, ("N",), INPUT, required=False),  # draft trees: each node's parent ("Draft trees")
    Field("emitted_tokens", _I32, ("R", "K+1"), EMITTED),
    Field("emitted_counts", _I32, ("R",), EMITTED),
    Field("emitted_routes", _I8, ("R",), EMITTED, required=False),
    Field("emitted_logprobs", _F32, ("R", "K+1", "L"), EMITTED, required=False),
    Field("emitted_logprob_ids", _I32, ("R", "K+1", "L"), EMITTED, required=False),
    Field("emitted_logprob_ranks", _I32, ("R", "K+1"), EMITTED, required=False),
    Field("emitted_kept_mask", _I32, ("R", "K+1", "W"), EMITTED, required=False),
    # Names reserved by minor 1 and not adopted (the adopted ones are above): a step carrying one is refused.
    *(Field(name, (), (), UNSUPPORTED, required=False) for name in ("bad_words_ids", "allowed_token_mask")),
)
FIELD = {f.name: f for f in FIELDS}


def _names(role: str, required: bool | None = None, shape: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Names of the fields with this role (and, when given, this required flag and shape), in table order."""
    return tuple(f.name for f in FIELDS if f.role == role and (required is None or f.required == required)
                 and (shape is None or f.shape == shape))


# Views of the table, by the names the modules have always used.
STEP_FIELDS = _names(INPUT, required=True)           # required inputs, in Step order
OPTIONAL_FIELDS = _names(INPUT, required=False)      # draft_logits and the pipeline inputs
EMITTED_FIELDS = _names(EMITTED, required=True)      # ("emitted_tokens", "emitted_counts")
OPTIONAL_EMITTED = _names(EMITTED, required=False)   # emitted_routes, the logprobs, the kept sets
UNSUPPORTED_FIELDS = _names(UNSUPPORTED)
PER_REQUEST_FIELDS = _names(INPUT, shape=("R",))     # the [R] inputs a Step sub-batch indexes by request
RAGGED_FIELDS = _names(INPUT, shape=("*",))          # the ragged lists, each split by FIELD[name].ragged
PIPELINE_FIELDS = tuple(f.name for f in FIELDS if f.role == INPUT and not f.required
                        and f.name != "draft_logits")  # schema minor 2's inputs, all optional
LOGPROB_FIELDS = ("emitted_logprobs", "emitted_logprob_ids", "emitted_logprob_ranks")  # come together
LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits")  # logprobs_mode codes
VERIFY_METHODS = ("standard", "block", "fly", "tree")  # verify_method codes ("tree": docs/FIXTURES.md "Draft trees")
DRAFT_SAMPLING = ("greedy", "probabilistic")  # draft_sampling codes
FLY_FIELDS = ("fly_window", "fly_entropy_threshold", "fly_entropy_top_k")
# RNG contracts replay's oracle implements: `mrv2` (float32 Gumbel noise) and `mrv2-fp64` (vLLM's use_fp64_gumbel:
# float64 noise from 53-bit uniforms). Any other name is an engine's own (tokens compared statistically only).
RNG_CONTRACTS = ("mrv2", "mrv2-fp64")
KNOWN_FIELDS = frozenset(FIELD)
