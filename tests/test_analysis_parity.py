"""Output parity: exact matches, first divergence in characters and tokens, and the cases
where a comparison does not apply."""

from __future__ import annotations

from standins.study import Arm, study

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.parity import first_divergence

PROMPTS = [("p0", "code"), ("p1", "math"), ("p2", "code")]
OPTS = StatsOptions(resamples=200, min_samples=2)
ACC = {"drafts": 10, "draft_tokens": 20, "accepted": 10, "per_position": [6, 4]}


def rate(arm, pid, trial, occ):
    return 100.0


def test_first_divergence():
    assert first_divergence("abc", "abd") == 2
    assert first_divergence("abc", "abc") is None
    assert first_divergence("ab", "abc") == 2
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1


def _parity(tmp_path, arm, extra=None, load=None):
    study(tmp_path / "s", PROMPTS, [Arm("none"), arm], rate, trials=2, extra=extra, load=load)
    return analyze(tmp_path / "s", OPTS)["pairs"][0]


def test_identical_greedy_outputs(tmp_path):
    par = _parity(tmp_path, Arm("d", "draft-simple", 2, acceptance=ACC))["parity"]
    assert par["verdict"] == "identical"
    assert (par["compared"], par["exact_match_rate"]) == (6, 1.0)
    assert par["token_level"] is None
    assert "no token ids" in par["note"]


def test_divergence_in_characters_and_tokens(tmp_path):
    def extra(arm, pid, trial, occ):
        ids = [1, 2, 3, 4]
        text = "the same answer"
        if arm.method != "none" and pid == "p1":
            ids, text = [1, 2, 9, 4], "the sane answer"
        return {"text": text, "token_ids": ids}

    pair = _parity(tmp_path, Arm("d", "draft-simple", 2, acceptance=ACC), extra)
    par = pair["parity"]
    assert par["verdict"] == "diverges"
    assert par["exact_match_rate"] == 4 / 6
    assert par["first_divergence_chars"] == {"min": 6.0, "median": 6.0, "max": 6.0}
    assert par["first_divergence_tokens"] == {"min": 2.0, "median": 2.0, "max": 2.0}
    assert par["examples"][0]["prompt_id"] == "p1"
    # three prompts: the interval is flagged as optimistic too
    assert [w["kind"] for w in pair["warnings"]] == ["few_clusters", "output_diverges"]


def test_synthetic_acceptance_is_not_applicable(tmp_path):
    arm = Arm("synth", "draft-simple", 2, spec={"synth_rates": [0.8, 0.5]}, acceptance=ACC)
    par = _parity(tmp_path, arm, lambda a, p, t, o: {"text": f"{a.name} {p}"})["parity"]
    assert par["verdict"] == "not applicable (synthetic acceptance)"


def test_sampled_outputs_compare_lengths_only(tmp_path):
    par = _parity(tmp_path, Arm("d", "draft-simple", 2, acceptance=ACC),
                  load={"temperature": 0.7})["parity"]
    assert par["verdict"] == "lengths only (temperature > 0)"
    assert par["equal_length_rate"] == 1.0
    assert par["mean_tokens"] == {"spec": 64.0, "baseline": 64.0}


def test_divergence_in_tokens_from_chunk_boundaries(tmp_path):
    """Without token ids, the baseline's chunks (one token each, as llama-server streams)
    place the first differing character in its token."""
    def extra(arm, pid, trial, occ):
        pieces = ["the", " same", " answer"]
        if arm.method != "none" and pid == "p2":
            pieces = ["the", " same", " reply"]
        return {"text": "".join(pieces), "chunk_chars": [len(p) for p in pieces],
                "chunks": [[1_000_000 * (i + 1), 1] for i in range(3)]}

    par = _parity(tmp_path, Arm("d", "draft-simple", 2, acceptance=ACC), extra)["parity"]
    assert par["verdict"] == "diverges" and par["token_level"] == "chunk boundaries"
    assert par["first_divergence_chars"]["min"] == 9.0  # "the same " then a vs r
    assert par["first_divergence_tokens"] == {"min": 2.0, "median": 2.0, "max": 2.0}
