"""Checks of the shapes as LoadTestShape classes, run by test_loadshapes.py in a process that imported
Locust first (Locust patches the standard library with gevent on import: never inside pytest's process).

The config's kind picks a class, a user's own shape plans instead, and Locust loads exactly the shapes
we mean it to (its own loader and picking rule)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import locust  # noqa: F401  (the process imported it first: it patches the standard library with gevent)
from locust import LoadTestShape
from locust.main import merge_locustfiles_content

from llmload.config import SHAPE_KINDS, parse_config
from llmload.errors import ConfigError
from llmload.runtime.locustglue.session import pool_size
from shapes.loadshapes import (
    SHAPES,
    BoundarySearchShape,
    ConcurrencyLoadShape,
    LadderLoadShape,
    LLMLoadShape,
    SoakLoadShape,
    TraceLoadShape,
    planning_shape,
    shape_for_config,
)
from shapes.plan import STEP_BUILDERS, build_plan
from shapes.steps import StepSpec, derive_seed

REPO = Path(__file__).resolve().parents[2]
USERS, LLM_SHAPE, EXAMPLE = (str(REPO / "locustfiles" / "llm.py"), str(REPO / "shapes" / "llm.py"),
                             str(REPO / "examples" / "locustfiles" / "custom_shape.py"))
TRACE = REPO / "examples" / "traces" / "azure_code_5min_llmload.csv"
TARGET = {"url": "http://127.0.0.1:9"}
SHAPES_BY_KIND = {
    "ladder": ({"ladder": {"steps": [{"rate": 1, "duration": "10s"}, {"rate": 2, "duration": "10s"}]}},
               LadderLoadShape),
    "refine": ({"ladder": {"steps": [{"rate": 1, "duration": "10s"}], "refine": {"max_steps": 2}}},
               BoundarySearchShape),
    "concurrency": ({"concurrency": {"levels": [2, 40], "requests_per_level": 5}}, ConcurrencyLoadShape),
    "trace": ({"trace": {"file": str(TRACE), "window": ["0s", "20s"], "uniform_twin": True}}, TraceLoadShape),
    "soak": ({"soak": {"rate": 2, "duration": "25s", "slice": "10s"}}, SoakLoadShape),
}


def config(shape: dict, **rest):
    return parse_config({"target": TARGET, "shape": shape, **rest})


def test_the_configs_kind_picks_a_class_that_plans_as_before():
    for name in SHAPES_BY_KIND:
        _kind_plans_as_before(name)


def _kind_plans_as_before(name):
    shape, cls = SHAPES_BY_KIND[name]
    cfg = config(shape, client={"max_concurrency": 8})
    planner = shape_for_config(cfg)
    assert type(planner) is cls and isinstance(planner, LoadTestShape)
    assert [s.to_dict() for s in planner.plan(cfg)] == [s.to_dict() for s in build_plan(cfg)]
    # the pool: the client cap, but every user of the largest closed-loop level
    assert pool_size(cfg) == planner.users(cfg) == (40 if name == "concurrency" else 8)


def test_every_kind_has_a_class_and_only_the_knee_search_adds_steps():
    assert set(SHAPES) == set(STEP_BUILDERS) == set(SHAPE_KINDS)
    ladder = config(SHAPES_BY_KIND["ladder"][0])
    rows = [{"label": "r1.00", "target_rate": 1.0, "offered_rate": 1.0, "verdict": "pass"}]
    assert shape_for_config(ladder).search(ladder, rows) is None
    refine = config(SHAPES_BY_KIND["refine"][0])
    search = shape_for_config(refine).search(refine, rows)
    search.estimate = lambda rows: SimpleNamespace(rate=2.5, low=2.0, high=3.0, half_width_rel=0.2, binding="ttft_p95")
    rate = search.next_step().rate
    step = shape_for_config(refine).search_step(refine, rate, index=1, seed=0, taken=["r1.00"])
    assert (step.phase, step.index, step.target_rate) == ("refine", 1, rate)


def test_locust_loads_only_the_shapes_meant_to_run():
    """Locust instantiates every non-abstract LoadTestShape it finds in a locustfile (imports too) and
    runs the first: the base classes are abstract, so each file offers exactly its own shape."""
    _, loaded, _, picked = merge_locustfiles_content([USERS, LLM_SHAPE])
    assert list(loaded) == ["LLMShape"] and type(picked).__name__ == "LLMShape"
    _, loaded, _, picked = merge_locustfiles_content([USERS, EXAMPLE])
    assert list(loaded) == ["SawtoothShape"] and type(picked).__name__ == "SawtoothShape"
    for cls in (LLMLoadShape, LadderLoadShape, BoundarySearchShape, ConcurrencyLoadShape, TraceLoadShape,
                SoakLoadShape):
        assert cls.abstract, cls.__name__


def test_a_users_own_shape_plans_the_run_even_when_locust_picked_the_configs():
    cfg = config(SHAPES_BY_KIND["soak"][0])
    _, loaded, _, picked = merge_locustfiles_content([USERS, LLM_SHAPE, EXAMPLE])
    assert type(picked).__name__ == "LLMShape"  # Locust's rule: the first shape loaded
    env = SimpleNamespace(shape_class=picked, available_shape_classes=loaded)
    own = planning_shape(env, cfg)
    assert type(own).__name__ == "SawtoothShape"
    steps = own.plan(cfg)
    assert [s.target_rate for s in steps] == [2.0, 4.0, 6.0, 2.0, 4.0, 6.0]
    assert [s.label for s in steps] == ["r2.00", "r4.00", "r6.00", "r2.00-2", "r4.00-2", "r6.00-2"]
    # the rest of each step as tests/runtime/test_custom_shape.py writes the example's plan out (that live run
    # checks its plan against it, without importing the class: Locust)
    assert [(s.phase, s.arrival, s.warmup_s, s.duration_s, s.drain_timeout_s, s.seed) for s in steps] == [
        ("ladder", "constant", 1.0, 3.0, 20.0, derive_seed(cfg.requests.seed, i)) for i in range(6)]
    # without a shape of one's own, the config's kind plans (through LLMShape)
    _, loaded, _, picked = merge_locustfiles_content([USERS, LLM_SHAPE])
    env = SimpleNamespace(shape_class=picked, available_shape_classes=loaded)
    assert type(planning_shape(env, cfg)) is SoakLoadShape
    assert [s.to_dict() for s in picked.plan(cfg)] == [s.to_dict() for s in build_plan(cfg)]


def test_a_shape_that_is_not_an_llmload_shape_is_a_one_line_config_error():
    class Plain(LoadTestShape):
        def tick(self):
            return None

    env = SimpleNamespace(shape_class=Plain(), available_shape_classes={"Plain": Plain()})
    try:
        planning_shape(env, config(SHAPES_BY_KIND["ladder"][0]))
    except ConfigError as exc:
        assert str(exc).startswith("shape: shape class Plain is not an llmload shape"), str(exc)
    else:
        raise AssertionError("no ConfigError")


def _step(label: str, index: int) -> StepSpec:
    return StepSpec(label=label, index=index, phase="ladder", arrival="constant", target_rate=1.0,
                    duration_s=5.0)


def test_a_wrong_plan_from_a_users_shape_is_a_config_error_naming_the_class():
    for wrong, said in [
        ([], "planned no steps"),
        ([_step("a", 0), _step("a", 1)], "label a is used twice"),
        ([_step("a", 1)], "step a has index 1, expected 0"),
        (["r1"], "step 0 is a str, not a StepSpec"),
    ]:
        class Mine(LLMLoadShape):
            def steps(self, config, base_dir=None, planned=wrong):
                return planned

        try:
            Mine().plan(config(SHAPES_BY_KIND["ladder"][0]))
        except ConfigError as exc:
            assert str(exc) == f"shape: shape Mine{'' if said.startswith('planned') else ':'} {said}", str(exc)
        else:
            raise AssertionError(f"no ConfigError for {said}")


def test_a_registered_shape_of_a_users_own_plans_its_kind():
    """`register_shape` takes any LLMLoadShape of a config kind: `shape_for_config` asks it `serves`
    (the base class's own: its kind is the config's), and it plans the configs of that kind."""
    from shapes.loadshapes import register_shape

    @register_shape
    class Doubled(LLMLoadShape):
        abstract = True
        kind = "soak"

        def steps(self, config, base_dir=None):
            return [_step("a", 0), _step("b", 1)]

    try:
        soak, ladder = config(SHAPES_BY_KIND["soak"][0]), config(SHAPES_BY_KIND["ladder"][0])
        planner = shape_for_config(soak)
        assert type(planner) is Doubled and [s.label for s in planner.plan(soak)] == ["a", "b"]
        assert type(shape_for_config(ladder)) is LadderLoadShape
    finally:
        SHAPES["soak"].remove(Doubled)


def test_the_config_following_shape_keeps_the_search_it_started():
    """`LLMShape` asks the class of the config's kind, one instance per config: `auto`'s next probe level
    comes from the search `search()` started (a fresh instance per call lost it: a ladder's refine step
    was asked of a config with no ladder)."""
    from shapes.llm import LLMShape

    cfg = config({"auto": {"budget": "8m"}}, slo={"ttft_p95": "1s"})
    shape = LLMShape()
    plan = shape.plan(cfg)
    probe = {"phase": "probe", "concurrency": 1, "completion_throughput": 1.2, "e2e_p50_s": 0.8,
             "ttft_p50_s": 0.03, "window_start": 0.0, "window_end": 5.0}
    ask = shape.search(cfg, [probe]).next_step()
    step = shape.search_step(cfg, ask.rate, index=len(plan), seed=0, taken=[s.label for s in plan])
    assert (step.phase, step.concurrency) == ("probe", int(ask.rate)) and step.index == 1
