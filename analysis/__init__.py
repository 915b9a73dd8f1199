"""crossmod analysis: load sweep/bench/Tmax result files, compute failure statistics and
regenerate every plot. Entry point: python3 -m analysis results/<machine> [...].

Modules: loaders (schemas and validation), stats (Clopper-Pearson, Tmax), plots
(matplotlib, Agg), cli (orchestration, summary).
"""
__all__ = ["loaders", "stats", "plots", "cli"]
