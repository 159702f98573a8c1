"""The report's answer says what a soak's trend test found, not only the verdict."""

from __future__ import annotations

from llmload.report.answer import soak_sentences


def test_drift_memory_growth_and_error_bursts_are_named():
    soak = {"slices": 6, "slice_s": 600.0, "drifting": ["ttft_p95_s", "kv_usage_peak"], "memory_growth": True,
            "error_bursts": ["soak-004"]}
    (text,) = soak_sentences(soak)
    assert text.startswith("Soak: drifting upward across 6 slices of 600 s: ttft_p95_s, kv_usage_peak")
    assert "(memory growth)" in text and "error bursts in soak-004" in text and "longer runs" in text


def test_a_steady_soak_says_no_drift_and_other_runs_say_nothing():
    (text,) = soak_sentences({"slices": 4, "slice_s": 5.0, "drifting": [], "memory_growth": False,
                              "error_bursts": []})
    assert text.startswith("Soak: no drift across 4 slices of 5 s")
    assert soak_sentences(None) == [] and soak_sentences({}) == []


def test_a_long_soak_says_its_slices_were_merged_and_bounds_the_bursts_it_names():
    soak = {"slices": 48, "slice_s": 600.0, "plan_slices": 480, "plan_slice_s": 60.0, "merged": 10,
            "drifting": ["e2e_p95_s"], "memory_growth": False, "error_bursts": [f"soak-{i:03d}" for i in range(8)]}
    (text,) = soak_sentences(soak)
    assert text.startswith("Soak: drifting upward across 48 slices of 600 s (its 480 slices of 60 s merged, "
                           "up to 10 in one): e2e_p95_s")
    assert "error bursts in soak-000, soak-001, soak-002, soak-003, soak-004 and 3 more" in text
