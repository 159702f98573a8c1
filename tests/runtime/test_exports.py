"""The runtime's declared public surface."""

from __future__ import annotations

import importlib

import llmload.runtime

MODULES = {
    "runtime.locustglue.console": ["LineFormatter", "configure_logging", "drop_locust_stats",
                "exit_note", "replace_locust_stats"],
    "runtime.launcher.child_env": ["DEMO_ENV", "TOKEN_ENV", "run_in_demo"],
    "runtime.master.controller": ["StepController", "search_line", "step_lead_s"],
    "runtime.locustglue.seams": ["SESSION_ATTR", "SPAWN_WARNING", "STATS_LOGGER", "WorkerLink", "add_tab", "attach_session", "cheap_stop_caller",
                                 "fill_tab", "finish_then_stop", "is_master", "is_worker", "log_readers", "override_start_form", "quiet_spawn_warning", "run_without_teardown",
                                 "session_of", "splice_into_page", "worker_count"],
    "runtime.launcher.demo": ["DEMO_SCALE", "DEMO_SIM", "demo_configs", "demo_sim", "run_demo", "start_demo_sim"],
    "runtime.launcher.gated_child": ["GATE_ENV", "GatedChild", "gated_boot", "released"],
    "rundir.finalise": ["analyse_run", "finalise_run", "merge_run_records"],
    "runtime.master.judging": ["judge_rows", "live_judge"],
    "runtime.launcher.ports": ["Listener", "check_ports_free", "run_listeners"],
    "runtime.locustglue.master_watch": ["LOST_EXIT", "MasterWatch", "PROBE_TIMEOUT_S", "SILENT_S"],
    "runtime.launcher.run": ["BOOT", "free_loopback_port", "locust_command", "run_config", "say_once",
                             "verdict_exit_code"],
    "rundir.layout": ["LOCK_FILE", "RunDirClaim", "claim_run_dir", "new_run_dir", "prepare_run_dir", "remove_if_unused"],
    "runtime.wire.messages": ["CANCEL", "CLOCK_PING", "CLOCK_PONG", "DRAINED", "RESULTS", "STEP", "CancelMessage", "ClockPing",
                 "ClockPong", "DrainedMessage", "HelloMessage", "Message", "RefusedMessage", "ResultsMessage",
                 "StepMessage", "pack_record", "read_message", "unpack_record"],
    "rundir.plan_file": ["PlanFile", "PlannedStep"],
    "runtime.worker.jobs": ["ClosedLoop", "Job", "plan_jobs"],
    "rundir.recover": ["recover_run", "unfinished"],
    "runtime.launcher.stop_signals": ["LAUNCHED_ENV", "ORPHAN_GRACE_S", "STOP_SIGNALS", "StopSignals", "detach_hung_up_terminal", "end_process_group",
                "follow_parent", "interrupted_exit_code", "say"],
    "runtime.master.preflight": ["ModelNotServed", "PreflightFailed", "check_model_served", "check_reachable", "preflight",
                                 "start_telemetry", "write_run_manifest"],
    "runtime.master.served_model": ["IGNORES_MODEL_OWNERS", "IGNORES_MODEL_SERVERS", "model_listed", "served_model_check"],
    "runtime.locustglue.webdoor": ["HOSTS_ENV", "ORIGINS_ENV", "OwnOriginOnly", "host_allowed"],
    "runtime.locustglue.webui": ["LLM_TABLE", "TOKEN_FIELD", "TOKEN_HEADER", "check_post", "install_web_ui", "live_state", "step_rows"],
    "runtime.locustglue.workerauth": ["HELLO", "REFUSED", "UNPROVEN_FRAME_BYTES", "install", "proof", "worker_token"],
    "runtime.master.start_form": ["RATES", "SLO_OPTION", "add_form_options", "apply_form", "form_help", "form_values",
                "format_seconds", "shape_summary", "target_text"],
    "runtime.master.live_series": ["FREEZE_S", "KEEP_S", "LiveSeries", "meets_slo", "request_values"],
    "runtime.locustglue.prom": ["CONTENT_TYPE", "LATENCY_BUCKETS_S", "TPOT_BUCKETS_S", "LiveMetrics", "add_route", "exposition",
             "install", "serve"],
    "runtime.master.step_run": ["CANCEL_GRACE_S", "PROGRESS_EVERY_S", "Link", "RunControl", "StepContext", "StepRun"],
    "runtime.master.step": ["PLANNED_FIELDS", "STEP_TRANSITIONS", "EventHook", "Step", "StepEvents", "StepStatus", "plan_fields"],
    "runtime.master.shipped": ["CPU_WARN", "StepTally"],
    "runtime.master.lost_workers": ["LostStep", "LostWorkers"],
    "runtime.master.lifecycle": ["RunHost", "RunLifecycle", "RunOptions", "StopReason"],
    "runtime.master.states": ["RUN_TRANSITIONS", "CONTROLLER_TRANSITIONS", "RunState", "ControllerState", "RunMachine",
                               "RunStop", "StopReason"],
    "statemachine": ["StateMachine"],
    "runtime.master.pool": ["UNCAPPED_POOL", "pool_size"],
    "runtime.locustglue.session": ["SESSION_ATTR", "Session", "add_options", "current", "new_shape_run", "on_init",
                "pool_size", "pool_tick", "pool_user_classes", "register_user_classes", "session_of", "user_class",
                "worker_of"],
}


def test_package_exports():
    assert sorted(llmload.runtime.__all__) == ["run_config", "run_demo"]


def test_module_exports_are_pinned():
    for name, expected in MODULES.items():
        module = importlib.import_module(f"llmload.{name}")
        assert sorted(module.__all__) == sorted(expected), name
        for attr in module.__all__:
            assert hasattr(module, attr), (name, attr)
