"""Stage 4: streaming under the competition's API rules: the per-student online state, the
emulated API, the loop every stream runs, and the Kaggle export and notebook."""
