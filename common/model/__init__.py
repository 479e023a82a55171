"""The model: SAINT / SAINT+, its attention and per-student caches, the optional tag,
difficulty and distillation inputs, checkpoints, and teacher-forced prediction."""
