"""The checked-in engine profiles are exactly what the generator makes from each pin's source.

Golden files: regenerate with `crossbench engines profile --pin PIN --out FILE`, never by hand.
"""

from __future__ import annotations

import pytest

from crossbench.engines.llamacpp.build import source_tree
from crossbench.engines.llamacpp.pins import PINS, get_pin
from crossbench.engines.llamacpp.profile import profiles_dir
from crossbench.engines.llamacpp.tools.profile_gen import generate, render


@pytest.mark.parametrize("spec", sorted(PINS))
def test_profile_file_matches_its_source(spec):
    pin = get_pin(spec)
    text = render(generate(source_tree(pin), pin.build_number, pin.commit, pin.spec))
    path = profiles_dir() / f"b{pin.build_number}.yaml"
    assert path.read_text() == text, (
        f"{path} is stale: run `crossbench engines profile --pin {spec} --out {path}`")


def test_real_drift_between_the_two_pins():
    """Facts of the two trees that the adapter relies on (read from the profiles)."""
    from crossbench.engines.llamacpp.profile import known_profiles

    old, new = known_profiles()
    assert (old.build_number, new.build_number) == (11312, 11434)
    assert "--spec-draft-sampling" in new.flags - old.flags
    for p in (old, new):
        assert p.removed["--draft-max"] == "use --spec-draft-n-max or --spec-ngram-mod-n-max"
        assert "llamacpp:spec_decode_num_accepted_tokens_per_pos_total" in p.metrics
        assert set(p.spec_types) >= {"none", "draft-simple", "draft-dflash", "ngram-mod"}
