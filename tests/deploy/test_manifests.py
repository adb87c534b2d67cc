"""The deployment artefacts (compose, Kubernetes, Prometheus, Grafana) parse and hang together.

None of them can run here (no Docker engine, no cluster); these checks are what can be known
without running them: syntax, schemas (kubernetes-validate, promtool when installed), and the
cross-references between files.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from gateway.config import parse_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))
DASHBOARD = DEPLOY / "grafana" / "plumbline.json"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"

DASHBOARD_METRICS = {
    "gateway_cost_per_million_tokens_usd",
    "gateway_api_node_cost_ratio",
    "gateway_tokens_total",
    "gateway_ttft_seconds_bucket",
    "gateway_errors_total",
    "gateway_truncations_total",
    "gateway_requests_total",
    "gateway_attempts_total",
    "gateway_fallbacks_total",
    "gateway_retries_total",
    "gateway_inter_token_seconds_bucket",
    "gateway_rejected_requests_total",
    "gateway_shadow_requests_total",
    "gateway_shadow_agreement_total",
    "gateway_watchdog_rate",
    "gateway_cost_usd_total",
    "gateway_event_loop_busy_ratio",
    "gateway_event_loop_lag_seconds_bucket",
}
PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
}


def k8s_docs() -> list[dict]:
    docs = []
    for path in K8S:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def find(kind: str, name: str) -> dict:
    matches = [d for d in k8s_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}"
    return matches[0]


def metric_names(expr: str) -> set[str]:
    """Series names a PromQL expression reads (labels, ranges, strings and functions removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", text):
        after = text[match.end() :].lstrip()
        if not after.startswith("(") and match.group() not in PROMQL_WORDS:
            names.add(match.group())
    return names


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def concrete(expr: str, rate: str = "5m", lane: str = "client") -> str:
    return expr.replace("$__rate_interval", rate).replace("$model", ".*").replace("$lane", lane)


# --- Grafana --------------------------------------------------------------------------------


def test_metric_name_extraction():
    assert metric_names(
        'sum by (kind) (rate(gateway_tokens_total{model=~"a|b"}[5m])) / clamp_min(x_total, 1e-9)'
    ) == {"gateway_tokens_total", "x_total"}
    assert metric_names("histogram_quantile(0.99, sum by (le) (rate(y_bucket[1m])))") == {
        "y_bucket"
    }


def test_dashboard_panels_read_only_the_gateway_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    used: set[str] = set()
    for expr in dashboard_exprs():
        names = metric_names(expr)
        assert names, expr
        assert names <= DASHBOARD_METRICS, f"{expr} reads {names - DASHBOARD_METRICS}"
        used |= names
    assert used == DASHBOARD_METRICS  # every listed metric is charted
    sides = {s for e in dashboard_exprs() for s in re.findall(r'side="(\w+)"', e)}
    assert sides == {"node", "api"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_dashboard_queries_are_valid_promql(tmp_path: Path):
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"check:expr{i}", "expr": concrete(e)}
                    for i, e in enumerate(dashboard_exprs())
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# --- Prometheus -----------------------------------------------------------------------------


def promtool_config(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["promtool", "check", "config", "--syntax-only", str(path)], capture_output=True, text=True
    )


def test_prometheus_config_scrapes_the_gateway():
    config = yaml.safe_load(PROMETHEUS.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["plumbline-gateway"]["static_configs"][0]["targets"] == ["gateway:8400"]
    assert jobs["plumbline-gateway"]["metrics_path"] == "/metrics"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_prometheus_config_passes_promtool(tmp_path: Path):
    done = promtool_config(PROMETHEUS)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text("scrape_configs:\n  - job_name: x\n    scrape_interval: soon\n")
    assert promtool_config(broken).returncode != 0


# What a Kubernetes SD block may hold (Prometheus' kubernetes_sd_config).
K8S_SD_KEYS = {
    "role",
    "namespaces",
    "selectors",
    "api_server",
    "kubeconfig_file",
    "attach_metadata",
}


def in_cluster_prometheus() -> dict:
    return yaml.safe_load(find("ConfigMap", "prometheus")["data"]["prometheus.yml"])


def static_for_check(config: dict) -> dict:
    """`config` with each job's Kubernetes SD replaced by a static target, for a promtool built
    without Kubernetes SD (Debian's): everything else (relabelling, intervals) is still checked."""
    copy = json.loads(json.dumps(config))
    for job in copy["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": ["discovered.invalid:8000"]}]
    return copy


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_in_cluster_prometheus_config_passes_promtool(tmp_path: Path):
    path = tmp_path / "k8s-prometheus.yml"
    path.write_text(find("ConfigMap", "prometheus")["data"]["prometheus.yml"])
    done = promtool_config(path)
    if "kubernetes_sd_configs not found" in done.stdout + done.stderr:
        # This promtool has no Kubernetes SD: check the rest with the SD made static; the SD
        # blocks themselves are checked by test_in_cluster_discovery_finds_the_pods.
        path.write_text(yaml.safe_dump(static_for_check(in_cluster_prometheus())))
        done = promtool_config(path)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = static_for_check(in_cluster_prometheus())
    broken["scrape_configs"][0]["relabel_configs"][0]["action"] = "keeep"
    path.write_text(yaml.safe_dump(broken))
    assert promtool_config(path).returncode != 0  # the static rewrite still checks relabelling


def pod_meta_labels(workload: dict) -> list[dict[str, str]]:
    """The ``__meta_kubernetes_pod_*`` labels Prometheus' pod role gives each container port
    of `workload`'s pods (the ones the in-cluster config relabels on)."""
    template = workload["spec"]["template"]
    base = {
        "__meta_kubernetes_namespace": workload["metadata"]["namespace"],
        **{
            "__meta_kubernetes_pod_label_" + re.sub(r"[^A-Za-z0-9_]", "_", key): value
            for key, value in template["metadata"]["labels"].items()
        },
    }
    targets = []
    for container in template["spec"]["containers"]:
        for port in container.get("ports", []):
            targets.append({**base, "__meta_kubernetes_pod_container_port_name": port["name"]})
    return targets


def kept(job: dict, labels: dict[str, str]) -> bool:
    for rule in job.get("relabel_configs", []):
        if rule.get("action", "replace") != "keep":
            continue
        value = ";".join(labels.get(name, "") for name in rule["source_labels"])
        if not re.fullmatch(rule["regex"], value):
            return False
    return True


def test_in_cluster_discovery_finds_the_pods():
    """The Kubernetes SD blocks are well formed, look in the namespace the pods run in, and
    their keep rules select exactly the gateway's and the vLLM replicas' HTTP ports."""
    jobs = {job["job_name"]: job for job in in_cluster_prometheus()["scrape_configs"]}
    namespaces = {d["metadata"]["name"] for d in k8s_docs() if d["kind"] == "Namespace"}
    for job in jobs.values():
        for sd in job["kubernetes_sd_configs"]:
            assert set(sd) <= K8S_SD_KEYS, set(sd) - K8S_SD_KEYS
            assert sd["role"] == "pod"
            assert set(sd["namespaces"]["names"]) <= namespaces
    workloads = [d for d in k8s_docs() if d["kind"] in ("Deployment", "StatefulSet")]
    scraped = {
        name: sorted(
            w["metadata"]["name"]
            for w in workloads
            for labels in pod_meta_labels(w)
            if kept(job, labels)
        )
        for name, job in jobs.items()
    }
    vllm = sorted(
        w["metadata"]["name"] for w in workloads if w["metadata"]["name"].startswith("vllm-")
    )
    assert scraped == {"plumbline-gateway": ["plumbline-gateway"], "vllm": vllm}


# --- compose --------------------------------------------------------------------------------


def test_compose_has_the_four_services_wired_together():
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert set(services) == {"gateway", "postgres", "prometheus", "grafana"}
    assert services["gateway"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0]
            if source.startswith("."):
                assert (COMPOSE.parent / source).exists(), f"{name} mounts missing {source}"
        for key, value in (service.get("environment") or {}).items():
            if "PASSWORD" in key:
                assert str(value).startswith("${"), f"{name}.{key} must come from .env"
    assert (COMPOSE.parent / services["gateway"]["build"]["dockerfile"].split("/", 2)[2]).exists()


def test_compose_gateway_config_is_valid_and_points_at_the_postgres_service():
    config = parse_config(tomllib.loads((COMPOSE.parent / "plumbline.toml").read_text()))
    assert config.store.url.startswith("postgresql+psycopg://")
    userinfo = config.store.url.split("//", 1)[1].split("@", 1)[0]
    assert ":" not in userinfo  # no password in the file
    assert "@postgres:5432/" in config.store.url


def test_grafana_provisioning_matches_the_dashboard():
    sources = yaml.safe_load((COMPOSE.parent / "grafana" / "datasources.yml").read_text())
    uids = {s["uid"] for s in sources["datasources"]}
    dashboard = json.loads(DASHBOARD.read_text())
    used = {p["datasource"]["uid"] for p in dashboard["panels"]}
    used |= {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert used <= uids


# --- Kubernetes -----------------------------------------------------------------------------


def test_k8s_documents_are_well_formed():
    docs = k8s_docs()
    assert docs
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), doc
        assert doc["metadata"]["name"]
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "plumbline", doc["metadata"]["name"]


def test_k8s_selectors_match_their_pods():
    docs = k8s_docs()
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    pod_labels = [w["spec"]["template"]["metadata"]["labels"] for w in workloads]
    for workload in workloads:
        wanted = workload["spec"]["selector"]["matchLabels"]
        assert wanted.items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    for service in (d for d in docs if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        assert any(selector.items() <= labels.items() for labels in pod_labels), service


def test_k8s_gateway_vllm_and_postgres():
    gateway = find("Deployment", "plumbline-gateway")
    assert gateway["spec"]["replicas"] == 2
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert find("StatefulSet", "postgres")["spec"]["volumeClaimTemplates"]
    replicas = [
        d
        for d in k8s_docs()
        if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("vllm-")
    ]
    assert len(replicas) >= 2
    for replica in replicas:
        resources = replica["spec"]["template"]["spec"]["containers"][0]["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == 1


def test_k8s_gateway_config_is_valid_and_names_existing_services():
    text = find("ConfigMap", "plumbline-gateway")["data"]["config.toml"]
    config = parse_config(tomllib.loads(text))
    services = {d["metadata"]["name"] for d in k8s_docs() if d["kind"] == "Service"}
    for upstream in config.upstreams:
        host = upstream.base_url.split("//", 1)[1].split(".", 1)[0]
        assert host in services, upstream.base_url
    assert config.store.url.split("@", 1)[1].split(".", 1)[0] in services


def test_k8s_documents_pass_the_kubernetes_schemas():
    import kubernetes_validate  # a test dependency (pyproject's [test] extra)

    version = kubernetes_validate.latest_version()
    for doc in k8s_docs():
        kubernetes_validate.validate(doc, version, strict=True)
    broken = json.loads(json.dumps(find("Deployment", "plumbline-gateway")))
    broken["spec"]["replica"] = broken["spec"].pop("replicas")  # a typo the schema must catch
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


# --- generated from the profile -------------------------------------------------------------


def test_the_committed_files_are_what_the_profile_generates():
    from deploy import manifests

    assert manifests.stale(manifests.generated()) == [], "run: python -m deploy.manifests"
    assert manifests.main(["--check"]) == 0


def test_the_generator_notices_a_hand_edit(tmp_path: Path):
    from deploy import manifests

    files = {tmp_path / "vllm.yaml": manifests.k8s_vllm_yaml()}
    (tmp_path / "vllm.yaml").write_text(files[tmp_path / "vllm.yaml"].replace("hermes", "x"))
    assert manifests.stale(files) == [tmp_path / "vllm.yaml"]


def test_k8s_vllm_args_are_the_profiles_recipe():
    """Each replica runs what `plumbline deploy vllm` runs for the profile: its parsers, its
    context window, its vllm_args and vllm_env (read here from the profile itself)."""
    from deploy.engine import VLLM_RECORD_FLAGS
    from deploy.manifests import MODEL, PROFILE, VLLM_PORT
    from deploy.vllm import gpu_args, plan_replicas, resolve_profile

    profile = resolve_profile(PROFILE, None)
    (plan,) = plan_replicas(PROFILE, profile, [0], MODEL, MODEL, host="0.0.0.0", base_port=8000)
    replicas = [
        d
        for d in k8s_docs()
        if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("vllm-")
    ]
    assert replicas
    for replica in replicas:
        (container,) = replica["spec"]["template"]["spec"]["containers"]
        args = container["args"]
        assert container["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        assert args == gpu_args(plan.spec)
        flags = dict(zip(args, [*args[1:], None], strict=True))
        assert flags["--model"] == flags["--served-model-name"] == MODEL
        assert flags["--port"] == str(VLLM_PORT) == str(container["ports"][0]["containerPort"])
        assert flags["--max-model-len"] == str(profile.context_window)
        assert flags.get("--reasoning-parser") == profile.reasoning_parser
        assert flags.get("--tool-call-parser") == profile.tool_call_parser
        assert set(VLLM_RECORD_FLAGS) <= set(args)
        tail = args[len(args) - len(profile.vllm_args) :] if profile.vllm_args else []
        assert tail == list(profile.vllm_args)
        env = {e["name"]: e["value"] for e in container.get("env", [])}
        assert env == dict(profile.vllm_env)


def test_shipped_gateway_configs_apply_the_profile():
    from deploy.manifests import PROFILE

    compose = parse_config(tomllib.loads((COMPOSE.parent / "plumbline.toml").read_text()))
    k8s = parse_config(tomllib.loads(find("ConfigMap", "plumbline-gateway")["data"]["config.toml"]))
    for config in (compose, k8s):
        assert config.upstreams
        assert {u.profile for u in config.upstreams} == {PROFILE}
        assert {r.profile for r in config.models.values()} == {PROFILE}
        assert config.profile_for(next(iter(config.models))) is config.profiles[PROFILE]


def test_compose_upstreams_are_what_its_deploy_command_registers():
    """deploy/compose's gateway names the replicas `plumbline deploy vllm` starts on the host,
    with the command its header gives (same names, same ports)."""
    import shlex

    from deploy.manifests import compose_command, compose_plans

    text = (COMPOSE.parent / "plumbline.toml").read_text()
    assert compose_command() in text
    argv = shlex.split(compose_command())
    assert argv[:3] == ["plumbline", "deploy", "vllm"]
    compose = parse_config(tomllib.loads(text))
    got = [(u.name, u.base_url.rsplit(":", 1)[1]) for u in compose.upstreams]
    assert got == [(p.name, f"{p.spec.port}/v1") for p in compose_plans()]
