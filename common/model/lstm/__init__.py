"""The LSTM over concatenated embeddings (common.model.lstm.model) and its settings:
the architecture registered as "lstm" (common.model.registry)."""
