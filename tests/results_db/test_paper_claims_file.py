"""The papers' claims are data (papers/*.yaml), checked on load as a site file is: a file that does
not say a claim is refused in one line naming the file, the claim and the field."""

from __future__ import annotations

import pytest

from conftest import REPO
from results_db.analysis.paper_claims import CLAIMS, METRICS, PaperClaimsError, load_claims

GOOD = """paper: A. Author, Venue'99
claims:
  - study: smoke
    source: sec. 1, Fig. 1
    what: solo over sync
    metric: speedup
    value: 1.5
    unit: x
    match: {algorithm: eager_solo}
    baseline: {algorithm: sync}
    settings: 8 processes
"""


def test_every_shipped_claim_names_a_study_preset_and_its_metrics_unit():
    presets = {p.stem for p in (REPO / "orchestrator" / "sweep" / "conf" / "study").glob("*.yaml")}
    assert CLAIMS and {c.study for c in CLAIMS} <= presets
    assert all(c.unit == METRICS[c.metric] and c.source.startswith("Li, Ben-Nun") for c in CLAIMS)


@pytest.mark.parametrize("change, said", [
    (("unit: x", "unit: s"), "claim 1: unit='s': a speedup is in 'x'"),
    (("metric: speedup", "metric: faster"), "claim 1: metric='faster': expected one of speedup, top1, rate"),
    (("match: {algorithm: eager_solo}", "match: {algoritm: eager_solo}"), "claim 1: match.algoritm: not a run field"),
    (("    value: 1.5\n", ""), "claim 1: value is missing"),
    (("    value: 1.5\n", "    value: fast\n"), "claim 1: value='fast': expected a number"),
    (("    settings:", "    figure: 3\n    settings:"), "claim 1: unknown field 'figure'"),
    (("    baseline: {algorithm: sync}\n", ""), "claim 1: a speedup names its baseline"),
    (("claims:", "claims: ["), "not valid YAML"),
])
def test_a_claim_that_says_nothing_clear_is_refused_in_one_line(tmp_path, change, said):
    (tmp_path / "good.yaml").write_text(GOOD)
    [claim] = load_claims(tmp_path)       # the control: the file as written loads
    assert (claim.value, claim.unit, claim.source) == (1.5, "x", "A. Author, Venue'99, sec. 1, Fig. 1")
    (tmp_path / "good.yaml").write_text(GOOD.replace(*change))
    with pytest.raises(PaperClaimsError) as err:
        load_claims(tmp_path)
    message = str(err.value)
    assert said in message and "good.yaml" in message and "\n" not in message, message
