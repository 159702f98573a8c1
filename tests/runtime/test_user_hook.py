"""The user's request hook (`LLMUser.build_request` / `on_result`): what it builds is what is sent and
recorded, its failures are `client_error` records that never stop the worker, and the multi-turn example
(`examples/locustfiles/multiturn.py`) runs headless against the sim with growing prompts and prefix-cache
hits that a single-turn run does not get."""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from runtime_helpers import base_config, plan, records, run_locust, write_config
from support import REPO, SimServer, start_sim, stop_process

from llmload.arrivals import Arrival
from llmload.cli import main
from llmload.client.bodies import PreparedRequest
from llmload.client.spec import RequestSpec
from llmload.clock import now
from llmload.config import parse_config
from llmload.errors import LLMLoadError
from llmload.records import RecordWriter
from llmload.runtime.launcher.run import locust_command
from llmload.runtime.locustglue import session as session_mod
from llmload.runtime.worker.jobs import Job
from llmload.runtime.worker.scheduler import WorkerRuntime
from llmload.runtime.worker.sending import PlannedArrival, Sender

MULTITURN = REPO / "examples" / "locustfiles" / "multiturn.py"
FAST = {"step_base_s": 0.005, "decode_cost_s": 0.0001, "prefill_cost_s": 0.00001, "load_time_s": 0}


@pytest.fixture(scope="module")
def fast_sim(tmp_path_factory) -> Iterator[SimServer]:
    """One fast vLLM sim (prefix caching on) for this module's tests: each sends under request ids of its own
    (`_job`'s label, a run's step labels) and reads only its own ground-truth rows."""
    sim = start_sim(tmp_path_factory.mktemp("sim"), flavor="vllm", config={**FAST, "enable_prefix_caching": True})
    yield sim
    stop_process(sim.proc)


def _runtime(url: str, tmp_path: Path, **requests) -> WorkerRuntime:
    config = base_config(url, {"ladder": {"steps": [{"rate": 1, "duration": "1s"}]}})
    config["requests"].update(requests)
    runtime = WorkerRuntime(lambda *a: None, build_sender=None)
    runtime.sender = Sender(parse_config(config), concurrency=4, seed=0)
    runtime.writer = RecordWriter(tmp_path / "records" / "worker-0.jsonl")
    return runtime


def _job(index: int, label: str = "s") -> Job:
    return Job(label=label, arrival=Arrival(request_id=f"{label}-{index:06d}", step=label, index=index,
                                            scheduled_at=now()), seed=1)


class Hooks:
    """A user's hooks without Locust: build with `build`, keep every result."""

    def __init__(self, build) -> None:
        self.build, self.results = build, []

    def build_request(self, arrival):
        return self.build(arrival)

    def on_result(self, arrival, request, result):
        self.results.append((arrival, request, result))


def _written(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "records" / "worker-0.jsonl").read_text().splitlines()]


def test_the_default_hook_builds_the_mix_request(tmp_path):
    runtime = _runtime("http://127.0.0.1:9", tmp_path, input_tokens={"dist": "uniform", "min": 5, "max": 500})
    sender = runtime.sender
    for i in range(5):
        job = _job(i)
        planned = PlannedArrival(sender, job, job.arrival.request_id, "0")
        assert planned.default_request().body == sender.mix.build(job.arrival.request_id, i, 1).body
        again = PlannedArrival(sender, job, job.arrival.request_id, "0")
        # the arrival's own draws are seeded: the same in every process
        assert (planned.input_tokens, planned.text(7)) == (again.input_tokens, again.text(7))
        assert 5 <= planned.input_tokens <= 500 and planned.output_tokens == 4


def test_what_the_hook_builds_is_sent_and_recorded(fast_sim, tmp_path):
    sim = fast_sim
    runtime = _runtime(sim.url, tmp_path)
    history = [{"role": "user", "content": "alpha beta gamma"}, {"role": "assistant", "content": "delta"}]
    hooks = Hooks(lambda a: RequestSpec(messages=[*history, {"role": "user", "content": a.text(10)}],
                                        max_tokens=6, extra_body={"top_p": 0.5}))
    record = runtime.run(_job(3, "built"), user=hooks)
    truth = {r["request_id"]: r for r in sim.ground_truth_rows()}[record.request_id]
    assert record.outcome == "ok" and record.sent_at is not None
    # planned = what was sent (3+1+10 content tokens, 4 per message); served = the server's usage
    assert record.planned_input_tokens == truth["input_tokens"] == record.input_tokens == 14 + 3 * 4
    assert record.planned_output_tokens == 6 == truth["output_tokens"] == record.output_tokens
    (arrival, request, result), = hooks.results
    assert arrival.request_id == record.request_id and request.max_tokens == 6
    assert result.record is record and len(result.text.split()) >= 4 and "text" not in _written(tmp_path)[0]


@pytest.mark.parametrize(("build", "error"), [
    (lambda a: 1 / 0, "Hooks.build_request raised ZeroDivisionError: division by zero"),
    (lambda a: {"messages": []}, "Hooks.build_request raised TypeError: build_request must return a RequestSpec"),
    (lambda a: RequestSpec(max_tokens=3), "Hooks.build_request raised ValueError: a RequestSpec needs exactly"),
    (lambda a: PreparedRequest("other-id", "openai-chat", b"{}"),
     "Hooks.build_request raised ValueError: a PreparedRequest from build_request must carry the arrival's"),
], ids=["raises", "wrong-type", "bad-spec", "foreign-id"])
def test_a_failing_build_request_is_a_client_error_and_the_worker_goes_on(fast_sim, tmp_path, request, build,
                                                                          error):
    sim, label = fast_sim, f"bad-{request.node.callspec.id}"
    runtime = _runtime(sim.url, tmp_path)
    fired = []
    bad = runtime.run(_job(1, label), user=Hooks(build), on_record=fired.append)
    assert bad.outcome == "client_error" and bad.error.startswith(error)
    assert bad.sent_at is None and bad.http_status is None  # nothing was sent
    good = runtime.run(_job(2, label), user=Hooks(lambda a: a.default_request()))
    assert good.outcome == "ok"
    assert [r["outcome"] for r in _written(tmp_path)] == ["client_error", "ok"] and fired == [bad]
    assert [r["request_id"] for r in sim.ground_truth_rows() if r["request_id"].startswith(f"{label}-")] == [
        f"{label}-000002"]


def test_a_failing_on_result_makes_the_sent_request_a_client_error(fast_sim, tmp_path):
    sim = fast_sim
    runtime = _runtime(sim.url, tmp_path)

    class Forgetful(Hooks):
        def on_result(self, arrival, request, result):
            raise KeyError("conversation")

    record = runtime.run(_job(1, "forgetful"), user=Forgetful(lambda a: a.default_request()))
    assert record.outcome == "client_error" and record.error == "Forgetful.on_result raised KeyError: 'conversation'"
    assert record.sent_at is not None and record.output_tokens == 4  # it was sent and answered
    assert "forgetful-000001" in {r["request_id"] for r in sim.ground_truth_rows()}


def test_the_pool_runs_the_users_own_classes():
    class Builtin:
        api = ""

        def build_request(self, arrival): ...

    class Mine(Builtin):
        pass

    class Other:  # not an LLM user
        pass

    def env(*classes):
        e = SimpleNamespace(user_classes=list(classes), runner=None, parsed_options=None)
        setattr(e, session_mod.SESSION_ATTR, session_mod.Session(e))
        return e

    assert session_mod.pool_user_classes(env(Builtin), "openai-chat") == [Builtin]
    assert session_mod.pool_user_classes(env(Builtin, Mine, Other), "openai-chat") == [Mine]
    with pytest.raises(LLMLoadError, match="no user class"):
        session_mod.pool_user_classes(env(Other), "openai-chat")


def test_locustfile_option(tmp_path, capsys):
    cmd = locust_command(tmp_path / "run.yaml", tmp_path / "run", locustfile=MULTITURN)
    assert cmd[cmd.index("-f") + 1] == f"{MULTITURN},{REPO / 'shapes' / 'llm.py'}"
    shape = REPO / "examples" / "locustfiles" / "custom_shape.py"  # no users of its own: ours, then its shape
    cmd = locust_command(tmp_path / "run.yaml", tmp_path / "run", locustfile=shape)
    assert cmd[cmd.index("-f") + 1] == f"{REPO / 'locustfiles' / 'llm.py'},{shape},{REPO / 'shapes' / 'llm.py'}"
    config = write_config(tmp_path, base_config("http://127.0.0.1:9", {"ladder": {"steps": [{"rate": 1,
                                                                                            "duration": "1s"}]}}))
    assert main(["run", str(config), "--locustfile", str(tmp_path / "missing.py")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"llmload: error: --locustfile {tmp_path / 'missing.py'}: no such file"]
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ headless runs against the sim

def _metrics(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("{")[0].split(" ")[0], float(line.rsplit(" ", 1)[1])
            out[name] = out.get(name, 0.0) + value
    return out


#: the runs' requests; the single-turn control sends the same mix in-process
REQUESTS = {"input_tokens": {"dist": "fixed", "value": 60}, "output_tokens": {"dist": "fixed", "value": 8}, "seed": 5}


def _run(tmp_path: Path, url: str, name: str, locustfile: Path, *, rate: float, duration_s: int) -> Path:
    """A headless run of `locustfile`'s users (as `llmload run --locustfile`, whose command line
    test_locustfile_option checks), without a report: the records and the summary are the point."""
    config = base_config(url, {"ladder": {"arrival": "poisson", "warmup": "0s", "drain_timeout": "20s",
                                          "steps": [{"rate": rate, "duration": f"{duration_s}s"}]}},
                         client={"max_concurrency": 2, "max_send_lag_p99": "1s"})
    config["requests"] = dict(REQUESTS)
    run_dir = tmp_path / name
    done = run_locust(write_config(tmp_path, config, f"{name}.yaml"), run_dir, locustfile=locustfile, report=False)
    assert done.returncode in (0, 1, 3) and (run_dir / "summary.json").exists(), done.stderr[-2000:]
    return run_dir


@pytest.mark.slow
def test_the_multiturn_example_grows_its_prompts_and_hits_the_prefix_cache(sim_factory, tmp_path):
    multi = sim_factory(flavor="vllm", config={**FAST, "enable_prefix_caching": True})
    # 24 arrivals (the plan's Poisson draw for 4 s at 8/s, seed 5) over 2 users x 4 conversations: at most 8
    # first turns, so >= 16 later turns (> 24 / 3) and >= 16 - 8 consecutive pairs (>= 5 asserted)
    run_dir = _run(tmp_path, multi.url, "multi", MULTITURN, rate=8, duration_s=4)
    df = records(run_dir)
    assert set(df["outcome"]) == {"ok"} and len(df) == sum(s["planned_arrivals"] for s in plan(run_dir)["steps"])
    truth = {r["request_id"]: r for r in multi.ground_truth_rows()}
    sent = [truth[rid] for rid in df["request_id"]]
    # the record holds what was sent: the whole history's size, the server's count
    assert list(df["planned_input_tokens"]) == [t["input_tokens"] for t in sent] == list(df["input_tokens"])
    # each later turn of a conversation (prefix_id) is the previous prompt + its answer + a new turn
    turns = df[df["prefix_id"].notna()].sort_values("sent_at")
    grown = 0
    for _, conversation in turns.groupby("prefix_id"):
        rows = [truth[rid] for rid in conversation["request_id"]]
        for before, after in itertools.pairwise(rows):
            assert after["input_tokens"] == before["input_tokens"] + before["output_tokens"] + 4 + 24 + 4
            grown += 1
    assert grown >= 5, f"{len(turns)} later turns, {grown} consecutive pairs"
    first = df[df["prefix_id"].isna()]
    assert set(first["planned_input_tokens"]) == {60} and len(turns) > len(df) / 3
    m = _metrics(multi.url)
    hits, queries = m["vllm:prefix_cache_hits_total"], m["vllm:prefix_cache_queries_total"]
    assert hits == sum(r["cached_tokens"] for r in truth.values()) and hits > 0.3 * queries


def test_single_turn_default_prompts_get_no_prefix_cache_hits(fast_sim, tmp_path):
    """The multi-turn example's control: the default hook's prompts (the same mix as its run) share no
    block, so what the example's run hits is its conversations' doing. In-process, in the way a user
    sends them (the default `build_request`): a whole Locust run cost 3 s of CPU for this."""
    runtime = _runtime(fast_sim.url, tmp_path, **REQUESTS)
    sent = [runtime.run(_job(i, "single"), user=Hooks(lambda a: a.default_request())) for i in range(36)]
    assert {r.outcome for r in sent} == {"ok"} and {r.input_tokens for r in sent} == {60}
    rows = [r for r in fast_sim.ground_truth_rows() if r["request_id"].startswith("single-")]
    assert len(rows) == 36 and [r["cached_tokens"] for r in rows] == [0] * 36  # no two share a block


FLAKY = '''
import locust  # noqa: F401

from locustfiles.llm import LLMUser


class FlakyUser(LLMUser):
    def build_request(self, arrival):
        if arrival.index % 3 == 0:
            raise ValueError("no prompt for this one")
        return super().build_request(arrival)

    def on_result(self, arrival, request, result):
        if arrival.index % 3 == 1:
            raise KeyError("lost")
'''


@pytest.mark.slow
def test_a_hook_that_raises_gives_client_errors_and_the_run_ends_cleanly(fast_sim, tmp_path):
    sim = fast_sim
    locustfile = tmp_path / "flaky.py"
    locustfile.write_text(FLAKY)
    run_dir = _run(tmp_path, sim.url, "flaky", locustfile, rate=6, duration_s=3)
    df = records(run_dir)
    assert len(df) == sum(s["planned_arrivals"] for s in plan(run_dir)["steps"])  # no arrival lost
    seen = {r["request_id"] for r in sim.ground_truth_rows()}
    for _, row in df.iterrows():
        index = int(row["request_id"].rsplit("-", 1)[1])  # the arrival's index in its step (one shard)
        if index % 3 == 0:
            assert row["outcome"] == "client_error" and row["request_id"] not in seen
            assert row["error"] == "FlakyUser.build_request raised ValueError: no prompt for this one"
        elif index % 3 == 1:
            assert row["outcome"] == "client_error" and row["request_id"] in seen
            assert row["error"] == "FlakyUser.on_result raised KeyError: 'lost'"
        else:
            assert row["outcome"] == "ok"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"][0]["outcomes"]["client_error"] == int((df["outcome"] == "client_error").sum()) > 0
