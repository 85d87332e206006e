"""Matrix files: a whole study as engine x target x arm (method, n) x workload x concurrency.

A matrix is validated and expanded completely before anything runs. Every speculative cell is
paired with its baseline: the cell with the same engine, target model, workload, concurrency,
server and sampling settings and ``method: none``; a speculative cell without one is an error.

Careless and hostile input is bounded before it costs anything: the file is read as UTF-8 up
to :data:`MAX_MATRIX_BYTES`; each integer axis holds at most
:data:`~crossbench.runner.axes.MAX_AXIS_VALUES` values (sized before expansion, see
:mod:`crossbench.runner.axes`); a matrix expands to at most :data:`MAX_CELLS` cells (with a
note from :func:`validate_cells` above :data:`NOTE_CELLS`) and runs at most :data:`MAX_TRIALS`
trials per cell. docs/matrix.md gives the reasons for each cap.

Schema history (``schema_version``): 1 -- first version.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from crossbench.confounds.provenance import redact_argv
from crossbench.engines import registry
from crossbench.engines.bind import exposure_warning
from crossbench.engines.spec import StrictModel
from crossbench.errors import UserError, first_validation_error
from crossbench.load.settings import LoadSettings
from crossbench.models import HFModelRef
from crossbench.runner.axes import parse_int_axis
from crossbench.runner.config import MAX_TRIALS as MAX_TRIALS
from crossbench.runner.config import server_block, several_starts_block
from crossbench.store.rundir import CELL_SEPARATOR, cell_folder
from crossbench.textfile import MIB, decode_text, read_bytes

if TYPE_CHECKING:
    from crossbench.analysis.start_spread import StartSpread
    from crossbench.engines.registry import SharedDrafts

MAX_MATRIX_BYTES = MIB
"""Largest matrix file read (1 MiB): the largest example matrix is a few KiB; a bigger file
is a wrong path (a model, a log, ``/dev/zero``), never a study."""

NOTE_CELLS = 500
"""Cell count above which `validate` notes the size of the study: at 3 trials and a few
seconds' server start-up each, 500 cells are already hours of start-ups alone."""

MAX_CELLS = 10_000
"""Most cells a matrix may expand to: 10,000 cells x 3 trials is more than a day of server
start-ups before any request; split such a study into several matrices."""

MAX_COMBINATIONS = 100 * MAX_CELLS
"""Most axis combinations expansion looks at, before exclusions and engine scoping drop
some (keeps a matrix whose axes cross to millions of combinations from hanging)."""


class Study(StrictModel):
    """Who and what the study is."""

    name: str = Field(description="Short name; used in run directories and reports.")
    notes: str = Field("", description="Free text: purpose, caveats, what was held fixed.")

    @field_validator("name")
    @classmethod
    def _one_line(cls, v: str) -> str:
        bad = next((c for c in v if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
        if bad is not None:  # a CR or LF would break, or overwrite, the lines it is printed in
            raise ValueError(f"holds the control character {ascii(bad)[1:-1]}: a name is "
                             "printed on one line; use letters, digits, spaces and punctuation")
        return v


class Hardware(StrictModel):
    """What the study expects to run on (recorded; checked against the host when it runs)."""

    gpu: str | None = Field(None, description="GPU model, e.g. 'NVIDIA GeForce RTX 3090'.")
    gpu_count: int | None = Field(None, ge=0, description="GPUs the study uses.")


class EngineEntry(StrictModel):
    """One engine build: crossbench's build of a pin, or your own binary."""

    kind: str = Field("llama-server", description="Registered engine adapter.")
    pin: str | None = Field(None, description="Source pin of a crossbench build, e.g. "
                            "llama-cpp-python==0.3.36 (default pin when neither is set).")
    binary: str | None = Field(None, description="Your own server binary, used as is.")
    variant: str | None = Field(None, description="Build variant of the pin (llama-server: "
                                "cpu or cuda-smNN; default cpu).")
    requires: str | None = Field(None, pattern=r"^(==|>=|<=|>|<|!=)\s*[\w.+-]+(\s*,\s*(==|>=|"
                                 r"<=|>|<|!=)\s*[\w.+-]+)*$",
                                 description="Version constraint checked against the engine "
                                 "actually run before any trial, e.g. '>=11312' (llama-server "
                                 "build number) or '>=0.33,<0.34' (vLLM version).")
    server: dict[str, Any] = Field(default_factory=dict, description="Settings for this "
                                   "engine only, merged over the matrix's `server` (e.g. "
                                   "tensor_parallel_size for vllm, ctx_size for llama-server).")

    @model_validator(mode="after")
    def _one_source(self) -> EngineEntry:
        if self.pin is not None and self.binary is not None:
            raise ValueError("set either pin or binary, not both")
        return self


class HFFile(StrictModel):
    """A file in a Hugging Face model repository at a fixed revision."""

    repo: str = Field(description="OWNER/REPO.")
    revision: str = Field(description="Commit hash (best) or tag; recorded with the result.")
    file: str | None = Field(None, description="File name inside the repository (GGUF "
                             "engines); omit for engines that load a whole repo (vllm).")


class ModelEntry(StrictModel):
    """A model file: a local path, ``fixture:target|draft``, or a Hugging Face file."""

    path: str | None = Field(None, description="Local GGUF, or fixture:target / fixture:draft "
                             "for the project's own models.")
    hf: HFFile | None = Field(None, description="Hugging Face repo + revision + file.")
    quant: str = Field(description="Quantization label, e.g. Q4_K_M (a confound if it differs).")
    role: Literal["target", "draft"] = Field(description="What the model is used as.")
    engines: list[str] | None = Field(None, description="Engine ids that load this model "
                                      "(default: all); cells crossing it with another engine "
                                      "are left out.")

    @model_validator(mode="after")
    def _one_source(self) -> ModelEntry:
        if (self.path is None) == (self.hf is None):
            raise ValueError("set exactly one of path and hf")
        return self

    def reference(self) -> str:
        """The model as written: a path, fixture:..., or hf://OWNER/REPO@REV/FILE."""
        if self.hf is not None:
            if self.hf.file is None:
                return f"hf://{self.hf.repo}@{self.hf.revision}"
            return str(HFModelRef(self.hf.repo, self.hf.revision, self.hf.file))
        assert self.path is not None
        return self.path


def _not_a_bool(value: Any) -> Any:
    """Refuse YAML's yes/no/true/false where a number belongs (pydantic would read 1 or 0)."""
    if isinstance(value, bool) or (isinstance(value, list)
                                   and any(isinstance(v, bool) for v in value)):
        raise ValueError(f"{str(value).lower()} is a yes/no value, not a number; write e.g. 4")
    return value


class Arm(StrictModel):
    """One speculative configuration (or the baseline, ``method: none``), swept over n."""

    name: str | None = Field(None, description="Label in cell ids; needed when two arms share "
                             "a method (e.g. real vs synthetic acceptance).")
    method: str = Field(description="Speculative method as the engine names it "
                        "(llama-server: a --spec-type such as draft-simple or ngram-mod; vllm: "
                        "a speculative-config method such as mtp or eagle3), or none.")
    engines: list[str] | None = Field(None, description="Engine ids this arm runs on "
                                      "(default: all).")
    draft: str | None = Field(None, description="Model id (role draft) for draft-* methods.")
    n: int | str | list[int] | None = Field(None, description="Drafted tokens per step: a "
                                             "value, a list, or a range such as 1-15+2.")
    synth_rates: list[float] | None = Field(None, description="Synthetic per-position "
                                            "acceptance (fractions), one per position.")
    synth_len: float | None = Field(None, description="Synthetic mean acceptance length.")
    synth_alpha: float | None = Field(None, gt=0, le=1, description="Synthetic geometric "
                                      "acceptance: rates alpha^(k+1) for positions k < n, "
                                      "made for each n of the arm.")
    spec: dict[str, Any] = Field(default_factory=dict, description="Other fields of the "
                                 "engine's spec config, e.g. ngram_mod_n_match.")

    _n_not_a_bool = field_validator("n", mode="before")(_not_a_bool)


class Axes(StrictModel):
    """The crossed dimensions besides the arms."""

    engine: list[str] = Field(description="Engine ids from `engines`.")
    target: list[str] = Field(description="Model ids (role target) from `models`.")
    workload: list[str] = Field(default_factory=lambda: ["builtin:mixed"],
                                description="Workload specs (builtin:..., random:N, file:...).")
    concurrency: int | str | list[int] = Field(1, description="Requests in flight: value, "
                                               "list or range.")

    _concurrency_not_a_bool = field_validator("concurrency", mode="before")(_not_a_bool)


class Exclusion(StrictModel):
    """Cells to leave out: every given coordinate must match."""

    engine: str | None = Field(None, description="Engine id.")
    target: str | None = Field(None, description="Target model id.")
    arm: str | None = Field(None, description="Arm name (or method when unnamed).")
    method: str | None = Field(None, description="Method.")
    n: int | None = Field(None, description="n.")
    workload: str | None = Field(None, description="Workload spec.")
    concurrency: int | None = Field(None, description="Concurrency.")


class Schedule(StrictModel):
    """Order of trials: interleaved rounds (drift hits every arm alike) or sequential."""

    order: Literal["interleaved", "sequential"] = Field(
        "interleaved", description="interleaved: round k runs trial k of every cell, shuffled; "
        "sequential: all trials of a cell, then the next.")
    seed: int = Field(0, description="Seed of the shuffle (recorded).")
    baselines_first: bool = Field(
        False, description="interleaved: every round runs its baseline cells (with their "
        "shared starts) before the speculative ones, so a run cut short (a lease, a kill) "
        "leaves each finished speculative trial its baseline; the order is otherwise the "
        "shuffle's.")

    @model_validator(mode="after")
    def _first_needs_rounds(self) -> Schedule:
        if self.baselines_first and self.order != "interleaved":
            raise ValueError("baselines_first orders the cells within each interleaved round; "
                             "set order: interleaved, or drop baselines_first")
        return self


class SequentialStop(StrictModel):
    """Stop a cell once its verdict is settled (crossbench.analysis.sequential; docs/matrix.md,
    "Sequential stopping"): ``trials`` is then the most a cell runs."""

    alpha: float = Field(0.05, gt=0, lt=0.5, description="Error rate of all the rule's "
                         "decisions together (its repeated intervals are 1 - alpha).")
    min_trials: int = Field(3, ge=1, description="No stop before this many paired trials "
                            "(server starts with trials_per_start); at least 2 without a "
                            "start_spread, which lets one trial decide.")
    min_prompts: int = Field(2, ge=1, description="Prompts every trial must hold (without a "
                             "start_spread).")
    min_samples: int = Field(10, ge=1, description="With a start_spread: paired requests "
                             "before any stop (the analysis's min_samples, so a stopped cell "
                             "has a verdict to report).")
    equivalence: float | None = Field(None, gt=0, lt=1, description="Relative band (0.02: "
                                      "+-2 %) inside which a speedup counts as none; None: "
                                      "never stop as equivalent.")
    spending: Literal["obrien-fleming", "pocock"] = Field(
        "obrien-fleming", description="Alpha-spending function of the looks.")
    look_every: int | None = Field(None, ge=1, description="With a start_spread: look after "
                                   "every this many measured requests of a trial as well, not "
                                   "only at its end. A look may stop the cell, or end the trial "
                                   "when no more requests on its server start could settle it, "
                                   "so that the next trial's fresh start adds what this one "
                                   "cannot. Needs trials_per_start 1, concurrency 1 and the "
                                   "local executor; baselines run first in every round.")


class ProbePredict(StrictModel):
    """Measure a few n of each n-sweep, predict the rest from the cost model, and measure
    only where the prediction is not clear (crossbench.runner.probe; docs/matrix.md,
    "Probe-and-predict sweeps")."""

    probes: int = Field(3, ge=2, description="n measured first in each sweep: the smallest, "
                        "the largest and evenly spaced ones between (the largest measures "
                        "the acceptance of every smaller n; two fix the cost line).")
    holdout: int = Field(1, ge=0, description="Cells per sweep predicted clearly but measured "
                         "anyway, to check the predictions against measurement.")
    seed: int = Field(0, description="Seed of the holdout choice (recorded).")


class ThermalGate(StrictModel):
    """Before each trial, wait until every GPU has cooled to a temperature (NVML readings)."""

    max_temp_c: float = Field(gt=0, description="Start a trial only when the hottest GPU is "
                              "at or below this temperature (Celsius).")
    timeout_s: float = Field(600.0, gt=0, description="Longest wait; after it the trial runs "
                             "and the journal records the gate as not passed.")
    poll_s: float = Field(2.0, gt=0, description="Seconds between readings.")


class Matrix(StrictModel):
    """A whole study. See docs/matrix.md."""

    schema_version: Literal[1] = Field(description="Matrix format version (1).")
    study: Study = Field(description="Name and notes.")
    hardware: Hardware = Field(default_factory=Hardware, description="Expected hardware.")
    engines: dict[str, EngineEntry] = Field(description="Engine builds by id.")
    models: dict[str, ModelEntry] = Field(description="Model files by id.")
    server: dict[str, Any] = Field(default_factory=dict, description="Engine settings shared "
                                   "by every cell (e.g. ctx_size, n_gpu_layers, threads).")
    load: dict[str, Any] = Field(default_factory=dict, description="Sampling and request "
                                 "settings shared by every cell (crossbench run's load fields "
                                 "except workload and concurrency, which are axes).")
    arms: list[Arm] = Field(description="Speculative configurations; include method: none.")
    axes: Axes = Field(description="Crossed dimensions.")
    exclude: list[Exclusion] = Field(default_factory=list, description="Cells to leave out.")
    trials: int = Field(3, ge=1, description="Trials per cell (at least 2 to report a spread).")
    schedule: Schedule = Field(default_factory=Schedule, description="Trial order.")
    fresh_server: bool = Field(True, description="New server for every cell and trial "
                               "(false: one server per cell, all its trials back to back).")
    sequential: SequentialStop | None = Field(
        None, description="Stop cells early once settled (sequential rule); needs interleaved "
        "order. With trials_per_start the rule looks once per server start.")
    probe_predict: ProbePredict | None = Field(
        None, description="Run n-sweeps as probes first, then only the n whose predicted "
        "speedup is unclear (and holdouts); the rest are predicted, not run.")
    trials_per_start: int = Field(
        1, ge=1, description="Trials of a cell run back to back on one server start, with "
        "the engine's cache reset and a warm-up before each (1: a fresh server per trial). "
        "The analysis resamples server starts, not reused trials; docs/matrix.md, 'Server "
        "reuse'.")

    start_spread: str | None = Field(
        None, description="A start-spread file (`crossbench start-spread RUN... -o FILE`; a "
        "path relative to the matrix file): the known spread between server starts of each "
        "engine and method, which the sequential rule and probe-and-predict decide with, "
        "copied into the run directory and used by its analysis. docs/matrix.md, 'Known "
        "start spread'.")

    share_servers: bool = Field(
        False, description="Cells whose servers are identical (same engine, models and "
        "server settings: they differ only in request-level settings such as workload or "
        "concurrency) share one server start per round: its block of trials of every such "
        "cell runs back to back on it, the engine's cache reset and a warm-up before each. "
        "Needs interleaved order and the local executor; docs/matrix.md, 'Shared servers'.")

    @property
    def block(self) -> int:
        """Trials per server start in effect (:func:`crossbench.runner.config.server_block`)."""
        return server_block(self.trials, self.fresh_server, self.trials_per_start)
    cooldown_s: float = Field(0.0, ge=0, le=86_400, description="Pause between trials "
                              "(thermal drift), at most a day.")
    gpu_busy: Literal["warn", "refuse"] = Field("warn", description="Other processes on the "
                                                "GPU before a trial: warn, or refuse the "
                                                "trial (recorded as failed).")
    telemetry_hz: float = Field(10.0, ge=0, description="GPU telemetry samples per second "
                                "per trial (NVML, to cells/<id>/telemetry/tK.csv); 0 = off.")
    thermal_gate: ThermalGate | None = Field(None, description="Optional wait for the GPUs to "
                                             "cool before each trial (recorded per trial).")
    estimate_tok_s: float | None = Field(None, gt=0, allow_inf_nan=False,
                                         description="Expected decode rate, an "
                                         "assumption for the duration estimates of `validate` "
                                         "and of `plan` (for engines no run measured).")
    out: str | None = Field(None, description="Default output directory.")


@dataclass(frozen=True)
class Cell:
    """One point of the matrix, ready to run."""

    id: str
    coords: dict[str, Any]
    engine_kind: str
    engine_config: dict[str, Any]
    load: dict[str, Any]
    baseline: str | None = None
    model_refs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialWork:
    """What one trial of a cell asks of the engine: its load with the defaults filled in."""

    requests: int
    output_tokens: int
    """Measured requests x ``max_tokens``: exact with ``ignore_eos``, at most that without."""
    warmup_requests: int
    warmup_tokens: int
    """Warm-up requests x ``warmup_max_tokens`` (default ``max_tokens``)."""
    concurrency: int


def trial_work(load: dict[str, Any], field: str = "load") -> TrialWork:
    """Requests and output tokens of one trial with ``load`` (a cell's or a recorded run's
    load settings); the one count behind `validate`'s duration estimate and `plan`'s decode
    times. Keys that are not load settings are ignored (a recorded load of another version);
    a bad value is a :class:`UserError` naming ``field``."""
    known = {k: v for k, v in load.items() if k in LoadSettings.model_fields}
    try:
        s = LoadSettings.model_validate(known)
    except ValidationError as e:
        loc, _, msg = first_validation_error(e)
        raise UserError(f"{field}.{loc}: {msg}", f"fix `{field}.{loc}`") from None
    warm = s.warmup_max_tokens if s.warmup_max_tokens is not None else s.max_tokens
    return TrialWork(s.requests, s.requests * s.max_tokens, s.warmup, s.warmup * warm,
                     s.concurrency)


def decode_estimate_s(m: Matrix, output_tokens: float) -> float | None:
    """Seconds to decode ``output_tokens`` at the matrix's ``estimate_tok_s`` (None without
    one): an assumed rate, never a measurement."""
    return output_tokens / m.estimate_tok_s if m.estimate_tok_s else None


@dataclass(frozen=True)
class MatrixSource:
    """A matrix file read once: the bytes that are parsed are the bytes that are digested
    (``--resume`` compares the digest) and copied into the run directory."""

    path: Path
    data: bytes
    matrix: Matrix

    @property
    def digest(self) -> str:
        """sha256 of the file's bytes as read."""
        return hashlib.sha256(self.data).hexdigest()


def read_matrix(path: Path) -> MatrixSource:
    """Read a matrix file once and validate it (:func:`load_matrix`)."""
    data = read_bytes(path, "matrix", MAX_MATRIX_BYTES,
                      "pass the matrix's YAML file (matrices are a few KiB); split a larger "
                      "study into several matrices")
    return MatrixSource(path, data, parse_matrix(decode_text(data, path, "matrix"), path))


def load_matrix(path: Path) -> Matrix:
    """Read and validate a matrix file; errors name the field and the fix.

    The file must be a regular UTF-8 file of at most :data:`MAX_MATRIX_BYTES` (a directory,
    a named pipe, a device, a larger file or another encoding is refused in one line).
    """
    return read_matrix(path).matrix


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (YAML's last-wins
    would drop the first value silently); ``<<`` merge keys may still be overridden."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The mapping of ``node``; a ConstructorError at the second spelling of a key."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=False)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the constructor's own error names it
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice in one mapping",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def parse_matrix(text: str, path: Path) -> Matrix:
    """A matrix from the text of ``path`` (named in errors)."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = e.problem or e.context or "cannot be parsed"
        raise UserError(f"{path} is not valid YAML: {what}{where}", "fix the syntax") from None
    except yaml.YAMLError as e:
        raise UserError(f"{path} is not valid YAML: {' '.join(str(e).split())}",
                        "fix the syntax") from None
    except RecursionError:
        raise UserError(f"{path} is not valid YAML: nested too deeply",
                        "fix the syntax (a matrix nests a few levels)") from None
    except ValueError as e:  # PyYAML turns digits into int() unchecked: 4300 digits at most
        raise UserError(f"{path} is not valid YAML: {str(e).split(';')[0]}",
                        "fix the value (a matrix holds small numbers)") from None
    try:
        return Matrix.model_validate(data)
    except ValidationError as e:
        loc, kind, msg = first_validation_error(e, top="(top level)")
        if kind == "extra_forbidden":
            raise UserError(f"{path}: {loc}: unknown field",
                            "remove it or fix its spelling (see docs/matrix.md)") from None
        if kind == "missing":
            raise UserError(f"{path}: {loc}: required field missing",
                            "add it (see docs/matrix.md)") from None
        raise UserError(f"{path}: {loc}: {msg}", f"fix `{loc}`") from None


_FIXTURE = re.compile(r"^fixture:(?:(?P<shape>[\w.-]+)/)?"
                      r"(?P<role>target|draft|eagle3|dflash-moe|dflash|mtp-target|moe-target"
                      r"|dense-twin)"
                      r"(?:@(?P<quant>[A-Za-z0-9_]+))?$")


def parse_fixture_ref(ref: str, field: str) -> tuple[str, str, str | None]:
    """``fixture:[SHAPE/]ROLE[@QUANT]`` -> (shape, role, quant); shape tiny default.

    ROLE is target, draft, a drafter made by llama.cpp's converter (eagle3, dflash, and
    dflash-moe for the MoE target and its dense twin: ``crossbench.fixtures.drafters``) or a
    Qwen3.5 target with an MTP layer (``crossbench.fixtures.mtp``: mtp-target, the MoE
    moe-target and its dense-twin). ``@hf`` names the fixture's Hugging Face folder (for
    vLLM and SGLang) instead of a quantized GGUF.
    """
    from crossbench.fixtures import SHAPES
    from crossbench.fixtures.mtp import TARGET_KINDS

    m = _FIXTURE.match(ref)
    shape = (m["shape"] if m else None) or "tiny"
    if not m or shape not in {**SHAPES, **TARGET_KINDS.get(m["role"], {})}:
        cuts = [s for s in dict.fromkeys(s for kind in TARGET_KINDS.values() for s in kind)
                if s not in SHAPES]
        raise UserError(f"{field}: unknown fixture {ref!r}",
                        "write fixture:target, fixture:draft or fixture:SHAPE/ROLE@QUANT with "
                        f"SHAPE one of {', '.join(SHAPES)} (moe-target and dense-twin also "
                        f"{', '.join(cuts)}) and ROLE one of target, draft, eagle3, dflash, "
                        "dflash-moe, mtp-target, moe-target, dense-twin (e.g. "
                        "fixture:qwen3-8b/target@Q4_K_M, or @hf for its Hugging Face folder)")
    return shape, m["role"], m["quant"]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def expand(m: Matrix, source: Path | None = None) -> list[Cell]:
    """All cells of a matrix, in declaration order, each speculative cell with its baseline."""
    where = f"{source}: " if source else ""

    def bad(msg: str, hint: str) -> UserError:
        return UserError(where + msg, hint)

    named: list[tuple[str, list[str | None]]] = [
        ("engines", list(m.engines)), ("models", list(m.models)),
        *((f"arms[{i}].name", [a.name]) for i, a in enumerate(m.arms))]
    for field_, names in named:
        for name in names:
            if name is not None and CELL_SEPARATOR in _slug(name):
                raise bad(f"{field_}: {name!r} holds {CELL_SEPARATOR!r}, which stands for / "
                          "in cell folder names (two cells could share a folder)",
                          f"rename it without {CELL_SEPARATOR!r}")
    for eid in m.axes.engine:
        if eid not in m.engines:
            raise bad(f"axes.engine: unknown engine {eid!r}",
                      f"define it under engines (known: {', '.join(m.engines) or 'none'})")
        if m.engines[eid].kind not in registry.names():
            raise bad(f"engines.{eid}.kind: unknown engine {m.engines[eid].kind!r}",
                      f"use one of: {', '.join(registry.names())}")
        binary = m.engines[eid].binary
        if binary is not None and not Path(binary).expanduser().exists():
            # the run checks it too, but only after its folder is written
            raise bad(f"engines.{eid}.binary: {binary} does not exist",
                      "fix the path, or drop `binary` to use a crossbench build (pin)")
    for tid in m.axes.target:
        if tid not in m.models:
            raise bad(f"axes.target: unknown model {tid!r}",
                      f"define it under models (known: {', '.join(m.models) or 'none'})")
        if m.models[tid].role != "target":
            raise bad(f"axes.target: model {tid!r} has role {m.models[tid].role}",
                      "use a model with role: target")
    for key in ("workload", "concurrency"):
        if key in m.load:
            raise bad(f"load.{key}: {key} is an axis here", f"move it to axes.{key}")
    for i, wl in enumerate(m.axes.workload):
        _check_workload(wl, f"axes.workload[{i}]", bad)
    for where_, ids in ([(f"models.{k}.engines", v.engines) for k, v in m.models.items()]
                        + [(f"arms[{i}].engines", a.engines) for i, a in enumerate(m.arms)]):
        for eid in ids or []:
            if eid not in m.engines:
                raise bad(f"{where_}: unknown engine {eid!r}",
                          f"use engine ids from `engines` ({', '.join(m.engines)})")
    concurrencies = parse_int_axis(m.axes.concurrency, f"{where}axes.concurrency")
    for conc in concurrencies:
        if conc < 1:
            raise bad(f"axes.concurrency: {conc} requests in flight runs nothing",
                      "use 1 or more (a value, a list or a range such as 1-16*2)")
    if m.trials > MAX_TRIALS:
        raise bad(f"trials: {m.trials} is more than the {MAX_TRIALS} trials a cell may run",
                  "use a few trials per cell (3 is the default; at least 2 give a spread)")
    others = (len(m.axes.engine) * len(m.axes.target) * len(m.axes.workload)
              * len(concurrencies))
    combos = 0
    arms: list[tuple[Arm, str, list[int | None]]] = []
    for i, arm in enumerate(m.arms):
        label = arm.name or arm.method
        if arm.draft is not None:
            if arm.draft not in m.models:
                raise bad(f"arms[{i}].draft: unknown model {arm.draft!r}",
                          f"define it under models (known: {', '.join(m.models)})")
            if m.models[arm.draft].role != "draft":
                raise bad(f"arms[{i}].draft: model {arm.draft!r} has role "
                          f"{m.models[arm.draft].role}", "use a model with role: draft")
        ns: list[int | None] = ([None] if arm.n is None
                                else list(parse_int_axis(arm.n, f"{where}arms[{i}].n")))
        arms.append((arm, label, ns))
        combos += others * len(ns)
        if combos > MAX_COMBINATIONS:  # checked per arm: never list more than this
            raise bad(f"the axes cross to more than {MAX_COMBINATIONS} combinations "
                      f"(at most {MAX_CELLS} cells may run)",
                      "sweep fewer values, or split the study into several matrices")
    excluded = [given for x in m.exclude
                if (given := {k: v for k, v in x.model_dump().items() if v is not None})]
    cells: list[Cell] = []
    seen: dict[str, Cell] = {}
    for eid in m.axes.engine:
        eng = m.engines[eid]
        for tid in m.axes.target:
            for wl in m.axes.workload:
                for conc in concurrencies:
                    for arm, label, ns in arms:
                        for n in ns:
                            coords = {"engine": eid, "target": tid, "arm": label,
                                      "method": arm.method, "n": n, "workload": wl,
                                      "concurrency": conc}
                            if any(all(coords.get(k) == v for k, v in given.items())
                                   for given in excluded):
                                continue
                            if not _runs_on(arm.engines, eid) or \
                                    not _runs_on(m.models[tid].engines, eid):
                                continue
                            cell = _cell(m, eng, coords, arm)
                            folder = cell_folder(cell.id)
                            if folder in seen and seen[folder].id == cell.id:
                                raise bad(f"two cells share the id {cell.id}",
                                          "give the arms distinct `name`s")
                            if folder in seen:
                                raise bad(f"cells {seen[folder].id} and {cell.id} share the "
                                          f"folder {folder}", "give the arms, models, "
                                          "engines and workloads names that differ in more "
                                          "than punctuation (and hold no '__')")
                            seen[folder] = cell
                            cells.append(cell)
                            if len(cells) > MAX_CELLS:
                                raise bad(f"the matrix expands to more than {MAX_CELLS} "
                                          "cells", "sweep fewer values, exclude cells, or "
                                          "split the study into several matrices")
    if not cells:
        raise bad("the matrix expands to no cells", "check axes and exclude")
    return _pair(cells, where)


def _check_workload(spec: str, field_: str, bad: Callable[[str, str], UserError]) -> None:
    """Resolve a workload spec as a run will (``random:0``, ``/etc/passwd``,
    ``builtin:../..`` and a missing file refused before any run folder is written); a
    ``random:N`` is checked up to the model's vocabulary, which only the engine knows."""
    from crossbench.load.workloads import load_workload

    try:
        load_workload(spec)
    except UserError as e:
        if spec.startswith("random:") and e.message.endswith("vocabulary size"):
            return  # the form is right; the engine supplies vocab_size
        raise bad(f"{field_}: {e.message}", e.hint or "fix the workload") from None


def _runs_on(engines: list[str] | None, eid: str) -> bool:
    return engines is None or eid in engines


def _cell(m: Matrix, eng: EngineEntry, coords: dict[str, Any], arm: Arm) -> Cell:
    target = m.models[coords["target"]]
    spec: dict[str, Any] = {"type": arm.method, **arm.spec}
    refs = {"model": target.reference()}
    if coords["n"] is not None:
        spec["n"] = coords["n"]
    if arm.draft is not None:
        spec["draft_model"] = refs["draft"] = m.models[arm.draft].reference()
    spec.update({k: v for k in ("synth_rates", "synth_len") if (v := getattr(arm, k)) is not None})
    if arm.synth_alpha is not None:
        if coords["n"] is None:
            raise UserError(f"arm {coords['arm']}: synth_alpha needs n",
                            "give the arm an n (the rates have one value per position)")
        rates = [arm.synth_alpha ** (k + 1) for k in range(coords["n"])]
        # an engine without per-position rates takes the same mean length (SGLang's
        # SYNTH_ALPHA_AS = "synth_len": 1 + a + ... + a^n)
        spec_field = registry.config_class(eng.kind).model_fields.get("spec")
        if getattr(getattr(spec_field, "annotation", None), "SYNTH_ALPHA_AS",
                   "synth_rates") == "synth_len":
            spec["synth_len"] = round(1 + sum(rates), 6)
        else:
            spec["synth_rates"] = [round(r, 6) for r in rates]
    engine_config: dict[str, Any] = {**m.server, **eng.server, "model": refs["model"],
                                     "spec": spec}
    engine_config.update({k: v for k in ("variant", "pin", "binary")
                          if (v := getattr(eng, k)) is not None})
    load = {**m.load, "workload": coords["workload"], "concurrency": coords["concurrency"]}
    parts = [coords["engine"], coords["target"], coords["arm"]]
    if coords["n"] is not None:
        parts.append(f"n{coords['n']}")
    parts += [_slug(coords["workload"]), f"c{coords['concurrency']}"]
    return Cell(id="/".join(_slug(str(p)) for p in parts), coords=coords,
                engine_kind=eng.kind, engine_config=engine_config, load=load, model_refs=refs)


def _pair(cells: list[Cell], where: str) -> list[Cell]:
    base_key = ("engine", "target", "workload", "concurrency")
    baselines = {tuple(c.coords[k] for k in base_key): c for c in cells
                 if c.coords["method"] == "none"}
    out: list[Cell] = []
    for c in cells:
        if c.coords["method"] == "none":
            out.append(c)
            continue
        b = baselines.get(tuple(c.coords[k] for k in base_key))
        if b is None:
            raise UserError(f"{where}cell {c.id} has no baseline (same engine, target, "
                            "workload and concurrency with method none)",
                            "add `- method: none` to arms, or do not exclude its baseline")
        out.append(replace(c, baseline=b.id))
    return out


def _check_look_every(m: Matrix, cells: list[Cell], spread: bool, where: str) -> list[str]:
    """``sequential.look_every`` needs what its looks inside a trial rely on: a known spread
    (the interval of a look on a start cut short), a fresh start per trial (a trial is ended
    to go on to the next start), one request in flight (a look waits for those in flight).
    Returns a note when no trial is long enough to be looked inside."""
    every = m.sequential.look_every if m.sequential is not None else None
    if every is None:
        return []
    field = f"{where}sequential.look_every: {every}"
    if not spread:
        raise UserError(f"{field} needs a start_spread file: a look inside a trial is "
                        "decided on the starts' known spread",
                        "give the matrix a start_spread (`crossbench start-spread`), or drop "
                        "look_every")
    if m.block > 1 or m.share_servers or not m.fresh_server:
        raise UserError(f"{field} ends a trial to go on to a fresh server start, which a reused "
                        "or shared server would not give",
                        "set trials_per_start: 1 (and share_servers: false, fresh_server: "
                        "true), or drop look_every")
    for c in cells:
        conc, rate = c.load.get("concurrency", 1), c.load.get("rate")
        if conc != 1 or rate is not None:
            raise UserError(f"{field}: cell {c.id} sends "
                            + (f"Poisson arrivals (rate {rate})" if rate is not None else
                               f"{conc} requests at once")
                            + "; a look waits for the requests in flight, which would change "
                            "that load at every look",
                            "use concurrency 1 without rate for a matrix with look_every, or "
                            "drop look_every")
    most = max((trial_work(c.load).requests for c in cells), default=0)
    if every >= most:
        return [f"sequential.look_every: {every} is not below the {most} measured requests of "
                "a trial: the rule looks at trial ends only (lower look_every to look inside "
                "trials)"]
    return []


def validate_cells(m: Matrix, cells: list[Cell], source: Path | None = None) -> list[str]:
    """Check every cell against its engine's profile; returns notes (not errors).

    Local model files must exist; ``fixture:`` models are made on first use; Hugging Face
    files are checked in the local cache only (a note when they will be downloaded).
    """
    where = f"{source}: " if source else ""
    notes: list[str] = []
    known = matrix_start_spread(m, source)
    if known is not None:
        from crossbench.analysis.start_spread import lacking, pair_spreads

        for c in cells:
            if c.baseline is None:
                continue
            role = str(c.engine_config["spec"]["type"])
            got = pair_spreads(known, c.engine_kind, role)
            if isinstance(got, str):
                raise UserError(f"{where}start_spread: {m.start_spread}: cell {c.id}: "
                                f"{lacking(known, c.engine_kind, role)}",
                                "measure the spread of this engine on a run with several "
                                "fresh starts per cell (`crossbench start-spread RUN -o "
                                "FILE`), or remove start_spread")
            if not got[2]:
                notes.append(f"start_spread: no spread for method {role} of "
                             f"{c.engine_kind}: cell "
                             f"{c.id} takes the engine's largest speculative one, "
                             f"{got[0].role}'s (sigma_log {got[0].sigma_log:.4g})")
    if m.sequential is not None:
        if m.sequential.min_trials < 2 and known is None:
            raise UserError(f"{where}sequential.min_trials: {m.sequential.min_trials} "
                            "trial cannot give a spread of its own",
                            "use min_trials: 2 or more, or give the matrix a start_spread "
                            "file, whose known spread lets one trial decide")
        if m.schedule.order != "interleaved":
            raise UserError(f"{where}sequential: looks need every cell's trial k before trial "
                            "k+1 of any other", "set schedule.order: interleaved")
        starts = math.ceil(m.trials / m.block)
        if m.block > 1 and starts < m.sequential.min_trials and known is None:
            least = m.sequential.min_trials
            raise UserError(f"{where}sequential: with server reuse the rule looks once per "
                            f"server start, and trials: {m.trials} in blocks of "
                            f"trials_per_start {m.block} give {starts} start(s), fewer than "
                            f"sequential.min_trials ({least})",
                            f"raise trials to {least * m.block} or more, lower "
                            f"trials_per_start to {max(1, m.trials // least)} or less, or lower "
                            "min_trials")
        notes += _check_look_every(m, cells, known is not None, where)
        if m.trials < m.sequential.min_trials:
            raise UserError(f"{where}trials: {m.trials} is fewer than sequential.min_trials "
                            f"({m.sequential.min_trials})",
                            "raise trials (the most a cell runs) or lower min_trials")
    if m.trials > 1 and m.block >= m.trials:
        setting = (f"trials_per_start {m.trials_per_start} with trials: {m.trials}"
                   if m.fresh_server else "fresh_server: false")
        k = several_starts_block(m.trials)
        fix = ("" if m.fresh_server else "fresh_server: true and ") + f"trials_per_start: {k}"
        notes.append(f"{setting}: every cell runs all its trials on one server start, so its "
                     "verdict leaves out start-to-start variation and carries the single_start "
                     f"warning (set {fix} for {-(-m.trials // k)} starts per cell)")
    if m.share_servers:
        if m.schedule.order != "interleaved":
            raise UserError(f"{where}share_servers: cells share a start within a round of the "
                            "interleaved schedule", "set schedule.order: interleaved, or "
                            "share_servers: false")
        groups = server_groups(cells)
        if len(set(groups.values())) == len(cells):
            notes.append("share_servers: no two cells have the same server (engine, models and "
                         "server settings), so every cell starts its own (add a workload or "
                         "concurrency level to share starts)")
    if m.probe_predict is not None:
        long = [s for s in sweeps(cells) if probe_split(s, m.probe_predict.probes)[1]]
        if not long:
            notes.append(f"probe_predict: no n-sweep has more than {m.probe_predict.probes} "
                         "n, so every cell is measured (add n to an arm, or lower "
                         "probe_predict.probes)")
    for mid, entry in m.models.items():
        if entry.path is not None and not entry.path.startswith("fixture:"):
            p = Path(entry.path).expanduser()
            if not p.is_absolute() and source is not None:
                p = source.parent / p
            if not p.exists():
                raise UserError(f"{where}models.{mid}.path: {entry.path} does not exist",
                                "fix the path, or use hf: {repo, revision, file}")
        if entry.path is not None and entry.path.startswith("fixture:"):
            parse_fixture_ref(entry.path, f"{where}models.{mid}.path")
        if entry.hf is not None and len(entry.hf.revision) != 40:
            notes.append(f"models.{mid}: revision {entry.hf.revision!r} is not a commit hash; "
                         "the bytes it names can change (pin a commit)")
    exposed: set[tuple[str, str]] = set()  # (engine id, host) already noted
    for c in cells:
        _no_secret_args(c, where)
        cfg = dict(c.engine_config)
        cfg["model"] = "/nonexistent/model.gguf"
        if "draft_model" in cfg["spec"]:
            cfg["spec"] = {**cfg["spec"], "draft_model": "/nonexistent/draft.gguf"}
        try:
            LoadSettings.model_validate(c.load)
            registry.create(c.engine_kind, cfg, Path("/dev/null")).validate_static()
        except UserError as e:
            if e.message.startswith("spec.type:"):
                raise UserError(f"{where}cell {c.id}: method {c.coords['method']!r} is not a "
                                f"{c.engine_kind} method ({e.message})",
                                f"{e.hint}; or limit the arm to other engines with "
                                "`engines:`") from None
            if e.message.startswith(("n=", "spec.n:")):  # name the field the user wrote
                field = f"arms[{_arm_index(m, c)}].n"
                raise UserError(f"{where}{field}: {e.message.removeprefix('spec.n: ')} "
                                f"(cell {c.id})", e.hint) from None
            raise UserError(f"{where}cell {c.id}: {e.message}", e.hint) from None
        except ValidationError as e:
            loc, _, msg = first_validation_error(e)
            # workload and concurrency are axes in a matrix, the rest comes from `load:`
            field = f"axes.{loc}" if loc in ("workload", "concurrency") else f"load.{loc}"
            raise UserError(f"{where}{field}: {msg}", f"fix `{field}`") from None
        host = c.engine_config.get("host")  # every engine's bind setting is `host`
        if isinstance(host, str) and (c.coords["engine"], host) not in exposed:
            exposed.add((c.coords["engine"], host))
            warning = exposure_warning(host, "host")
            if warning is not None:
                notes.append(f"cells of engine {c.coords['engine']}: {warning}")
    notes += _draft_replay_notes(m, cells)
    if m.trials < 2:
        notes.append("trials: 1 gives no spread; use trials >= 2 (3 is the default)")
    if len(cells) > NOTE_CELLS:
        notes.append(f"{len(cells)} cells x {m.trials} trials = {len(cells) * m.trials} runs, "
                     "each with its own server start: a long study (more than "
                     f"{NOTE_CELLS} cells); consider fewer n or concurrency values, or "
                     "`exclude`")
    return notes


def _draft_replay_notes(m: Matrix, cells: list[Cell]) -> list[str]:
    """Before a run, what the analysis's ``draft_replay`` warning finds after it: a cell whose
    method drafts from state every request of its start feeds (``registry.shared_drafts``)
    with real acceptance, whose trial sends a prompt again (requests beyond the workload's
    prompts, :data:`~crossbench.analysis.stability.REPLAY_SHARE` of them or more) or follows
    other trials on its start (trials_per_start above 1, or a start shared with other cells)
    where no reset clears that state."""
    from crossbench.analysis.stability import REPLAY_SHARE
    from crossbench.load.workloads import load_workload

    groups = server_groups(cells) if m.share_servers else {}
    sizes = Counter(groups.values())
    found: dict[tuple[str, SharedDrafts, tuple[str, ...]], list[str]] = {}  # a note a reason
    prompts_of: dict[str, int | None] = {}  # distinct prompts by workload spec, read once
    for c in cells:
        spec = c.engine_config.get("spec") or {}
        shared = registry.shared_drafts(c.engine_kind, str(spec.get("type")))
        if shared is None or spec.get("synth_rates") or spec.get("synth_len"):
            continue
        why = []
        work = trial_work(c.load)
        spec_w = str(c.load.get("workload") or c.coords.get("workload") or "")
        if spec_w not in prompts_of:
            prompts_of[spec_w] = None  # random: every request its own prompt; unreadable
            if not spec_w.startswith("random:"):
                with contextlib.suppress(UserError):
                    prompts_of[spec_w] = len({p.id for p in load_workload(spec_w).prompts})
        prompts = prompts_of[spec_w]
        if prompts is not None:
            repeats = work.requests - prompts
            if repeats > 0 and repeats >= REPLAY_SHARE * work.requests:
                why.append(f"its {work.requests} requests a trial cycle {prompts} prompts "
                           f"({repeats} repeats)")
        if not shared.cleared_by:
            if m.block > 1:
                why.append(f"trials_per_start {m.block} puts later trials on a start that "
                           "earlier ones fed")
            if sizes.get(groups.get(c.id, -1), 0) > 1:
                why.append("it shares its server start with other cells (share_servers)")
        if why:
            found.setdefault((str(spec.get("type")), shared, tuple(why)), []).append(c.id)
    notes = []
    for (method, shared, reasons), ids in found.items():
        named = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        notes.append(
            f"{'cell' if len(ids) == 1 else 'cells'} {named}: {method} drafts from "
            f"{shared.kept_in}, and " + "; ".join(reasons) + ": such requests draft an earlier "
            "copy's output under greedy decoding, so acceptance and speedup would overstate "
            "the method (the analysis warns draft_replay); keep requests within the workload's "
            "prompts" + ("" if shared.cleared_by else ", give each trial a fresh start "
                         "(trials_per_start: 1) and such cells their own starts "
                         "(share_servers: false)"))
    return notes


def matrix_start_spread(m: Matrix, source: Path | None = None) -> StartSpread | None:
    """The matrix's ``start_spread`` file read (a path relative to the matrix file
    ``source``), or None without one; a file that is missing or not a start-spread file is a
    :class:`UserError` naming the field."""
    from crossbench.analysis.start_spread import StartSpread

    if m.start_spread is None:
        return None
    where = f"{source}: " if source else ""
    p = Path(m.start_spread).expanduser()
    if not p.is_absolute() and source is not None:
        p = source.parent / p
    try:
        return StartSpread.load(p)
    except UserError as e:
        raise UserError(f"{where}start_spread: {e.message.removeprefix('--start-spread ')}",
                        e.hint) from None


def _arm_index(m: Matrix, cell: Cell) -> int:
    """Index in ``arms`` of the arm a cell came from (its label, method and engine)."""
    for i, arm in enumerate(m.arms):
        if (arm.name or arm.method) == cell.coords["arm"] and arm.method == \
                cell.coords["method"] and _runs_on(arm.engines, cell.coords["engine"]):
            return i
    raise AssertionError(f"no arm for cell {cell.id}")  # expand() made the cell from one


def _no_secret_args(cell: Cell, where: str) -> None:
    """Refuse a secret flag's value in a cell's ``extra_args``: the matrix file is copied into
    the run directory as it is, so the value would be recorded there in clear."""
    raw = cell.engine_config.get("extra_args") or []
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        return  # not a list of strings: the engine's config refuses it, naming the field
    args = list(raw)
    for i, (arg, shown) in enumerate(zip(args, redact_argv(args), strict=True)):
        if arg != shown:
            flag = shown.split("=", 1)[0] if shown.startswith("-") else args[i - 1]
            raise UserError(f"{where}cell {cell.id}: extra_args gives {flag} its value in the "
                            "matrix file, which is copied into the run directory",
                            "keep the key out of the file: set api_key_env: NAME (or "
                            "api_key_file: PATH) under server: and export NAME")


def server_key(cell: Cell) -> str:
    """What makes a cell's server: its engine kind and engine settings (models, speculative
    method, server flags), not its load. Cells of equal keys can share a server start."""
    return json.dumps([cell.engine_kind, cell.engine_config], sort_keys=True)


def server_groups(cells: list[Cell]) -> dict[str, int]:
    """Cell id -> server group (0, 1, ... in order of first appearance): cells of one group
    have the same :func:`server_key`."""
    keys: dict[str, int] = {}
    return {c.id: keys.setdefault(server_key(c), len(keys)) for c in cells}


SWEEP_COORDS = ("engine", "target", "arm", "method", "workload", "concurrency")
"""The coordinates a sweep's cells share (all but n)."""


def sweeps(cells: Iterable[Cell]) -> list[list[Cell]]:
    """n-sweeps: speculative cells sharing :data:`SWEEP_COORDS` with at least two distinct
    n, each sorted by n."""
    groups: dict[tuple[Any, ...], list[Cell]] = defaultdict(list)
    for c in cells:
        if c.coords["method"] != "none" and c.coords["n"] is not None:
            groups[tuple(c.coords[k] for k in SWEEP_COORDS)].append(c)
    return [sorted(g, key=lambda c: int(c.coords["n"])) for g in groups.values()
            if len({c.coords["n"] for c in g}) >= 2]


def probe_split(sweep: list[Cell], probes: int) -> tuple[list[Cell], list[Cell]]:
    """(probes, the rest) of one sweep sorted by n: the cells at ``probes`` evenly spaced
    positions from the smallest n to the largest (halves round up); a sweep of at most
    ``probes`` cells is all probes."""
    if len(sweep) <= probes:
        return list(sweep), []
    picks = {math.floor(i * (len(sweep) - 1) / (probes - 1) + 0.5) for i in range(probes)}
    return ([c for i, c in enumerate(sweep) if i in picks],
            [c for i, c in enumerate(sweep) if i not in picks])


def run_order(m: Matrix, cells: list[Cell]) -> list[tuple[str, int]]:
    """The schedule of matrix ``m``'s ``cells`` (:func:`schedule` with the matrix's settings;
    with ``schedule.baselines_first``, or ``sequential.look_every`` (so a speculative trial's
    looks find its baseline's trial done), the baselines run first in every round)."""
    first = m.schedule.baselines_first or (
        m.sequential is not None and m.sequential.look_every is not None)
    return schedule(cells, m.trials, m.schedule.order, m.schedule.seed, m.block,
                    m.share_servers, baselines_first=first)


def schedule(cells: list[Cell], trials: int, order: str, seed: int,
             block: int = 1, share: bool = False,
             baselines_first: bool = False) -> list[tuple[str, int]]:
    """(cell id, trial) in run order: interleaved rounds shuffled with ``seed + round``.

    ``block`` trials of a cell run back to back (they share one server start when trials
    reuse a server): round ``r`` runs trials ``r*block`` to ``r*block + block - 1`` of every
    cell, cells shuffled. ``block=1`` is the plain interleaving. With ``share`` the cells of
    one server group (:func:`server_groups`) run next to each other in every round, the
    groups shuffled and the cells within each, so one server start can serve them all. With
    ``baselines_first`` every round runs its baseline cells (no speculative method) before
    the others, each part in its shuffled order."""
    ids = [c.id for c in cells]
    if order == "sequential":
        return [(cid, t) for cid in ids for t in range(trials)]
    group = server_groups(cells) if share else {}
    out: list[tuple[str, int]] = []
    for r in range(-(-trials // block)):
        rnd = ids[:]
        rng = random.Random(seed + r)
        rng.shuffle(rnd)
        if share:
            rank = {g: i for i, g in enumerate(dict.fromkeys(group[c] for c in rnd))}
            rnd.sort(key=lambda c: rank[group[c]])  # stable: the shuffle holds within groups
        if baselines_first:
            base = {c.id for c in cells if c.baseline is None}
            rnd.sort(key=lambda c: c not in base)  # stable: the shuffle holds in each part
        out += [(cid, t) for cid in rnd for t in range(r * block, min(trials, (r + 1) * block))]
    return out


def json_schema() -> str:
    """The matrix JSON Schema (exported to docs/matrix.schema.json)."""
    return json.dumps(Matrix.model_json_schema(), indent=2, sort_keys=True) + "\n"
