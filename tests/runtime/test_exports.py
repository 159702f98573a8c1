"""The runtime's declared public surface."""

from __future__ import annotations

import importlib

import llmload.runtime

MODULES = {
    "console": ["DEMO_ENV", "LOCUST_STATS_LOGGER", "LineFormatter", "configure_logging", "drop_locust_stats",
                "exit_note", "replace_locust_stats", "run_in_demo"],
    "controller": ["StepController", "WorkerLink", "search_line", "step_lead_s"],
    "demo": ["DEMO_SIM", "demo_configs", "run_demo", "start_demo_sim"],
    "gate": ["GATE_ENV", "GatedChild", "gated_boot", "released"],
    "finish": ["analyse_run", "finalize_run", "merge_run_records"],
    "judging": ["judge_rows", "live_judge"],
    "launcher": ["BOOT", "LOCK_FILE", "claim_run_dir", "free_loopback_port", "locust_command", "new_run_dir",
                 "prepare_run_dir", "run_config", "say_once", "verdict_exit_code"],
    "messages": ["CANCEL", "CLOCK_PING", "CLOCK_PONG", "DRAINED", "RESULTS", "STEP", "CancelMessage", "ClockPing",
                 "ClockPong", "DrainedMessage", "HelloMessage", "Message", "RefusedMessage", "ResultsMessage",
                 "StepMessage", "pack_record", "read_message", "unpack_record"],
    "plan_json": ["PlanFile", "STEP_FIELDS"],
    "jobs": ["ClosedLoop", "Job", "plan_jobs"],
    "recover": ["recover_run", "unfinished"],
    "signals": ["LAUNCHED_ENV", "STOP_SIGNALS", "StopSignals", "detach_hung_up_terminal", "end_process_group",
                "follow_parent", "interrupted_exit_code", "say"],
    "preflight": ["PreflightFailed", "check_reachable", "preflight", "start_telemetry", "write_run_manifest"],
    "webui": ["LLM_TABLE", "TOKEN_FIELD", "TOKEN_HEADER", "check_post", "install_web_ui", "live_state", "step_rows"],
    "workerauth": ["HELLO", "REFUSED", "TOKEN_ENV", "install", "proof", "worker_token"],
    "webform": ["RATES", "SLO_OPTION", "add_form_options", "apply_form", "form_help", "form_values",
                "format_seconds", "shape_summary", "target_text"],
    "live": ["KEEP_S", "LiveSeries", "meets_slo", "request_values"],
    "prom": ["CONTENT_TYPE", "LATENCY_BUCKETS_S", "TPOT_BUCKETS_S", "LiveMetrics", "add_route", "exposition",
             "install", "serve"],
    "steps_run": ["CANCEL_GRACE_S", "PROGRESS_EVERY_S", "RunControl", "StepContext", "StepRun"],
    "step": ["PLANNED_FIELDS", "STEP_TRANSITIONS", "EventHook", "Step", "StepEvents", "StepStatus", "plan_fields"],
    "tally": ["CPU_WARN", "StepTally"],
    "lost": ["LostStep", "LostWorkers"],
    "lifecycle": ["RunHost", "RunLifecycle", "RunOptions", "StopReason"],
    "states": ["RUN_TRANSITIONS", "STEPS_TRANSITIONS", "RunState", "StateMachine", "StepsState"],
    "pool": ["UNCAPPED_POOL", "pool_size"],
    "session": ["SESSION_ATTR", "Session", "add_options", "current", "new_run_dir", "new_shape_run", "on_init",
                "pool_size", "pool_tick", "pool_user_classes", "register_user_classes", "session_of", "user_class",
                "worker_of"],
}


def test_package_exports():
    assert sorted(llmload.runtime.__all__) == ["run_config", "run_demo"]


def test_module_exports_are_pinned():
    for name, expected in MODULES.items():
        module = importlib.import_module(f"llmload.runtime.{name}")
        assert sorted(module.__all__) == sorted(expected), name
        for attr in module.__all__:
            assert hasattr(module, attr), (name, attr)
