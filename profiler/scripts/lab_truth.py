"""latency_lab's truth against a profile, for the A/B scripts here (accuracy_ab.py,
stall_phase_ab.py): per timed function with an on-CPU estimate and interval, the whole
call's true length, from a run of the same program without the profiler (`base`): the
on-CPU spin mean, plus the fixed cost of a call (the function's own `oncpu_call_cost_ticks`,
timed from its caller in the base run; `call_overhead_ticks` in truth files without it), plus for a
function whose truth leaves its nested calls out (lab_outer) what those calls cost beyond
their spins in the base run (`oncpu_nested_cost_ticks`; nested_calls x the fixed cost in
truth files without it)."""
import json


def call_truth(f, base):
    """A truth function dict's whole call in ticks, given the base run's truth dict."""
    hot = base["call_overhead_ticks"]
    b = next((g for g in base["functions"] if g["name"] == f["name"]), {})
    # The function's own fixed cost as the workload runs it (timed from its caller), where
    # the base run has it; else the hot one of the start-up loop.
    own = b.get("oncpu_call_cost_ticks")
    overhead = own if own is not None else hot
    nested = f.get("nested_calls", 0)
    if nested == 0:
        return f["mean_oncpu_ticks"] + overhead
    cost = b.get("oncpu_nested_cost_ticks")
    return f["mean_oncpu_ticks"] + overhead + (cost if cost is not None else nested * hot)


def call_estimates(truth_path, profile_path, base_path):
    """Yields (truth function dict, profile function dict, true call ticks, lo, hi)."""
    truth = json.load(open(truth_path))
    base = json.load(open(base_path))
    est = {f["name"]: f for f in json.load(open(profile_path))["functions"]}
    for f in truth["functions"]:
        e = est.get(f["name"])
        if f.get("mean_oncpu_ticks") is None or not e or e.get("oncpu_mean_ci_ticks") is None:
            continue
        lo, hi = e["oncpu_mean_ci_ticks"]
        yield f, e, call_truth(f, base), lo, hi
