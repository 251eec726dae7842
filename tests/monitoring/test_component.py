"""The optional monitoring component, rendered with the real kubectl, fits the base.

Built-in kinds validate strictly against the Kubernetes schemas; the
prometheus-operator's custom resources are checked against the fields of their CRDs
(monitoring.coreos.com/v1) and against the base's metrics Service.
"""

from __future__ import annotations

import json
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.ship.manifests import MANIFESTS, Obj, find, one, render

pytestmark = [pytest.mark.kubectl, pytest.mark.xdist_group("monitoring-component")]

COMPONENT = MANIFESTS / "components" / "monitoring"
OVERLAY = MANIFESTS / "overlays" / "monitoring"
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
#: Prometheus's duration syntax (model.ParseDuration).
DURATION = re.compile(r"^((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?$")
RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
GROUP_KEYS = {"name", "interval", "rules", "partial_response_strategy", "limit"}
ENDPOINT_KEYS = {
    "port", "targetPort", "path", "scheme", "interval", "scrapeTimeout", "honorLabels",
    "relabelings", "metricRelabelings", "tlsConfig", "bearerTokenSecret", "params",
}  # fmt: skip
SERVICE_MONITOR_KEYS = {
    "jobLabel", "selector", "endpoints", "namespaceSelector", "targetLabels", "podTargetLabels",
    "sampleLimit",
}  # fmt: skip


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    return render(OVERLAY)


def test_the_overlay_is_the_base_plus_the_component(rendered: list[Obj]) -> None:
    base = render(MANIFESTS)
    added = [obj for obj in rendered if obj not in base]
    assert sorted(obj["kind"] for obj in added) == ["ConfigMap", "PrometheusRule", "ServiceMonitor"]
    for obj in added:
        assert obj["metadata"]["namespace"] == "zombied"
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "zombied"


def test_built_in_kinds_validate_against_the_kubernetes_schema(rendered: list[Obj]) -> None:
    version = kubernetes_validate.latest_version() + ".0"
    for obj in rendered:
        if obj["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(obj, version, strict=True)


def test_the_service_monitor_scrapes_the_metrics_service(rendered: list[Obj]) -> None:
    monitor = one(rendered, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    spec = monitor["spec"]
    assert set(spec) <= SERVICE_MONITOR_KEYS
    services = [
        svc
        for svc in find(rendered, "Service")
        if spec["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    ]
    assert [svc["metadata"]["name"] for svc in services] == ["zombied-metrics"]
    ports = {port["name"] for port in services[0]["spec"]["ports"]}
    # The job label every alert and panel selects comes from this Service label.
    assert services[0]["metadata"]["labels"][spec["jobLabel"]] == "zombied"
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= ENDPOINT_KEYS
        assert endpoint["port"] in ports
        assert endpoint["path"] == "/metrics"
        assert DURATION.match(endpoint["interval"])


def test_the_prometheus_rule_is_well_formed(rendered: list[Obj]) -> None:
    rule = one(rendered, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    for group in rule["spec"]["groups"]:
        assert set(group) <= GROUP_KEYS
        for entry in group["rules"]:
            assert set(entry) <= RULE_KEYS
            assert ("alert" in entry) != ("record" in entry)
            assert isinstance(entry["expr"], str)
            assert DURATION.match(entry.get("for", "0s"))
            assert all(isinstance(v, str) for v in entry.get("annotations", {}).values())
    plain = yaml.safe_load((COMPONENT / "zombied-rules.yaml").read_text())
    assert rule["spec"] == plain


def test_the_dashboard_config_map_carries_the_dashboard(rendered: list[Obj]) -> None:
    config_map = one(rendered, "ConfigMap", "zombied-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(config_map["data"]["zombied.json"])
    assert shipped == json.loads((COMPONENT / "dashboard.json").read_text())


def _targets(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [target for panel in dashboard["panels"] for target in panel["targets"]]


def test_every_panel_queries_zombied() -> None:
    dashboard = json.loads((COMPONENT / "dashboard.json").read_text())
    assert dashboard["panels"]
    for panel in dashboard["panels"]:
        assert panel["targets"], f"panel {panel['title']} has no query"
        assert panel["datasource"]["uid"] == "${datasource}"
    for target in _targets(dashboard):
        assert 'job="zombied"' in target["expr"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
