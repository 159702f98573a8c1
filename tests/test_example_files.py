"""Every YAML file under examples/ and deploy/ is one we know and that loads (issue 43 item 2): a run config
validates with no legacy-key note, plans, and says how long it takes; its ladder draws exactly rate x window
arrivals unless its point is burstiness; a sim config loads; the rest are compose, Kubernetes or Prometheus
files. A new YAML file of another kind fails here until it gets a line."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

from llmload.config import config_notes, load_config, parse_config
from llmload.sim.settings import load_sim_settings
from shapes.duration import format_span, plan_duration
from shapes.plan import build_plan

REPO = Path(__file__).resolve().parents[1]
FILES = sorted(p for folder in ("examples", "deploy") for p in (REPO / folder).rglob("*.y*ml"))
#: ladder arrival processes an example may use besides `poisson_exact`, and the example whose point it is
BURSTY = {"openai-completions.yaml": "gamma"}


class _TaggedLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Reads compose's own tags (`!reset []`) as plain values (libyaml's parser where PyYAML has it: these
    files are read at collection, in every xdist worker)."""


_TaggedLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


@functools.cache
def _kind(path: Path) -> str:
    documents = [d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_TaggedLoader) if d is not None]
    first = documents[0] if documents else {}
    if isinstance(first, dict) and {"target", "shape"} <= set(first):
        return "run"
    if path.parent.name == "sim" and path.parent.parent.name == "examples":
        return "sim"
    if isinstance(first, dict) and "services" in first:
        return "compose"
    if all(isinstance(d, dict) and ("kind" in d or "resources" in d) for d in documents):
        return "kubernetes"
    if isinstance(first, dict) and "scrape_configs" in first:
        return "prometheus"
    return "unknown"


def _name(path: Path) -> str:
    return str(path.relative_to(REPO))


RUNS = [p for p in FILES if _kind(p) == "run"]


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_every_yaml_file_is_of_a_known_kind(path):
    assert _kind(path) != "unknown", f"{_name(path)}: not a run, sim, compose, Kubernetes or Prometheus file"


def test_the_run_configs_are_found():
    names = {_name(p) for p in RUNS}
    assert {"examples/vllm-openai-chat.yaml", "deploy/kubernetes/run.yaml", "examples/compose/ollama.yaml"} <= names


@pytest.mark.parametrize("path", RUNS, ids=_name)
def test_a_run_config_validates_with_no_note_plans_and_says_how_long(path):
    notes: list[str] = []
    config = load_config(path, notes=notes)
    assert notes == []
    steps = build_plan(config, base_dir=path.parent)
    line = plan_duration(config, steps).line()
    assert line.startswith(f"{len(steps)} step") and (" min" in line or " s" in line), line
    ladder = config.shape.ladder
    if ladder is not None:
        assert ladder.arrival == BURSTY.get(path.name, "poisson_exact"), f"{_name(path)}: arrival {ladder.arrival}"


@pytest.mark.parametrize("path", [p for p in FILES if _kind(p) == "sim"], ids=_name)
def test_a_sim_config_loads(path):
    assert load_sim_settings(path) is not None


def test_a_legacy_key_gets_one_note_naming_its_line_and_what_to_set():
    text = ("target: {url: 'http://127.0.0.1:9', model: m}\nshape:\n  ladder:\n    steps: [{rate: 1, duration: 10s}]\n"
            "    refine: {resolution: 0.5}\n")
    config = parse_config(yaml.safe_load(text), file="old.yaml", text=text)
    notes = config_notes(config, file="old.yaml", text=text)
    assert len(notes) == 1 and notes[0].startswith("llmload: note: old.yaml:5 shape.ladder.refine.resolution")
    assert "refine.precision" in notes[0] and "refine.budget" in notes[0]
    current = text.replace("resolution: 0.5", "precision: 0.05, budget: 2m")
    assert config_notes(parse_config(yaml.safe_load(current), text=current), text=current) == []


def test_the_vllm_example_takes_about_eight_minutes():
    config = load_config(REPO / "examples" / "vllm-openai-chat.yaml")
    duration = plan_duration(config, build_plan(config))
    # 4 steps of 10 s warm-up + 60 s, then as many 70 s refine steps as fit 3 minutes (2), and one 60 s drain
    assert (duration.scheduled_s, duration.search_steps, duration.search_s, duration.drain_s) == (280, 2, 140, 60)
    assert format_span(duration.expected_s) == "8 min"
