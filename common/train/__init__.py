"""Stage 3: training's config, its plan (spans, batches, schedule), the trainer's parts
and what a training run writes."""
