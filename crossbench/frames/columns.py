"""The documented columns of every frame of :func:`crossbench.open_run`: name, unit, meaning.

One table per frame, in column order. The frames are built to exactly these columns (a test
checks it), Parquet exports carry each column's unit and meaning as field metadata, and
``docs/python-api.md`` is generated from here (``python -m crossbench.frames.columns``).
"""

from __future__ import annotations

from typing import NamedTuple


class Column(NamedTuple):
    """One column: its name, its unit ("" for labels and counts) and what it holds."""

    name: str
    unit: str
    description: str


_COORDS = [
    Column("cell", "", "cell id (engine/target/arm[/nN]/workload/cC)"),
    Column("engine", "", "engine id of the matrix (or the engine kind of a single run)"),
    Column("target", "", "target model id"),
    Column("arm", "", "arm label (method none: the baseline)"),
    Column("method", "", "speculative method as the engine names it, or none"),
    Column("n", "tokens", "drafted tokens per step (NA for a baseline)"),
    Column("workload", "", "workload spec (builtin:mixed, file:..., import:...)"),
    Column("concurrency", "requests", "requests in flight"),
]

FRAMES: dict[str, list[Column]] = {
    "requests": [
        *_COORDS,
        Column("trial", "", "trial number (0-based)"),
        Column("request_index", "", "index of the request in its trial's send order"),
        Column("prompt_id", "", "prompt id"),
        Column("category", "", "prompt category (unknown when the source had none)"),
        Column("warmup", "", "a warm-up request (never in statistics)"),
        Column("status", "", "ok, error or incomplete"),
        Column("error", "", "error text of a failed request"),
        Column("t_sent_ns", "ns", "send time, client monotonic clock"),
        Column("t_first_chunk_ns", "ns", "arrival of the first content chunk"),
        Column("t_done_ns", "ns", "arrival of the last chunk"),
        Column("ttft_ms", "ms", "first chunk arrival - send time"),
        Column("decode_ms", "ms", "last chunk arrival - first chunk arrival"),
        Column("tpot_ms", "ms", "decode time / (output tokens - 1)"),
        Column("decode_tok_s", "tokens/s", "(output tokens - 1) / decode time"),
        Column("e2e_ms", "ms", "last chunk arrival - send time"),
        Column("output_tokens", "tokens", "generated tokens (usage, else server timings)"),
        Column("prompt_tokens", "tokens", "prompt tokens as the server counted them"),
        Column("chunks", "", "content chunks received"),
        Column("server_decode_tok_s", "tokens/s",
               "the server's own rate of the same window ((predicted_n - 1) / predicted_ms)"),
        Column("draft_tokens", "tokens", "tokens drafted for this request (per-request counts)"),
        Column("accepted_tokens", "tokens", "drafted tokens accepted for this request"),
        Column("finish_reason", "", "why the request ended (length, stop...)"),
        Column("retries", "",
               "times the request was sent again on a fresh connection (0 or 1: the server "
               "closed a reused connection before any response byte; NA where not recorded)"),
        Column("failed_attempts", "",
               "sends of this request that failed and were retried (their errors are in the "
               "record's failed_attempts; NA where not recorded)"),
    ],
    "trials": [
        *_COORDS,
        Column("trial", "", "trial number (0-based)"),
        Column("status", "", "ok or failed"),
        Column("error", "", "why the trial failed"),
        Column("started_utc", "", "UTC start time (ISO 8601)"),
        Column("requests_ok", "requests", "measured requests that completed"),
        Column("requests_failed", "requests", "measured requests with an error or cut short"),
        Column("pooled_tok_s", "tokens/s",
               "sum(output tokens - 1) / sum(decode time) over the trial's requests"),
        Column("server_pooled_tok_s", "tokens/s", "the server's own rate of the same window"),
        Column("drafts", "steps", "speculative steps (counter delta; NA without counters)"),
        Column("draft_tokens", "tokens", "drafted tokens"),
        Column("accepted_tokens", "tokens", "accepted drafted tokens"),
        Column("draft_acceptance_rate", "fraction", "accepted / drafted tokens (0-1)"),
        Column("mean_acceptance_length", "tokens/step", "1 + accepted / drafts"),
        Column("startup_s", "s", "server start until ready"),
        Column("measured_s", "s", "wall time of the measured requests"),
        Column("total_s", "s", "the whole trial, start and stop included"),
        Column("gpu_busy_share", "fraction",
               "NVML utilization.gpu over the measured window (0-1; NA without telemetry)"),
        Column("busy_ms_per_token", "ms/token",
               "GPU-busy time per output token: busy share x measured_s / output tokens"),
        Column("host_ms_per_token", "ms/token",
               "time per output token with no kernel running (the GPU waiting on the host)"),
        Column("boot_id", "", "boot id of the host (two trials on one machine share it)"),
        Column("gpus", "", "UUIDs of the visible GPUs, comma-separated"),
        Column("cpu", "", "CPU model of the trial's host (per trial: a resumed run can end "
               "on another machine)"),
        Column("cpus", "CPUs", "logical CPUs of the host"),
        Column("cpus_usable", "CPUs", "CPUs crossbench could run on (its affinity mask)"),
        Column("cpu_governor", "", "cpufreq governor (NA where the host does not expose it)"),
        Column("loadavg_before", "processes", "1-minute load average before the measured "
               "requests"),
        Column("loadavg_after", "processes", "1-minute load average after them"),
        Column("runnable_before", "processes",
               "processes running or ready to run before the measured requests"),
        Column("runnable_after", "processes", "the same after them"),
        Column("host_cpu_busy_share", "fraction",
               "share of all CPUs' time busy over the measured window (0-1)"),
        Column("steal_share", "fraction",
               "share of all CPUs' time stolen by a hypervisor over the window (0-1)"),
        Column("server_cores", "cores", "CPU the engine's server processes used over the "
               "window, in cores (NA for a server crossbench did not start)"),
        Column("client_cores", "cores", "CPU crossbench itself used over the window"),
        Column("busy_others", "", "other processes using at least 0.25 cores over the "
               "window: name (pid) cores, joined by ';' (empty: none)"),
    ],
    "cells": [
        *_COORDS,
        Column("baseline_cell", "", "the cell this one is paired with (NA for a baseline)"),
        Column("requests_ok", "requests", "measured requests that completed"),
        Column("requests_failed", "requests", "measured requests with an error or cut short"),
        Column("pooled_tok_s", "tokens/s", "sum(output tokens - 1) / sum(decode time)"),
        Column("request_mean_tok_s", "tokens/s", "mean of the per-request decode rates"),
        Column("server_pooled_tok_s", "tokens/s", "the server's own rate of the same window"),
        Column("engine_reported_tok_s", "tokens/s",
               "the engine's own per-request figure, pooled by decode time"),
        Column("wall_output_tok_s", "tokens/s", "output tokens / sum of trials' wall windows"),
        Column("ttft_p50_ms", "ms", "median TTFT"),
        Column("ttft_p99_ms", "ms", "99th percentile TTFT"),
        Column("tpot_p50_ms", "ms", "median TPOT"),
        Column("tpot_p99_ms", "ms", "99th percentile TPOT"),
        Column("chunk_gap_p50_ms", "ms", "median gap between content chunks"),
        Column("e2e_p50_ms", "ms", "median end-to-end latency"),
        Column("trial_cv", "fraction", "std / mean of the per-trial pooled rates"),
        Column("gpu_busy_share", "fraction",
               "mean over trials of NVML utilization.gpu in the measured window (0-1)"),
        Column("busy_ms_per_token", "ms/token", "mean over trials of GPU-busy ms per token"),
        Column("host_ms_per_token", "ms/token",
               "mean over trials of ms per token with the GPU waiting on the host"),
        Column("decode_gpu_busy_share", "fraction", "the same over the decode alone "
               "(host_time.decode; NA where the window is too short or not anchored)"),
        Column("decode_busy_ms_per_token", "ms/token", "GPU-busy ms per token of the decode"),
        Column("decode_host_ms_per_token", "ms/token",
               "ms per token of the decode with the GPU waiting on the host"),
        Column("draft_acceptance_rate", "fraction", "accepted / drafted tokens (0-1)"),
        Column("mean_acceptance_length", "tokens/step", "1 + accepted / drafts"),
        Column("synthetic_acceptance", "", "acceptance set by synth_rates / synth_len"),
        Column("expected_mean_acceptance_length", "tokens/step",
               "what the counters should read under the synthetic rates (llama-server: each "
               "draft clipped to the tokens a request has left; SGLang: each step the floor "
               "or the ceiling of the simulated mean, the last step stopping at the token "
               "limit; vLLM: the configured rates, nothing clipped; NA elsewhere)"),
    ],
    "pairs": [
        *_COORDS,
        Column("baseline_cell", "", "the baseline cell"),
        Column("baseline_tok_s", "tokens/s", "the baseline's pooled decode rate"),
        Column("spec_tok_s", "tokens/s", "the speculative cell's pooled decode rate"),
        Column("speedup", "ratio", "geometric mean of per-request decode speedups"),
        Column("speedup_ci_low", "ratio", "lower end of the speedup's interval"),
        Column("speedup_ci_high", "ratio", "upper end of the speedup's interval"),
        Column("ci_level", "fraction", "confidence level of the interval"),
        Column("design", "", "resampling design of the interval"),
        Column("verdict", "", "faster, slower, indistinguishable, confounded, too few samples"),
        Column("statistical_verdict", "", "the verdict from the interval alone"),
        Column("speedup_e2e", "ratio", "geometric mean of per-request end-to-end speedups"),
        Column("speedup_e2e_ci_low", "ratio", "lower end of its interval"),
        Column("speedup_e2e_ci_high", "ratio", "upper end of its interval"),
        Column("net_loss_share", "fraction", "share of prompts slower than the baseline"),
        Column("n_samples", "pairs", "paired requests used"),
        Column("n_prompts", "prompts", "distinct prompts among them"),
        Column("n_trials", "trials", "distinct trials among them"),
        Column("draft_acceptance_rate", "fraction", "accepted / drafted tokens (0-1)"),
        Column("mean_acceptance_length", "tokens/step", "1 + accepted / drafts"),
        Column("parity", "", "output parity verdict against the baseline"),
        Column("confounded", "", "something besides the speculative settings differs"),
        Column("caveats", "", "runner warnings on the pair's trials, joined"),
        Column("warnings", "", "number of warnings that concern the pair"),
    ],
    "sweeps": [
        Column("engine", "", "engine id"),
        Column("model", "", "target model id"),
        Column("arm", "", "arm label"),
        Column("method", "", "speculative method"),
        Column("workload", "", "workload spec"),
        Column("concurrency", "requests", "requests in flight"),
        Column("n", "tokens", "drafted tokens per step"),
        Column("cell", "", "the point's cell"),
        Column("speedup", "ratio", "geometric-mean decode speedup"),
        Column("speedup_ci_low", "ratio", "lower end of its interval"),
        Column("speedup_ci_high", "ratio", "upper end of its interval"),
        Column("verdict", "", "the point's verdict"),
        Column("draft_acceptance_rate", "fraction", "accepted / drafted tokens (0-1)"),
        Column("mean_acceptance_length", "tokens/step", "1 + accepted / drafts"),
        Column("best", "", "this n has the highest speedup of the sweep"),
        Column("cost_d", "baseline steps", "fixed cost of a speculative step, C(n) = d + v n"),
        Column("cost_d_ci_low", "baseline steps", "lower end of d's interval"),
        Column("cost_d_ci_high", "baseline steps", "upper end of d's interval"),
        Column("cost_v", "baseline steps/token", "cost of one drafted token"),
        Column("cost_v_ci_low", "baseline steps/token", "lower end of v's interval"),
        Column("cost_v_ci_high", "baseline steps/token", "upper end of v's interval"),
        Column("predicted_best_n", "tokens", "the n the cost model predicts best"),
        Column("loses_from", "tokens", "smallest measured n from which every measured n "
               "reads slower (empty: the largest does not)"),
        Column("predicted_negative_from", "tokens", "smallest n from which the cost model "
               "predicts every speedup below 1 (empty: none up to its largest n)"),
        Column("predicted_negative_from_ci_low", "tokens", "lower end of its interval "
               "(empty: beyond the largest n predicted, or no interval)"),
        Column("predicted_negative_from_ci_high", "tokens", "upper end of its interval "
               "(empty: beyond the largest n predicted, or no interval)"),
    ],
    "engines": [
        Column("arm", "", "arm label, the same in both engines"),
        Column("n", "tokens", "drafted tokens per step"),
        Column("workload", "", "workload spec"),
        Column("concurrency", "requests", "requests in flight"),
        Column("engine_a", "", "engine A (the earlier in name order)"),
        Column("model_a", "", "engine A's target model id"),
        Column("engine_b", "", "engine B"),
        Column("model_b", "", "engine B's target model id"),
        Column("trials_a", "trials", "engine A's trials of the arm (one server start each "
               "where own_starts)"),
        Column("trials_b", "trials", "engine B's trials of the arm"),
        Column("own_starts", "", "every trial of both had its own server start (the "
               "intervals need it)"),
        Column("mal_a", "tokens/step", "engine A's mean accepted length"),
        Column("mal_b", "tokens/step", "engine B's mean accepted length"),
        Column("plain_ms_a", "ms/token", "engine A's plain step (its baseline), geometric "
               "mean over starts"),
        Column("plain_ms_b", "ms/token", "engine B's plain step"),
        Column("step_ms_a", "ms/step", "engine A's speculative step (MAL tokens)"),
        Column("step_ms_b", "ms/step", "engine B's speculative step"),
        Column("cost_a", "baseline steps", "engine A's C(n) = step / plain step"),
        Column("cost_b", "baseline steps", "engine B's C(n)"),
        *(col for key, what in (("step_ms", "step"), ("tok_s", "decode rate with the arm"),
                                ("plain_ms", "plain step"), ("cost", "C(n)"))
          for col in (Column(f"{key}_ratio", "ratio", f"B's {what} over A's"),
                      Column(f"{key}_ratio_ci_low", "ratio", "lower end of its interval "
                             "(Welch's, over the two engines' starts)"),
                      Column(f"{key}_ratio_ci_high", "ratio", "upper end of its interval"))),
    ],
}
"""Columns of each frame, in order."""


def markdown() -> str:
    """The column reference as Markdown (the body of docs/python-api.md's column section)."""
    out = []
    for frame, cols in FRAMES.items():
        out += [f"### `{frame}`", "", "| column | unit | meaning |", "| --- | --- | --- |"]
        out += [f"| `{c.name}` | {c.unit or '-'} | {c.description} |" for c in cols]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(), end="")
