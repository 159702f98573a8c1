"""Pure parts of the runtime: message packing, per-shard jobs, plan.json, the live table."""

from __future__ import annotations

import json

from llmload.records import Record
from llmload.rundir.plan_file import PlanFile
from llmload.runtime.master.live_table import format_header, format_row, quick_stats, step_row
from llmload.runtime.master.step import Step, StepStatus
from llmload.runtime.wire.messages import StepMessage, pack_record, unpack_record
from llmload.runtime.worker.jobs import plan_jobs
from shapes.steps import StepSpec, TraceArrivals


def _rate_step(**kw) -> StepSpec:
    return StepSpec(**{"label": "r5.00", "index": 0, "phase": "ladder", "arrival": "poisson", "target_rate": 5.0,
                       "warmup_s": 1.0, "duration_s": 10.0, "seed": 7, **kw})


def test_pack_unpack_keeps_every_field_and_times_exactly():
    record = Record(request_id="r1-000001", step="r1", worker="0", scheduled_at=1.5, outcome="ok", sent_at=1.6,
                    token_times=[1.7, 1.8123456789], token_counts=[1, 2], output_tokens=3)
    packed = pack_record(record)
    assert isinstance(packed["token_times"], bytes)
    row = unpack_record(packed)
    assert row["token_times"] == [1.7, 1.8123456789] and row["token_counts"] == [1, 2]
    assert Record(**row) == record
    json.dumps(row)  # the master writes it as a JSON line


def test_step_message_is_self_contained_plain_data():
    msg = StepMessage(step=_rate_step(), start_at=10.0, seed=3, shard=1, shards=2, run_dir="/r",
                      config={"target": {}}, worker="1").to_dict()
    assert {"step", "start_at", "seed", "shard", "shards", "run_dir", "config", "worker"} <= set(msg)
    json.dumps(msg)


def test_open_loop_shards_split_the_plan_with_none_lost_or_doubled():
    step = _rate_step()
    whole, _ = plan_jobs(step, start_at=100.0, shard=0, shards=1)
    parts = [plan_jobs(step, start_at=100.0, shard=i, shards=3)[0] for i in range(3)]
    ids = [j.arrival.request_id for part in parts for j in part]
    assert len(ids) == len(set(ids)) == len(whole)
    assert sorted(j.scheduled_at for part in parts for j in part) == sorted(j.scheduled_at for j in whole)
    assert all(j.seed == step.seed for j in whole)


def test_trace_jobs_carry_their_sizes_and_offsets():
    trace = TraceArrivals(offsets_s=[0.0, 0.5, 0.75], input_tokens=[10, 20, 30], output_tokens=[1, 2, 3],
                          prefix_id=[None, 1, None], prefix_tokens=[None, 8, None])
    step = StepSpec(label="burst", index=0, phase="burst", arrival="trace", target_rate=4.0, duration_s=1.0,
                    trace=trace)
    jobs = plan_jobs(step, start_at=50.0, shard=1, shards=2)[0]
    assert [(j.scheduled_at, j.arrival.input_tokens, j.arrival.output_tokens) for j in jobs] == [(50.5, 20, 2)]
    record = jobs[0].record("1")
    assert record.planned_input_tokens == 20 and record.prefix_id == 1 and record.outcome == "not_sent"


def test_closed_loop_starts_its_share_of_users_and_hands_out_the_rest():
    step = StepSpec(label="c3", index=0, phase="concurrency", arrival="closed", concurrency=3, requests=7)
    first0, loop0 = plan_jobs(step, start_at=5.0, shard=0, shards=2)
    first1, loop1 = plan_jobs(step, start_at=5.0, shard=1, shards=2)
    assert (len(first0), len(first1)) == (2, 1)
    ids = [j.arrival.request_id for j in first0 + first1]
    for loop in (loop0, loop1):
        while (job := loop.next(9.0)) is not None:
            assert job.scheduled_at == 9.0
            ids.append(job.arrival.request_id)
    assert len(ids) == len(set(ids)) == 7


def test_plan_file_lists_unrun_steps_and_updates_atomically(tmp_path):
    plan = PlanFile(tmp_path, kind="ladder", workers=2, seed=1, started_at=1.0)
    specs = [StepSpec(label=f"r{r}.00", index=7, phase="ladder", arrival="constant", target_rate=r, duration_s=1.0)
             for r in (1.0, 2.0)]
    a = plan.add(Step(specs[0]))
    plan.add(Step(specs[1]))
    plan.update(a, status=StepStatus.RUN, start_at=2.0)
    data = json.loads((tmp_path / "plan.json").read_text())
    assert [s["status"] for s in data["steps"]] == ["run", "not_run"]
    assert [s["index"] for s in data["steps"]] == [0, 1]
    assert data["steps"][1]["window_start"] is None
    assert not (tmp_path / "plan.json.tmp").exists()


def test_live_table_row_and_quick_stats():
    rows = [{"scheduled_at": 1.0, "sent_at": 1.01, "first_token_at": 1.11, "last_token_at": 1.41,
             "output_tokens": 4, "outcome": "ok"},
            {"scheduled_at": 2.0, "sent_at": 2.0, "outcome": "rejected"}]
    stats = quick_stats(rows)
    assert stats["done"] == 2 and stats["ok"] == 1 and abs(stats["ttft_p95_s"] - 0.1) < 1e-9
    assert abs(stats["tpot_p95_s"] - 0.1) < 1e-9
    line = format_row(step_row("r1.00", {"offered_rate": 1.0, **stats}, "fail", ["ttft_p95"], 3.0))
    assert line.startswith("r1.00") and "100ms" in line and "fail (ttft_p95)" in line
    assert len(format_header().split()) >= 10


def test_local_processes_talk_over_a_free_loopback_port_unless_one_is_asked_for(tmp_path):
    from llmload.runtime.launcher.run import locust_command

    def port_of(cmd: list[str]) -> tuple[str, str]:
        return cmd[cmd.index("--master-bind-port") + 1], cmd[cmd.index("--master-port") + 1]

    first, second = (locust_command(tmp_path / "run.yaml", tmp_path / f"run{i}", processes=2) for i in range(2))
    bind, port = port_of(first)
    assert bind == port != "5557" and first[first.index("--master-bind-host") + 1] == "127.0.0.1"
    assert port_of(second)[0] != "5557"
    assert port_of(locust_command(tmp_path / "run.yaml", None, processes=2, master_port=6001)) == ("6001", "6001")
    master = locust_command(tmp_path / "run.yaml", None, master=True)
    assert master[master.index("--master-bind-port") + 1] == "5557"  # a remote master keeps Locust's port
