"""deploy/: the container, Kubernetes manifests and systemd unit agree with `xlacache serve`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
import typer

yaml = pytest.importorskip("yaml")

from xlacache.cli.serve import serve_command  # noqa: E402
from xlacache.server.auth import TokenTable  # noqa: E402
from xlacache.server.config import (  # noqa: E402
    ENV_PREFIX,
    _known,
    is_bucket_url,
    split_host_port,
)
from xlacache.units import parse_duration, parse_size  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def serve_flags() -> set[str]:
    app = typer.Typer()
    app.command()(serve_command)
    cmd: click.Command = typer.main.get_command(app)
    return {opt for p in cmd.params for opt in p.opts}


def parse_args(args: list[str]) -> dict[str, str]:
    flags = serve_flags()
    out = {}
    for arg in args:
        name, _, value = arg.partition("=")
        assert name in flags, f"{name} is not an option of xlacache serve"
        out[name] = value
    return out


def manifests() -> dict[str, dict]:
    return {p.stem: yaml.safe_load(p.read_text()) for p in (DEPLOY / "k8s").glob("*.yaml")}


def test_deployment_flags_ports_probes_and_volumes_agree():
    m = manifests()
    assert {"deployment", "service", "pvc", "secret"} <= set(m)
    spec = m["deployment"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = parse_args(container["args"])
    _, grpc_port = split_host_port(args["--listen"])
    _, metrics_port = split_host_port(args["--metrics-listen"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": grpc_port, "metrics": metrics_port}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == grpc_port
    assert container["readinessProbe"]["grpc"]["service"] == "xlacache.v1.Cache"
    service_ports = {p["name"]: p for p in m["service"]["spec"]["ports"]}
    assert (
        service_ports["grpc"]["port"] == grpc_port and service_ports["grpc"]["targetPort"] == "grpc"
    )
    assert service_ports["metrics"]["port"] == metrics_port
    assert m["service"]["spec"]["selector"] == m["deployment"]["spec"]["selector"]["matchLabels"]
    mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["store"] == args["--store"]
    assert volumes["store"]["persistentVolumeClaim"]["claimName"] == m["pvc"]["metadata"]["name"]
    assert args["--tokens"] == f"{mounts['tokens']}/tokens"
    assert volumes["tokens"]["secret"]["secretName"] == m["secret"]["metadata"]["name"]
    assert "tokens" in m["secret"]["stringData"]
    TokenTable.parse(m["secret"]["stringData"]["tokens"])  # a valid token file
    assert spec["terminationGracePeriodSeconds"] > parse_duration(args["--shutdown-grace"])
    settings = _known("deployment", {k.lstrip("-"): v for k, v in args.items()})
    assert settings["max_size"] > 0


def test_dockerfile_matches_server_settings():
    text = (DEPLOY / "Dockerfile").read_text()
    env = dict(re.findall(r"(XLACACHE_SERVE_\w+)=(\S+)", text))
    settings = _known("Dockerfile", {k.removeprefix(ENV_PREFIX).lower(): v for k, v in env.items()})
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", text, re.M).group(1).split()}
    assert exposed == {split_host_port(settings["listen"])[1],
                       split_host_port(settings["metrics_listen"])[1]}  # fmt: skip
    assert 'ENTRYPOINT ["xlacache", "serve"]' in text
    assert "/healthz" in text and "STOPSIGNAL SIGTERM" in text


def test_systemd_unit_runs_serve_with_known_flags():
    text = (DEPLOY / "systemd" / "xlacache-server.service").read_text()
    exec_start = re.search(r"^ExecStart=(.+)$", text, re.M).group(1)
    argv = shlex.split(exec_start)
    assert argv[1] == "serve"
    pairs = [f"{argv[i]}={argv[i + 1]}" for i in range(2, len(argv), 2)]
    args = parse_args(pairs)
    assert split_host_port(args["--listen"])[1] == 7070
    timeout_stop = int(re.search(r"^TimeoutStopSec=(\d+)", text, re.M).group(1))
    assert timeout_stop > parse_duration(args["--shutdown-grace"])
    assert "KillSignal=SIGTERM" in text


def test_readme_documents_every_file():
    readme = (DEPLOY / "README.md").read_text()
    for path in DEPLOY.rglob("*"):
        if path.is_file() and path.name != "README.md":
            assert str(path.relative_to(DEPLOY)) in readme, path


def test_bucket_deployment_runs_replicas_over_gs_with_workload_identity():
    m = manifests()
    deployment, account = m["deployment-gcs"], m["serviceaccount"]
    assert deployment["spec"]["replicas"] >= 2
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = parse_args(container["args"])
    assert is_bucket_url(args["--store"]) and args["--cache-dir"]
    settings = _known("deployment-gcs", {k.lstrip("-"): v for k, v in args.items()})
    assert settings["max_size"] > 0
    mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["cache"] == args["--cache-dir"] and "emptyDir" in volumes["cache"]
    size_limit = volumes["cache"]["emptyDir"]["sizeLimit"]  # a Kubernetes quantity: 25Gi
    assert parse_size(size_limit + "B") > settings["max_size"]
    assert args["--tokens"] == f"{mounts['tokens']}/tokens"
    _, grpc_port = split_host_port(args["--listen"])
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["grpc"] == grpc_port
    assert container["readinessProbe"]["grpc"]["port"] == grpc_port
    # The Service fronts it as it fronts the one-replica deployment.
    assert m["service"]["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    # Workload Identity: the pods' Kubernetes service account names a Google one.
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    google = account["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
    assert google.endswith(".iam.gserviceaccount.com")
    assert spec["terminationGracePeriodSeconds"] > parse_duration(args["--shutdown-grace"])
