"""Stage 5: the evaluation of a run's streamed rows: baselines, the boosted-features
model and the blend, figures, and the report."""
