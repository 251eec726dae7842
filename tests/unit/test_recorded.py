"""The pods real kubelets wrote (kubesim's recorded corpus), judged as zombied judges
them at its defaults: the verdict recorded on the real cluster, a terminal time of the
pod's own for every terminal pod, and a due time that is its min age after it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from zombied.pod import parse_pod
from zombied.rules import RuleSet, judge

from kubesim.recorded import RELEASES, RecordedPod, recorded

CASES = [
    pytest.param(pod, id=f"{release}-{pod.role}")
    for release in RELEASES
    for pod in recorded(release)
]
LATER = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("recorded_pod", CASES)
def test_verdict(recorded_pod: RecordedPod) -> None:
    judgement = judge(parse_pod(recorded_pod.pod), RuleSet(), first_seen=LATER)
    assert (judgement.rule or judgement.skip) == recorded_pod.verdict
    if judgement.pod.terminal:
        assert judgement.since_known
    match = judgement.match
    if match is not None:
        assert judgement.due == judgement.since + timedelta(seconds=match.rule.min_age)
