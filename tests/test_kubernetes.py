"""Static checks of deploy/kubernetes/ (no cluster here): the kustomization rendered offline, every resource
valid against the Kubernetes schemas (`kubernetes-validate`, strict), and the parts agreeing with each other
and with docker-compose.yml.

`render` applies the kustomization's fields itself (resources, images, generatorOptions,
configMapGenerator, replacements) and refuses any other field, so a new one needs a line here; where
kubectl is installed, its own rendering must be the same.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import typer
import yaml

from llmload.cli import app
from llmload.config import load_config

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy" / "kubernetes"
#: the Kubernetes version the manifests are checked against
K8S_VERSION = "1.30.0"
SUPPORTED = {"apiVersion", "kind", "resources", "images", "generatorOptions", "configMapGenerator",
             "replacements"}
SECRET_WORDS = ("key", "token", "auth", "secret", "password", "cookie")  # llmload.client.auth._secret_name


# ---------------------------------------------------------------------- an offline kustomize


def _image_name(image: str) -> str:
    name = image.split("@", 1)[0]
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def _pod_specs(doc: dict) -> list[dict]:
    spec = doc.get("spec") or {}
    if doc["kind"] == "Pod":
        return [spec]
    template = spec.get("template") or {}
    return [template["spec"]] if "spec" in template else []


def _containers(doc: dict) -> list[dict]:
    return [c for pod in _pod_specs(doc) for key in ("initContainers", "containers") for c in pod.get(key, [])]


def _path_parts(field_path: str) -> list[str]:
    return [p for p in re.split(r"\.(?![^\[]*\])", field_path) if p]


def _walk(node, part: str):
    match = re.fullmatch(r"(\w+)\[(\w+)=([^\]]+)\]", part)
    if match:
        key, field, value = match.groups()
        return next(item for item in node[key] if str(item.get(field)) == value)
    return node[int(part)] if isinstance(node, list) else node[part]


def _get(doc: dict, field_path: str):
    node = doc
    for part in _path_parts(field_path):
        node = _walk(node, part)
    return node


def _set(doc: dict, field_path: str, value: str) -> None:
    *parents, last = _path_parts(field_path)
    node = doc
    for part in parents:
        node = _walk(node, part)
    old = node[last]
    node[last] = int(value) if isinstance(old, int) and not isinstance(old, bool) else value  # kustomize keeps the type


def _select(docs: list[dict], select: dict) -> list[dict]:
    return [d for d in docs if d["kind"] == select.get("kind", d["kind"])
            and d["metadata"]["name"] == select.get("name", d["metadata"]["name"])]


def render(folder: Path = DEPLOY, kustomization: dict | None = None) -> list[dict]:
    """The resources `kubectl kustomize folder` gives (for the fields in SUPPORTED)."""
    kust = kustomization if kustomization is not None else yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(kust) - SUPPORTED
    assert not unknown, f"kustomization fields this renderer does not apply: {unknown}"
    docs = [d for name in kust.get("resources", []) for d in yaml.safe_load_all((folder / name).read_text()) if d]
    assert (kust.get("generatorOptions") or {}).get("disableNameSuffixHash") is True, "hash suffixes not rendered"
    generated = []
    for gen in kust.get("configMapGenerator", []):
        data = {}
        for entry in gen.get("files", []):
            key, _, path = entry.rpartition("=") if "=" in entry else (Path(entry).name, "", entry)
            data[key] = (folder / path).read_text()
        for literal in gen.get("literals", []):
            key, value = literal.split("=", 1)
            data[key] = value
        generated.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    docs = generated + docs
    for image in kust.get("images", []):
        for doc in docs:
            for container in _containers(doc):
                if _image_name(container["image"]) == image["name"]:
                    tag = image.get("newTag", container["image"].rsplit(":", 1)[-1])
                    container["image"] = f"{image.get('newName', image['name'])}:{tag}"
    for rep in kust.get("replacements", []):
        source = _select(docs, rep["source"])
        assert len(source) == 1, rep["source"]
        value = str(_get(source[0], rep["source"]["fieldPath"]))
        for target in rep["targets"]:
            selected = _select(docs, target["select"])
            assert selected, target["select"]
            for doc in selected:
                for field_path in target["fieldPaths"]:
                    _set(doc, field_path, value)
    return docs


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return render()


@pytest.fixture
def kubernetes_validate():
    """The schema checker, imported by the two tests that use it (its import and jsonschema's were 0.07 s of CPU
    in each of the fourteen xdist workers that collected this module; this module's tests run on one)."""
    return pytest.importorskip("kubernetes_validate")


def by_name(docs: list[dict], kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def resolve_args(container: dict, docs: list[dict]) -> list[str]:
    """The container's args with `$(VAR)` expanded from its env (values and ConfigMap references)."""
    values = {}
    for name, entry in env_of(container).items():
        if "value" in entry:
            values[name] = entry["value"]
        elif "configMapKeyRef" in entry.get("valueFrom", {}):
            ref = entry["valueFrom"]["configMapKeyRef"]
            values[name] = by_name(docs, "ConfigMap", ref["name"])["data"][ref["key"]]
    return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], str(a)) for a in container["args"]]


def run_params(args: list[str]) -> dict:
    """`llmload run`'s parameters for `args` (unknown options raise). `--master-bind-host` (issue 29, another
    branch) is dropped where this checkout's command does not have it yet."""
    assert args[0] == "run", args
    command = typer.main.get_command(app)
    run = command.commands["run"]
    if "master_bind_host" not in {p.name for p in run.params} and "--master-bind-host" in args:
        i = args.index("--master-bind-host")
        args = args[:i] + args[i + 2:]
    with typer.Context(command) as parent:
        return run.make_context("run", args[1:], parent=parent).params


# ---------------------------------------------------------------------- the checks


def test_every_rendered_resource_is_valid_against_the_kubernetes_schemas(docs: list[dict], kubernetes_validate):
    extra = [d for name in ("secret.example.yaml", "collect.yaml")
             for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
    kinds = sorted(d["kind"] for d in docs + extra)
    assert kinds == ["ConfigMap", "ConfigMap", "Job", "Job", "PersistentVolumeClaim", "Pod", "Secret", "Service"]
    for doc in docs + extra:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises ValidationError


def test_the_schema_check_catches_a_broken_manifest(docs: list[dict], kubernetes_validate):
    broken = copy.deepcopy(by_name(docs, "Job", "llmload-worker"))
    broken["spec"]["parallelism"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed (the offline rendering is used)")
def test_offline_rendering_equals_kubectl_kustomize(docs: list[dict]):
    out = subprocess.run(["kubectl", "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    theirs = [d for d in yaml.safe_load_all(out.stdout) if d]
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(theirs, key=key) == sorted(docs, key=key)


def test_one_image_for_compose_and_kubernetes(docs: list[dict]):
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    compose_images = {s["image"] for s in compose["services"].values() if "build" in s}
    assert compose_images == {"llmload:local"}
    pods = [d for d in docs if _pod_specs(d)] + [yaml.safe_load((DEPLOY / "collect.yaml").read_text())]
    assert {c["image"] for d in pods for c in _containers(d)} == compose_images


def test_the_worker_count_is_one_parameter(docs: list[dict]):
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    for workers in (2, 7):
        changed = copy.deepcopy(kust)
        params = next(g for g in changed["configMapGenerator"] if g["name"] == "llmload-params")
        params["literals"] = [f"LLMLOAD_WORKERS={workers}"]
        rendered = render(DEPLOY, changed)
        job = by_name(rendered, "Job", "llmload-worker")
        assert job["spec"]["parallelism"] == job["spec"]["completions"] == workers
        master = _containers(by_name(rendered, "Job", "llmload-master"))[0]
        assert run_params(resolve_args(master, rendered))["expect_workers"] == workers


def test_master_and_workers_agree_and_parse_with_llmload_run(docs: list[dict]):
    master = _containers(by_name(docs, "Job", "llmload-master"))[0]
    worker = _containers(by_name(docs, "Job", "llmload-worker"))[0]
    mp, wp = run_params(resolve_args(master, docs)), run_params(resolve_args(worker, docs))
    assert mp["master"] and not mp["worker"] and wp["worker"] and not wp["master"]
    assert mp["config"] == wp["config"] == Path("/config/run.yaml")
    args = [str(a) for a in master["args"]]
    assert args[args.index("--master-bind-host") + 1] == "0.0.0.0"  # the master binds loopback unless told
    service = by_name(docs, "Service", "llmload-master")
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert wp["master_host"] == service["metadata"]["name"]
    assert mp["master_port"] == wp["master_port"] == ports["master"]["port"] == 5557
    assert ports["web-ui"]["port"] == 8089 and ports["metrics"]["port"] == mp["metrics_port"] == 9646
    assert mp["metrics_host"] == "0.0.0.0"
    pod_labels = by_name(docs, "Job", "llmload-master")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    worker_labels = by_name(docs, "Job", "llmload-worker")["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= worker_labels.items()
    named = {p["name"]: p["containerPort"] for p in master["ports"]}
    assert all(named[p["targetPort"]] == p["port"] for p in ports.values())
    annotations = by_name(docs, "Job", "llmload-master")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "9646" and annotations["prometheus.io/path"] == "/metrics"


def test_the_run_config_validates_and_its_secrets_come_from_the_secret(docs: list[dict], tmp_path: Path):
    data = by_name(docs, "ConfigMap", "llmload-config")["data"]
    path = tmp_path / "run.yaml"
    path.write_text(data["run.yaml"])
    config = load_config(path)
    key_env = config.target.api_key_env
    assert key_env, "the example reads its API key from the environment"
    secret = yaml.safe_load((DEPLOY / "secret.example.yaml").read_text())
    keys = set(secret["stringData"])
    assert all(v == "" for v in secret["stringData"].values()), "the example Secret holds no value"
    assert "secret.example.yaml" not in yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    for job in ("llmload-master", "llmload-worker"):
        env = env_of(_containers(by_name(docs, "Job", job))[0])
        for name in (key_env, "LLMLOAD_WORKER_TOKEN"):
            ref = env[name]["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret["metadata"]["name"] and ref["key"] in keys, (job, name)


def test_no_secret_value_in_a_configmap_or_a_plain_env_value(docs: list[dict]):
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        for key, value in cm["data"].items():
            assert not any(w in key.lower() for w in SECRET_WORDS), (cm["metadata"]["name"], key)
            if key.endswith((".yaml", ".yml")):
                target = yaml.safe_load(value).get("target", {})
                assert "api_key" not in target and "api_key_file" not in target
                assert not any(any(w in h.lower() for w in SECRET_WORDS) for h in target.get("headers") or {})
    for doc in docs:
        for container in _containers(doc):
            for name, entry in env_of(container).items():
                if any(w in name.lower() for w in SECRET_WORDS):
                    assert "secretKeyRef" in entry.get("valueFrom", {}), (doc["metadata"]["name"], name)


def test_resources_are_requested_and_the_run_directory_is_on_the_volume(docs: list[dict]):
    for doc in (by_name(docs, "Job", "llmload-master"), by_name(docs, "Job", "llmload-worker")):
        for container in _containers(doc):
            requests = container["resources"]["requests"]
            assert {"cpu", "memory"} <= set(requests), doc["metadata"]["name"]
            assert "cpu" not in container["resources"].get("limits", {}), "a CPU limit throttles: send lag"
    master_job = by_name(docs, "Job", "llmload-master")
    pod = master_job["spec"]["template"]["spec"]
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"]["claimName"] == by_name(docs, "PersistentVolumeClaim", "llmload-runs")[
        "metadata"]["name"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == claim["name"])
    path = DEPLOY / "run.yaml"
    assert str(load_config(path).output).rstrip("/") == mount["mountPath"].rstrip("/")
    collect = yaml.safe_load((DEPLOY / "collect.yaml").read_text())
    assert collect["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "llmload-runs"
