"""Stages 1 and 2: the competition's files read and checked, stage 1's arrays, the model's
question sequences and features, the past-event features, and cross-validation folds."""
