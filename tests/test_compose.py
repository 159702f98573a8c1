"""Static checks of docker-compose.yml and the Dockerfile (no Docker engine runs here).

Every llmload command in the compose file must parse with the real `llmload run` options, name config
files that exist on the host side of its volume and validate; masters and workers must agree on host,
port and config; the GPU services must sit in their profiles.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
import yaml

from llmload.cli import app
from llmload.config import load_config

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: str) -> str:
    """Compose's `${VAR:-default}` with nothing set in the environment; `$$` is a literal `$`."""
    return _VAR.sub(lambda m: m.group(2) or "", value).replace("$$", "$")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


def llmload_services(services: dict) -> dict[str, dict]:
    return {name: s for name, s in services.items() if s.get("image") == "llmload:local"}


def run_params(service: dict) -> dict:
    """The service's command parsed by the real `llmload run` (unknown options raise)."""
    args = [interpolate(str(a)) for a in service["command"]]
    assert args[0] == "run", args
    command = typer.main.get_command(app)
    run = command.commands["run"]
    with typer.Context(command) as parent:
        return run.make_context("run", args[1:], parent=parent).params


def host_path(service: dict, container_path: str) -> Path:
    """Map a path inside the container to the host through the service's bind mounts."""
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if container_path.startswith(target.rstrip("/") + "/"):
            return (REPO / source / container_path[len(target.rstrip("/")) + 1:]).resolve()
    raise AssertionError(f"{container_path} is not under a bind mount of the service")


def test_compose_parses_with_the_expected_services(compose: dict, services: dict) -> None:
    assert {"ollama", "model-pull", "master", "worker", "vllm", "master-vllm", "worker-vllm",
            "dcgm-exporter"} <= set(services)
    assert set(compose["volumes"]) >= {"ollama-models", "hf-cache"}


def test_every_llmload_command_parses_and_its_config_validates(services: dict) -> None:
    llmload = llmload_services(services)
    assert set(llmload) == {"master", "worker", "master-vllm", "worker-vllm"}
    for name, service in llmload.items():
        params = run_params(service)
        config_file = host_path(service, str(params["config"]))
        assert config_file.is_file(), f"{name}: {config_file} missing"
        config = load_config(config_file)
        assert config.output.startswith("/runs"), f"{name}: runs must land in the ./runs volume"
        assert params["master"] != params["worker"], f"{name} must be either master or worker"


def test_unknown_run_option_is_rejected_by_the_check() -> None:
    with pytest.raises(Exception, match="No such option: --no-such-option"):
        run_params({"command": ["run", "/config/ollama.yaml", "--no-such-option"]})


@pytest.mark.parametrize(("master", "worker", "server"), [("master", "worker", "ollama"),
                                                         ("master-vllm", "worker-vllm", "vllm")])
def test_master_and_workers_agree(services: dict, master: str, worker: str, server: str) -> None:
    m, w = run_params(services[master]), run_params(services[worker])
    assert m["master"] and w["worker"]
    assert w["master_host"] == master, "workers must reach the master by its service name"
    assert w["master_port"] == m["master_port"]
    assert w["config"] == m["config"]
    assert m["expect_workers"] >= 1
    assert master in services[worker]["depends_on"]
    assert "build" in services[master] and services[master]["build"] == services[worker]["build"]
    # the config targets the server service on the port it listens on inside the network
    target = load_config(host_path(services[master], str(m["config"]))).target.url or ""
    host, port = re.match(r"^https?://([^:/]+):(\d+)", target).groups()
    assert host == server
    inside_ports = {interpolate(p).rsplit(":", 1)[-1] for p in services[server]["ports"]}
    assert port in inside_ports


def test_web_ui_published_on_localhost_by_default(services: dict) -> None:
    for name in ("master", "master-vllm"):
        (published,) = [interpolate(p) for p in services[name]["ports"]]
        assert published == "127.0.0.1:8089:8089", name
    for name in ("worker", "worker-vllm"):
        assert "ports" not in services[name], f"{name} must not publish ports (it is scaled)"
        assert "container_name" not in services[name], f"{name} must be scalable"


def test_ollama_settings_come_from_the_environment(services: dict) -> None:
    ollama = services["ollama"]
    assert ollama["image"].startswith("ollama/ollama:")
    env = ollama["environment"]
    for key in ("OLLAMA_NUM_PARALLEL", "OLLAMA_MAX_QUEUE", "OLLAMA_CONTEXT_LENGTH"):
        assert re.fullmatch(r"\$\{" + key + r":-\w+\}", str(env[key])), key
    assert any(v.endswith(":/root/.ollama") for v in ollama["volumes"]), "models need a volume"
    assert "healthcheck" in ollama


def test_model_pull_is_one_shot_and_gates_the_master(services: dict) -> None:
    pull = services["model-pull"]
    assert pull["restart"] == "no"
    assert pull["depends_on"]["ollama"]["condition"] == "service_healthy"
    script = " ".join(pull["command"])
    assert "ollama pull" in script and "until ollama run" in script
    assert services["master"]["depends_on"]["model-pull"]["condition"] == "service_completed_successfully"
    # the model pulled is the model the config asks for
    model = interpolate(pull["environment"]["LLMLOAD_MODEL"])
    config = load_config(host_path(services["master"], str(run_params(services["master"])["config"])))
    assert config.target.model == model


def test_profiles(services: dict) -> None:
    for name in ("ollama", "model-pull", "master", "worker"):
        assert "profiles" not in services[name], f"{name} is part of the default bring-up"
    for name in ("vllm", "master-vllm", "worker-vllm"):
        assert services[name]["profiles"] == ["vllm"], name
    assert services["dcgm-exporter"]["profiles"] == ["dcgm"]
    assert services["vllm"]["image"].startswith("vllm/vllm-openai:")
    assert "dcgm-exporter" in services["dcgm-exporter"]["image"]
    for name in ("vllm", "dcgm-exporter"):
        (device,) = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], name
    vllm_config = load_config(host_path(services["master-vllm"],
                                        str(run_params(services["master-vllm"])["config"])))
    assert vllm_config.telemetry.gpu == "dcgm:http://dcgm-exporter:9400/metrics"
    served = services["vllm"]["command"]
    assert served[served.index("--served-model-name") + 1] == vllm_config.target.model


def test_dockerfile_copies_what_the_package_needs() -> None:
    text = (REPO / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (\S+)", text, flags=re.M)
    for source in copied:
        assert (REPO / source).exists(), source
    packages = yaml.safe_load(re.search(r'include = (\[.*?\])', (REPO / "pyproject.toml").read_text())
                              .group(1).replace("*", ""))
    for package in packages:
        assert package in copied, f"Dockerfile does not copy {package}/"
    assert re.search(r'^ENTRYPOINT \["llmload"\]', text, flags=re.M)
    ignored = (REPO / ".dockerignore").read_text().split()
    assert not set(copied) & set(ignored), "the Dockerfile copies something .dockerignore drops"


@pytest.mark.parametrize("name", ["master", "master-vllm"])
def test_master_web_ui_listens_beyond_its_container(services: dict, name: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The published port 8089 reaches the UI only if Locust binds the container's interfaces: the
    Locust command `llmload run` builds must leave `LOCUST_WEB_HOST=0.0.0.0` (Locust's own variable,
    set by the compose file) in force rather than pin `--web-host 127.0.0.1`."""
    from llmload.runtime.launcher.run import locust_command

    service = services[name]
    for key, value in service["environment"].items():
        monkeypatch.setenv(key, interpolate(str(value)))
    params = run_params(service)
    cmd = locust_command(Path(params["config"]), None, web=params["web"], master=params["master"],
                         expect_workers=params["expect_workers"], master_port=params["master_port"])
    host = cmd[cmd.index("--web-host") + 1] if "--web-host" in cmd else service["environment"]["LOCUST_WEB_HOST"]
    assert host in ("0.0.0.0", "*", ""), f"the web UI binds {host} inside the container"


def test_gpu_override_only_adds_gpus_to_ollama(services: dict) -> None:
    override = yaml.safe_load((REPO / "examples" / "compose" / "ollama-gpu.yml").read_text())
    assert set(override) == {"services"} and set(override["services"]) == {"ollama"}
    assert set(override["services"]["ollama"]) == {"deploy"}
    assert override["services"]["ollama"]["deploy"] == services["vllm"]["deploy"]


def test_ci_override_runs_the_same_services_on_the_host_network() -> None:
    """examples/compose/ci.yml (scripts/compose_check.sh): every default service stays, on the host's
    network with nothing published, and the master's and workers' commands parse and agree."""
    class ComposeLoader(yaml.SafeLoader):
        """Compose's `!reset` tag (drop the value being overridden) read as the value it holds."""

    ComposeLoader.add_constructor("!reset", lambda loader, node: loader.construct_sequence(node))
    text = (REPO / "examples" / "compose" / "ci.yml").read_text()
    override = yaml.load(text, Loader=ComposeLoader)["services"]  # noqa: S506 (a SafeLoader subclass)
    assert override["master"]["ports"] == [] and override["ollama"]["ports"] == []
    assert set(override) == {"ollama", "model-pull", "master", "worker"}
    for name, service in override.items():
        assert service["network_mode"] == "host", name
    ci = {name: {**service, "volumes": ["./examples/compose:/config:ro"]} for name, service in override.items()}
    m, w = run_params(ci["master"]), run_params(ci["worker"])
    assert m["master"] and w["worker"] and w["master_host"] == "127.0.0.1"
    assert m["config"] == w["config"] and m["master_port"] == w["master_port"]
    config = load_config(host_path(ci["master"], str(m["config"])))
    assert config.target.url == "http://127.0.0.1:11434" and config.target.api.startswith("ollama")
    assert "--port" in override["ollama"]["command"] and "11434" in override["ollama"]["command"]
    web = yaml.safe_load((REPO / "examples" / "compose" / "ci-web.yml").read_text())["services"]
    assert run_params({"command": web["master"]["command"]})["web"]
