"""The Kubernetes manifests (k8s/): every overlay renders, every object passes strict offline validation against
Kubernetes 1.37, and the manifests agree with the code they run (settings, probes, shutdown, arguments, image).

The SparkApplication is a custom resource kubernetes-validate has no schema for: it is checked against
SPARK_APPLICATION, our own strict schema of the sparkoperator.k8s.io/v1beta2 fields we use (written from the
operator's CRD: no other field is allowed, the types and enums are the CRD's).
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import fields
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import pytest
from click.testing import CliRunner

from connectors.config import load_config as load_connectors_config
from server.__main__ import GRACEFUL_SHUTDOWN_S, build_parser
from server.app import create_app
from server.config import ServerConfig, load_config
from talos.cli import main as talos_main
from tests.helpers import REPO, render_overlay

KUBERNETES = "1.37.0"
OVERLAYS = ("dev", "prod")
# TALOS_* variables in talos-config that are not server settings, and who reads them.
NOT_SERVER_SETTINGS = {"TALOS_URL": "SDK and CLI (connectors, metering)", "TALOS_DRUID_URL": "the metering job"}
# What the downward API gives a server pod, for example.
DOWNWARD_API = {"metadata.name": "talos-server-7c9d8f6b5-x2k4q", "status.podIP": "10.1.2.3"}
# Secrets the prod overlay expects to exist (docs/operations.md says how to create them).
PROD_SECRETS = {"talos-admin", "talos-portal", "talos-connectors", "talos-portal-tls", "talos-ca"}

_ENV = {"type": "array", "items": {"type": "object"}}
_POD = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "cores": {"type": "integer", "minimum": 1},
        "instances": {"type": "integer", "minimum": 1},
        "memory": {"type": "string", "pattern": r"^\d+[kmgt]?$"},
        "serviceAccount": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "env": _ENV,
        "secrets": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "path", "secretType"],
                "properties": {
                    "name": {"type": "string"},
                    "path": {"type": "string"},
                    "secretType": {"enum": ["Generic", "GCPServiceAccount", "HadoopDelegationToken"]},
                },
            },
        },
    },
}
SPARK_APPLICATION: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "sparkoperator.k8s.io/v1beta2"},
        "kind": {"const": "SparkApplication"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["driver", "executor", "mainApplicationFile", "sparkVersion", "type"],
            "properties": {
                "type": {"enum": ["Java", "Python", "Scala", "R"]},
                "mode": {"enum": ["cluster", "client"]},
                "image": {"type": "string"},
                "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                "mainApplicationFile": {"type": "string"},
                "arguments": {"type": "array", "items": {"type": "string"}},
                "sparkVersion": {"type": "string"},
                "hadoopConfigMap": {"type": "string"},
                "sparkConf": {"type": "object", "additionalProperties": {"type": "string"}},
                "restartPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "type": {"enum": ["Never", "Always", "OnFailure"]},
                        "onFailureRetries": {"type": "integer", "minimum": 0},
                        "onFailureRetryInterval": {"type": "integer", "minimum": 1},
                        "onSubmissionFailureRetries": {"type": "integer", "minimum": 0},
                        "onSubmissionFailureRetryInterval": {"type": "integer", "minimum": 1},
                    },
                },
                "driver": _POD,
                "executor": _POD,
            },
        },
    },
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {overlay: render_overlay(overlay) for overlay in OVERLAYS}


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name)]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def _validate(obj: dict[str, Any]) -> None:
    if obj["kind"] == "SparkApplication":
        jsonschema.validate(obj, SPARK_APPLICATION)
    else:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def _pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet"):
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]


def _container_env(container: dict[str, Any], objects: list[dict[str, Any]]) -> dict[str, str]:
    """The environment a container starts with: envFrom ConfigMaps, then env (literal and key references)."""
    config_maps = {o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), f"<{m.group(1)}>"), var["value"])
        elif "configMapKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["configMapKeyRef"]
            env[var["name"]] = config_maps[ref["name"]][ref["key"]]
        elif "fieldRef" in var.get("valueFrom", {}):
            env[var["name"]] = DOWNWARD_API[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[var["name"]] = "secret-value"
    return env


def _server(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = _one(objects, "Deployment", "talos-server")
    return deployment, deployment["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.slow
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_passes_strict_validation(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    for obj in objects:
        _validate(obj)
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "Ingress"} <= kinds
    assert {"NetworkPolicy", "ConfigMap"} <= kinds
    if overlay == "dev":
        assert _one(objects, "StatefulSet", "zookeeper")["spec"]["replicas"] == 3
        assert _one(objects, "Deployment", "talos-metering")
        assert {"talos-admin", "talos-portal", "talos-connectors"} <= {
            o["metadata"]["name"].rsplit("-", 1)[0] for o in objects if o["kind"] == "Secret"
        }
    else:
        assert "StatefulSet" not in kinds, "prod uses an external ZooKeeper ensemble"
        assert "Secret" not in kinds, "prod Secrets are created out of band, never committed"
        assert _one(objects, "SparkApplication", "talos-metering")
    assert all(
        o["metadata"].get("namespace") == f"talos{'-dev' if overlay == 'dev' else ''}"
        for o in objects
        if o["kind"] not in ("Namespace", "PriorityClass")
    )


def test_the_validation_is_strict(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """A misspelt field or a wrong type fails: the check above can fail."""
    deployment, container = copy.deepcopy(_server(rendered["dev"]))
    container["readinessProbe"]["httpGet"]["pth"] = "/readyz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)
    deployment, _ = copy.deepcopy(_server(rendered["dev"]))
    deployment["spec"]["revisionHistoryLimit"] = "five"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)
    application = copy.deepcopy(_one(rendered["prod"], "SparkApplication", "talos-metering"))
    application["spec"]["driver"]["coreRequests"] = "1"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(application, SPARK_APPLICATION)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_port_and_settings_match_the_server(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    _, container = _server(objects)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = load_config(environ=_container_env(container, objects))
    # The probes reach the port the server listens on, on every address, at paths the server serves.
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert ports[get["port"]] == config.port, probe
    assert config.host == "0.0.0.0"
    routes = {getattr(route, "path", "") for route in create_app(ServerConfig()).routes}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz" in routes
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz" in routes
    assert container["startupProbe"]["httpGet"]["path"] in routes
    # A cluster member with auth on, adopting the ring member of the pod it replaces.
    config.validate_cluster()
    assert config.clustered
    assert config.auth == "on"
    assert config.adopt_vacant_id
    assert config.reassign_delay_s > config.zk_session_timeout_s
    scheme = "https" if overlay == "prod" else "http"
    assert config.advertised_url == f"{scheme}://{DOWNWARD_API['status.podIP']}:8080"
    assert {container[probe]["httpGet"].get("scheme", "HTTP") for probe in ("readinessProbe", "livenessProbe")} == {
        scheme.upper()
    }
    assert config.member_id == DOWNWARD_API["metadata.name"]
    build_parser().parse_args(container["args"][1:])  # talos server's own arguments


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_talos_config_holds_only_known_settings(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    settings = {f"TALOS_{f.name.upper()}" for f in fields(ServerConfig)}
    data = _one(rendered[overlay], "ConfigMap", "talos-config")["data"]
    unknown = sorted(set(data) - settings - set(NOT_SERVER_SETTINGS))
    assert not unknown, f"talos-config has settings no server knows (a typo?): {unknown}"
    assert data["TALOS_METERING_STORE"] == f"druid:{data['TALOS_DRUID_URL']}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_shutdown_and_startup_fit_the_pod_lifecycle(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    deployment, container = _server(objects)
    spec = deployment["spec"]["template"]["spec"]
    config = load_config(environ=_container_env(container, objects))
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # The handoff: preStop, then the server's shutdown (open requests, flushing and sealing partitions, leaving
    # ZooKeeper), which ends within shutdown_timeout_s whatever hangs. Killed earlier, the next owner needs
    # lease recovery; a shutdown bound shorter than a flush's gives a stuck flush no chance to finish.
    handoff = float(pre_stop[1]) + config.shutdown_timeout_s
    assert spec["terminationGracePeriodSeconds"] > handoff + 5
    assert config.shutdown_timeout_s > GRACEFUL_SHUTDOWN_S + config.flush_timeout_s
    # A pod may wait adopt_wait_s for a vacant ring member before it serves: liveness must not kill it first.
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] > config.adopt_wait_s + config.join_delay_s
    # Old pod before new (maxSurge 0): the new pod is created as the old one starts terminating, and waits
    # for the old one's ring member to fall vacant, which takes at most the old pod's grace period.
    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    assert rolling == {"maxSurge": 0, "maxUnavailable": 1}
    assert config.adopt_wait_s >= spec["terminationGracePeriodSeconds"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_selectors_and_references_resolve(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    pods = {name: spec for name, spec in _pod_specs(objects)}
    templates = {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
    }

    def selects(selector: dict[str, Any]) -> list[str]:
        labels = selector.get("matchLabels", {})
        chosen = [name for name, have in templates.items() if labels.items() <= have.items()]
        for expression in selector.get("matchExpressions", []):
            assert expression["operator"] == "NotIn"
            chosen = [n for n in chosen if templates[n].get(expression["key"]) not in expression["values"]]
        return chosen

    for obj in objects:
        kind, spec = obj["kind"], obj.get("spec", {})
        if kind in ("Deployment", "StatefulSet"):
            assert selects(spec["selector"]) == [obj["metadata"]["name"]]
        elif kind == "Service":
            chosen = selects({"matchLabels": spec["selector"]})
            assert chosen, f"Service {obj['metadata']['name']} selects no pods"
            names = {p["name"] for n in chosen for c in pods[n]["containers"] for p in c["ports"]}
            assert {p["targetPort"] for p in spec["ports"]} <= names
        elif kind in ("PodDisruptionBudget", "NetworkPolicy"):
            assert selects(spec.get("selector", spec.get("podSelector", {}))), obj["metadata"]["name"]
        elif kind == "HorizontalPodAutoscaler":
            assert spec["scaleTargetRef"]["name"] in pods
            # The autoscaler owns the count: a replicas field would reset it on every apply.
            assert "replicas" not in _one(objects, "Deployment", spec["scaleTargetRef"]["name"])["spec"]
            assert 3 <= spec["minReplicas"] <= spec["maxReplicas"]
        elif kind == "Ingress":
            services = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
            backends = [p["backend"]["service"]["name"] for r in spec["rules"] for p in r["http"]["paths"]]
            assert set(backends) <= services
            assert [p["path"] for r in spec["rules"] for p in r["http"]["paths"]] == ["/portal"]

    present = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    expected_secrets: set[str] = set()
    for name, spec in pods.items():
        for container in spec["containers"]:
            for var in container.get("env", []):
                ref = var.get("valueFrom", {})
                if "configMapKeyRef" in ref:
                    target = present[("ConfigMap", ref["configMapKeyRef"]["name"])]
                    assert ref["configMapKeyRef"]["key"] in target["data"], (name, var["name"])
                if "secretKeyRef" in ref:
                    expected_secrets.add(ref["secretKeyRef"]["name"])
                    secret = present.get(("Secret", ref["secretKeyRef"]["name"]))
                    if overlay == "dev":
                        assert secret is not None and ref["secretKeyRef"]["key"] in secret["data"], (name, var["name"])
            for source in container.get("envFrom", []):
                assert ("ConfigMap", source["configMapRef"]["name"]) in present
            assert {m["name"] for m in container.get("volumeMounts", [])} <= {
                v["name"] for v in spec.get("volumes", [])
            } | {
                t["metadata"]["name"]
                for t in present.get(("StatefulSet", name), {}).get("spec", {}).get("volumeClaimTemplates", [])
            }
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                expected_secrets.add(volume["secret"]["secretName"])
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in present
            if "persistentVolumeClaim" in volume:
                assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in present
    if overlay == "prod":
        tls = {t["secretName"] for t in _one(objects, "Ingress", "talos-portal")["spec"]["tls"]}
        application = _one(objects, "SparkApplication", "talos-metering")["spec"]
        for role in ("driver", "executor"):
            expected_secrets |= {secret["name"] for secret in application[role].get("secrets", [])}
            for var in application[role]["env"]:
                if "value" in var:
                    continue
                if "secretKeyRef" in var["valueFrom"]:
                    expected_secrets.add(var["valueFrom"]["secretKeyRef"]["name"])
                else:
                    assert ("ConfigMap", var["valueFrom"]["configMapKeyRef"]["name"]) in present
        assert expected_secrets | tls == PROD_SECRETS
        assert ("ConfigMap", application["hadoopConfigMap"]) in present
        operations = (REPO / "docs" / "operations.md").read_text()
        for secret in PROD_SECRETS:
            assert f"secret generic {secret}" in operations or f"secret tls {secret}" in operations, secret


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_bounded_and_unprivileged(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    for name, spec in _pod_specs(rendered[overlay]):
        assert spec["securityContext"]["runAsNonRoot"], name
        for container in spec["containers"]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), name
            assert "memory" in resources["limits"], name
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_servers_reach_zookeeper(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    zk_servers = _one(objects, "ConfigMap", "talos-config")["data"]["TALOS_ZK"].split("/")[0].split(",")
    if overlay == "dev":
        (policy,) = policies
        assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "zookeeper"}
        sources = [peer["podSelector"]["matchLabels"] for rule in policy["spec"]["ingress"] for peer in rule["from"]]
        assert sources == [
            {"app.kubernetes.io/name": "talos", "app.kubernetes.io/component": "server"},
            {"app.kubernetes.io/name": "zookeeper"},
        ]
        client_rule = policy["spec"]["ingress"][0]
        assert [p["port"] for p in client_rule["ports"]] == [2181]
        statefulset = _one(objects, "StatefulSet", "zookeeper")
        members = [f"zookeeper-{i}.{statefulset['spec']['serviceName']}:2181" for i in range(3)]
        assert zk_servers == members
    else:
        (policy,) = policies
        expressions = policy["spec"]["podSelector"]["matchExpressions"]
        assert expressions == [{"key": "app.kubernetes.io/component", "operator": "NotIn", "values": ["server"]}]
        assert policy["spec"]["policyTypes"] == ["Egress"]
        blocks = [peer["ipBlock"] for rule in policy["spec"]["egress"] for peer in rule["to"] if "ipBlock" in peer]
        ipv4 = [block for block in blocks if block["cidr"] == "0.0.0.0/0"]
        assert ipv4 and all(block.get("except") for block in ipv4), "the ensemble's range must be excepted"
        assert len(zk_servers) >= 3


def test_connectors_config_is_valid(rendered: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    data = _one(rendered["dev"], "ConfigMap", "talos-connectors")["data"]
    path = tmp_path / "connectors.yaml"
    path.write_text(data["connectors.yaml"])
    config = load_connectors_config(path)
    assert config.connectors


def _cli_accepts(args: list[str]) -> None:
    """Click rejects an unknown option or a bad value before --help prints, so this checks the arguments."""
    result = CliRunner().invoke(talos_main, [*args, "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_container_arguments_are_accepted(rendered: dict[str, list[dict[str, Any]]]) -> None:
    connectors = _one(rendered["dev"], "Deployment", "talos-connectors")["spec"]["template"]["spec"]["containers"][0]
    assert connectors["args"][0] == "talos"
    _cli_accepts(connectors["args"][1:])
    metering = _one(rendered["dev"], "Deployment", "talos-metering")["spec"]["template"]["spec"]["containers"][0]
    _cli_accepts([arg.replace("$(TALOS_DRUID_URL)", "http://druid:8888") for arg in metering["args"][1:]])
    application = _one(rendered["prod"], "SparkApplication", "talos-metering")["spec"]
    _cli_accepts(["metering", "run", *application["arguments"]])
    assert application["arguments"][:2] == ["--master", "submit"]


def test_sparkapplication_runs_the_metering_module_of_the_image(rendered: dict[str, list[dict[str, Any]]]) -> None:
    application = _one(rendered["prod"], "SparkApplication", "talos-metering")["spec"]
    dockerfile = (REPO / "Dockerfile").read_text()
    python = re.search(r"^FROM python:(\d+\.\d+)-", dockerfile, re.M)
    venv = re.search(r"python -m venv (\S+)", dockerfile)
    assert python and venv
    expected = f"local://{venv.group(1)}/lib/python{python.group(1)}/site-packages/metering/__main__.py"
    assert application["mainApplicationFile"] == expected
    assert application["sparkVersion"] == version("pyspark")
    command = [sys.executable, "-m", "metering", "--help"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Usage: talos metering run" in done.stdout


def test_dockerfile_installs_every_package() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    copied = re.findall(r"^COPY (\S+) \1$", dockerfile, re.M)
    assert sorted(copied) == sorted(packages)
    entrypoint = re.search(r'^ENTRYPOINT \[.*"(/usr/local/bin/[^"]+)"\]', dockerfile, re.M)
    assert entrypoint
    source = re.search(rf"^COPY (\S+) {re.escape(entrypoint.group(1))}$", dockerfile, re.M)
    assert source and os.access(REPO / source.group(1), os.X_OK)
    for ignored in (REPO / ".dockerignore").read_text().split():
        assert ignored.strip("*/") not in packages


def _entrypoint(*args: str, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run(
        [str(REPO / "scripts" / "container-entrypoint"), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "TALOS_ENTRYPOINT_DRY_RUN": "1", "SPARK_HOME": "/opt/spark", **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_entrypoint_passes_talos_commands_through() -> None:
    assert _entrypoint("talos", "server", "--log-format", "json") == ["talos", "server", "--log-format", "json"]
    assert _entrypoint() == ["talos", "--help"]


def test_entrypoint_starts_a_spark_driver() -> None:
    argv = _entrypoint(
        "driver",
        "--properties-file",
        "/opt/spark/conf/spark.properties",
        "local:///app.py",
        "--master",
        "submit",
        env={"SPARK_DRIVER_BIND_ADDRESS": "10.0.0.7"},
    )
    assert argv[0] == "/opt/spark/bin/spark-submit"
    assert argv[1:3] == ["--deploy-mode", "client"]
    assert "spark.driver.bindAddress=10.0.0.7" in argv
    passed = ["--properties-file", "/opt/spark/conf/spark.properties", "local:///app.py", "--master", "submit"]
    assert argv[-len(passed) :] == passed


def test_entrypoint_starts_a_spark_executor_with_its_options_in_order() -> None:
    env = {
        "SPARK_EXECUTOR_MEMORY": "1g",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.0.0.7:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-1",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.9",
        "SPARK_EXECUTOR_POD_NAME": "talos-metering-exec-3",
        "HADOOP_CONF_DIR": "/etc/hadoop/conf",
        # Numeric order, not string order: 10 comes after 2.
        **{f"SPARK_JAVA_OPT_{i}": f"-Dopt{i}=x" for i in (0, 1, 2, 10)},
    }
    argv = _entrypoint("executor", env=env)
    assert argv[:5] == ["java", "-Dopt0=x", "-Dopt1=x", "-Dopt2=x", "-Dopt10=x"]
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in argv
    joined = shlex.join(argv)
    for flag in ("--executor-id 3", "--hostname 10.0.0.9", "--app-id spark-1", "--podName talos-metering-exec-3"):
        assert flag in joined
    assert "-Xmx1g" in argv
    # Spark's and Hadoop's configuration ahead of the jars, so hdfs://NAMESERVICE resolves on executors.
    classpath = argv[argv.index("-cp") + 1].split(":")
    assert classpath[:2] == ["/opt/spark/conf", "/etc/hadoop/conf"]
    assert classpath[-1] == "/opt/spark/jars/*"


def test_prod_servers_resolve_the_hdfs_nameservice(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """TALOS_STORAGE names a nameservice that the hdfs-site.xml mounted at HADOOP_CONF_DIR defines (an HA
    nameservice the server's client resolves: tests/e2e/test_hdfs_nameservice.py runs it against real HDFS)."""
    objects = rendered["prod"]
    _, container = _server(objects)
    env = _container_env(container, objects)
    storage = urlparse(env["TALOS_STORAGE"])
    assert storage.scheme == "hdfs" and storage.port is None
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == env["HADOOP_CONF_DIR"])
    spec = _one(objects, "Deployment", "talos-server")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    site = _one(objects, "ConfigMap", volume["configMap"]["name"])["data"]["hdfs-site.xml"]
    assert f"<value>{storage.hostname}</value>" in site
    assert f"dfs.ha.namenodes.{storage.hostname}" in site
    application = _one(objects, "SparkApplication", "talos-metering")["spec"]
    assert application["hadoopConfigMap"] == volume["configMap"]["name"]
    checkpoint = application["arguments"][application["arguments"].index("--checkpoint") + 1]
    assert urlparse(checkpoint).hostname == storage.hostname


def test_zookeeper_keeps_its_transaction_log_on_its_volume(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Snapshots and the transaction log (acknowledged writes) both on the member's claim, not an emptyDir."""
    statefulset = _one(rendered["dev"], "StatefulSet", "zookeeper")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    claims = {t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]}
    on_claims = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in claims]
    env = {v["name"]: v["value"] for v in container["env"]}
    data_dir = env.get("ZOO_DATA_DIR", "/data")  # the image's defaults
    log_dir = env.get("ZOO_DATA_LOG_DIR", "/datalog")
    for directory in (data_dir, log_dir):
        assert any(directory == m or directory.startswith(m + "/") for m in on_claims), directory


def test_prod_serves_tls_everywhere_and_its_clients_trust_the_ca(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The prod servers' TLS files come from a mounted cert-manager CSI volume (a certificate per pod, for its IP:
    what the SDK and the other servers reach it at); the connectors and the metering job, which reach the servers
    at https://talos:8080, trust the CA from a mounted Secret. Dev stays plaintext."""
    objects = rendered["prod"]
    deployment, container = _server(objects)
    config = load_config(environ=_container_env(container, objects))
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    for path in (config.tls_cert_file, config.tls_key_file, config.tls_ca_file):
        volume = mounts[str(Path(path).parent)]
        assert volume["csi"]["driver"] == "csi.cert-manager.io"
        attributes = volume["csi"]["volumeAttributes"]
        assert attributes["csi.cert-manager.io/ip-sans"] == "${POD_IP}"
        assert "talos" in attributes["csi.cert-manager.io/dns-names"].split(",")  # the Service: TALOS_URL's host
    assert config.url.startswith("https://")
    talos_url = _one(objects, "ConfigMap", "talos-config")["data"]["TALOS_URL"]
    assert urlparse(talos_url).scheme == "https"
    _, connectors = next((n, s) for n, s in _pod_specs(objects) if n.startswith("talos-connectors"))
    [connector] = connectors["containers"]
    ca_file = next(e["value"] for e in connector["env"] if e["name"] == "TALOS_CA_FILE")
    mounted = {m["mountPath"]: m["name"] for m in connector["volumeMounts"]}
    secret_volumes = {v["name"]: v["secret"]["secretName"] for v in connectors["volumes"] if "secret" in v}
    assert secret_volumes[mounted[str(Path(ca_file).parent)]] == "talos-ca"
    application = _one(objects, "SparkApplication", "talos-metering")["spec"]
    for role in ("driver", "executor"):
        ca = next(e["value"] for e in application[role]["env"] if e["name"] == "TALOS_CA_FILE")
        assert {(s["name"], s["path"]) for s in application[role]["secrets"]} == {("talos-ca", str(Path(ca).parent))}
    dev_config = load_config(environ=_container_env(_server(rendered["dev"])[1], rendered["dev"]))
    assert not dev_config.tls_cert_file and dev_config.url.startswith("http://")
