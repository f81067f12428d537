"""Inhibition, as Alertmanager's inhibit/ package does it: a firing source alert mutes targets.

The point on a GPU box: when NVML is blind (CollectorDown: NVML hung, driver/library mismatch)
every GPU alert on that host is a consequence, not news, and paging for each of them buries the
one alert that says what is wrong; when an engine cannot be scraped, its serving alerts are.
Each source mutes only what it really hides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from alerts.silence import Matcher, MatchOp

ALERTNAME = "alertname"


@dataclass(frozen=True, slots=True)
class InhibitRule:
    """Alertmanager's inhibit_rules entry: ``source_match``, ``target_match_re``, ``equal``.

    Source labels must equal the given values; target labels must fully match the given
    regexes (anchored, as Alertmanager anchors them); the ``equal`` labels must carry the same
    value on source and target, a missing label reading as "" on both sides, as in Alertmanager.
    """

    source_match: Mapping[str, str]
    target_match_re: Mapping[str, str]
    equal: tuple[str, ...] = ()
    _source: tuple[Matcher, ...] = field(init=False, repr=False, compare=False)
    _target: tuple[Matcher, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built once (and regexes checked once) so a bad rule fails at load, not at evaluation.
        source = tuple(Matcher(k, v) for k, v in self.source_match.items())
        target = tuple(Matcher(k, v, MatchOp.REGEX) for k, v in self.target_match_re.items())
        object.__setattr__(self, "_source", source)
        object.__setattr__(self, "_target", target)

    def source_matches(self, labels: Mapping[str, str]) -> bool:
        return all(m.matches(labels) for m in self._source)

    def target_matches(self, labels: Mapping[str, str]) -> bool:
        return all(m.matches(labels) for m in self._target)

    def equal_on(self, source: Mapping[str, str], target: Mapping[str, str]) -> bool:
        return all(source.get(n, "") == target.get(n, "") for n in self.equal)


_GPU = "Gpu.*|Vram.*"
_ENGINE_SERVING = "Latency.*|Queue.*|KvCache.*"

DEFAULT_INHIBIT_RULES: tuple[InhibitRule, ...] = (
    # Blind NVML reports nothing (or zeros), so the host's GPU alerts are noise until it sees
    # again; its engines are scraped apart and still seen, so their alerts stay, and other
    # hosts are unaffected (equal on host). Scoped to what NVML observes: an alert NVML still
    # reports (a GPU at 95 C) is never muted by an engine's trouble.
    InhibitRule({ALERTNAME: "CollectorDown", "collector": "nvml"}, {ALERTNAME: _GPU}, ("host",)),
    # An engine that cannot be scraped has no fresh latency, queue or KV-cache numbers: say
    # "target down" once, not once per derived symptom, and only for that target.
    InhibitRule({ALERTNAME: "TargetDown"}, {ALERTNAME: _ENGINE_SERVING}, ("host", "target")),
)


def inhibited_by(
    alert_labels: Mapping[str, str],
    firing: Iterable[Mapping[str, str]],
    rules: Iterable[InhibitRule],
) -> str | None:
    """The alertname of the first firing alert that inhibits ``alert_labels``, else None.

    ``firing`` holds the label sets (alertname included) of the alerts firing now; resolved
    alerts must not be passed, since Alertmanager's inhibitor ignores resolved sources.
    """
    sources = tuple(firing)
    for rule in rules:
        if not rule.target_matches(alert_labels):
            continue
        # inhibit.go Mutes/hasEqual: when the alert matches the source side as well, sources
        # that match both sides are skipped, so an alert cannot inhibit itself (nor a twin
        # that is equally source and target) and both stay visible.
        two_sided = rule.source_matches(alert_labels)
        for source in sources:
            if _inhibits(rule, source, alert_labels, two_sided):
                return source.get(ALERTNAME, "")
    return None


def _inhibits(
    rule: InhibitRule, source: Mapping[str, str], target: Mapping[str, str], two_sided: bool
) -> bool:
    if not rule.source_matches(source) or not rule.equal_on(source, target):
        return False
    return not (two_sided and rule.target_matches(source))
