"""The benchmarks: scripts that time and size the pipeline's stages and write what they
measured to bench/results/<name>.txt (BENCHMARKS.md sums them up).

A package so that its scripts share benchlib.py and fold_run.py without touching
sys.path: run each from the repository root as a module, e.g.
`python -m bench.bench_stream --threads 2`, `python -m bench.kt.run` or
`python -m bench.rehearsal.full_scale`. Two families have folders of their own: kt/ (the
public knowledge-tracing data sets) and rehearsal/ (every stage at Riiid's size).
"""
