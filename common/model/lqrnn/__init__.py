"""The Last Query Transformer RNN (common.model.lqrnn.model), the Riiid 1st place's
architecture, and its settings: registered as "lqrnn" (common.model.registry)."""
