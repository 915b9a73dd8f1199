"""latency_lab's truth against a profile, for the A/B scripts here (accuracy_ab.py,
stall_phase_ab.py): per timed function with an on-CPU estimate and interval, the whole
call's true length (the on-CPU spin mean plus (1 + nested_calls) x `overhead`, the fixed
cost of a call measured by a run without the profiler)."""
import json


def call_estimates(truth_path, profile_path, overhead):
    """Yields (truth function dict, profile function dict, true call ticks, lo, hi)."""
    truth = json.load(open(truth_path))
    est = {f["name"]: f for f in json.load(open(profile_path))["functions"]}
    for f in truth["functions"]:
        e = est.get(f["name"])
        if f.get("mean_oncpu_ticks") is None or not e or e.get("oncpu_mean_ci_ticks") is None:
            continue
        call = f["mean_oncpu_ticks"] + (1 + f.get("nested_calls", 0)) * overhead
        lo, hi = e["oncpu_mean_ci_ticks"]
        yield f, e, call, lo, hi
