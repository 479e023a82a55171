"""The pyKT peers' hyperparameters (bench/kt/peers.py), each with where it comes from in
pyKT's repository (github.com/pykt-team/pykt-toolkit): its tuned runs where pyKT
published one for the data set (configs/best_model.json, or the run named in the
comments of examples/wandb_<model>_train.py), else configs/kt_config.json's defaults, or
for the models kt_config.json lacks (simpleKT, sparseKT, stableKT) the argparse defaults
of examples/wandb_<model>_train.py. Batch sizes are pyKT's: 256 (kt_config.json), 64 for
the attention and memory models (examples/wandb_train.py lowers it for them).

Two sizes of each peer (SIZES):
- "pykt": the configuration above, pyKT's tuned or default size;
- "ours": our model's size (d_model 64, 2 blocks, 4 heads, feed-forward 256: our recipe's
  SAINT, configs/assist2015.toml), every other argument, the learning rate and the batch
  kept from "pykt". DKT keeps its tuned size in both (an LSTM of 200: cheap).
A peer's run (its folder under the fold, its row in the tables) is `run_key(model, size)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class PeerConfig:
    params: dict = field(default_factory=dict)  # the pyKT model's constructor arguments
    lr: float = 1e-3
    batch_size: int = 64
    source: str = ""  # where `params`, `lr` and `batch_size` come from
    size: str = ""  # the size in words, for the tables


KT_CONFIG = "pyKT configs/kt_config.json defaults"
DKT_DEFAULT = PeerConfig({"emb_size": 200, "dropout": 0.1}, 1e-3, 256, KT_CONFIG)
AKT_2009 = PeerConfig(
    {"d_model": 256, "d_ff": 512, "num_attn_heads": 8, "n_blocks": 4, "dropout": 0.2},
    1e-4,
    64,
    "pyKT's tuned assist2009 run (examples/wandb_akt_train.py: "
    "tiaocan_akt_assist2009_3407_0_0.2_256_512_8_4_0.0001)",
)
SAINT_DEFAULT = PeerConfig(
    {"emb_size": 256, "num_attn_heads": 8, "n_blocks": 4, "dropout": 0.2},
    1e-3,
    64,
    "pyKT examples/wandb_saint_train.py defaults",
)
# examples/wandb_simplekt_train.py and wandb_sparsekt_train.py's defaults (the same but
# sparseKT's three); stableKT's in wandb_stablekt_train.py. loss1-3, start, num_layers and
# nheads are passed as pyKT's wandb_train.py passes them (the models ignore them)
SIMPLE_DEFAULTS = {
    "d_model": 256, "d_ff": 256, "num_attn_heads": 4, "n_blocks": 2, "dropout": 0.1,
    "final_fc_dim": 256, "final_fc_dim2": 256, "num_layers": 2, "nheads": 4,
    "loss1": 0.5, "loss2": 0.5, "loss3": 0.5, "start": 50,
}  # fmt: skip
SPARSE_DEFAULTS = {**SIMPLE_DEFAULTS, "sparse_ratio": 0.8, "k_index": 5, "stride": 1}
STABLE_DEFAULTS = {
    "d_model": 256, "d_ff": 256, "num_attn_heads": 8, "n_blocks": 4, "dropout": 0.05,
    "final_fc_dim": 256, "final_fc_dim2": 256, "num_layers": 2, "nheads": 4,
    "r": 0.5, "gamma": 0.7,
}  # fmt: skip


def _examples(model: str) -> str:
    return f"pyKT examples/wandb_{model}_train.py defaults (source f766468)"


# model -> data set preset -> config at pyKT's size; "*" for every data set without its own
PEERS: dict[str, dict[str, PeerConfig]] = {
    "dkt": {
        "*": DKT_DEFAULT,
        "assist2015": PeerConfig(
            {"emb_size": 200, "dropout": 0.5},
            1e-3,
            256,
            "pyKT's tuned assist2015 run (examples/wandb_dkt_train.py: "
            "assist2015_dkt_qid_dkt_tiaocan_assist2015_rerun_3407_0_0.5_200_0.001)",
        ),
    },
    "saint": {
        "*": SAINT_DEFAULT,
        "assist2015": PeerConfig(
            {"emb_size": 64, "num_attn_heads": 4, "n_blocks": 4, "dropout": 0.5},
            1e-3,
            64,
            "pyKT configs/best_model.json (assist2015, fold 0: "
            "saint_tiaocan_assist2015_42_0_0.5_64_0.001_4_4)",
        ),
    },
    "akt": {
        "*": AKT_2009,
        # pyKT's tuned assist2015 AKT (n_blocks 3, dropout 0.05) trains at lr 5e-6 over up to
        # 200 epochs; under this bench's epoch cap that rate cannot converge, so it keeps
        # the tuned architecture with the lr of pyKT's tuned assist2009 run
        "assist2015": PeerConfig(
            {"d_model": 256, "d_ff": 512, "num_attn_heads": 8, "n_blocks": 3, "dropout": 0.05},
            1e-4,
            64,
            "pyKT's tuned assist2015 architecture (examples/wandb_akt_train.py: "
            "tiaocan_assist2015_3407_0_0.05_256_512_8_3_5e-06) at lr 1e-4, not its 5e-6",
        ),
    },
    "simplekt": {"*": PeerConfig(SIMPLE_DEFAULTS, 1e-4, 64, _examples("simplekt"))},
    "sparsekt_topk": {"*": PeerConfig(SPARSE_DEFAULTS, 1e-4, 64, _examples("sparsekt"))},
    "sparsekt_soft": {"*": PeerConfig(SPARSE_DEFAULTS, 1e-4, 64, _examples("sparsekt"))},
    "stablekt": {"*": PeerConfig(STABLE_DEFAULTS, 1e-4, 64, _examples("stablekt"))},
    "dkvmn": {
        "*": PeerConfig({"dim_s": 200, "size_m": 50, "dropout": 0.2}, 1e-3, 64, KT_CONFIG),
    },
    "sakt": {
        "*": PeerConfig(
            {"emb_size": 256, "num_attn_heads": 8, "dropout": 0.2, "num_en": 1}, 1e-3, 64, KT_CONFIG
        ),
    },
}
# the peers of the grid (pyKT's SAINT, the weakest before, and DKVMN and SAKT on request)
DEFAULT_PEERS = ("dkt", "akt", "simplekt", "sparsekt_topk", "sparsekt_soft", "stablekt")
NAMES = {
    "dkt": "DKT", "saint": "SAINT", "akt": "AKT", "dkvmn": "DKVMN", "sakt": "SAKT",
    "simplekt": "simpleKT", "sparsekt_topk": "sparseKT-topK", "sparsekt_soft": "sparseKT-soft",
    "stablekt": "stableKT",
}  # fmt: skip

# our model's size in each peer's constructor arguments (None: the peer keeps its own)
OUR_SIZE = {"d_model": 64, "n_blocks": 2, "num_attn_heads": 4, "d_ff": 256}
OUR_SIZE_ARGS: dict[str, dict | None] = {
    "dkt": None,
    "dkvmn": None,
    "sakt": {"emb_size": 64, "num_attn_heads": 4, "num_en": 2},
    "saint": {"emb_size": 64, "num_attn_heads": 4, "n_blocks": 2},
    **{m: OUR_SIZE for m in ("akt", "simplekt", "sparsekt_topk", "sparsekt_soft", "stablekt")},
}
SIZES = ("ours", "pykt")


def size_words(params: dict) -> str:
    """The size of a constructor's arguments in words: width, depth, heads."""
    width = params.get("d_model", params.get("emb_size", params.get("dim_s")))
    parts = [f"d {width}"]
    for key, word in (("n_blocks", "blocks"), ("num_en", "blocks"), ("num_attn_heads", "heads")):
        if key in params:
            parts.append(f"{params[key]} {word}")
    if "d_ff" in params:
        parts.append(f"ff {params['d_ff']}")
    return ", ".join(parts)


def peer_config(model: str, preset: str, size: str = "pykt") -> PeerConfig:
    """The model's config on the data set at `size` (preset names: assist2015_pykt reads
    assist2015's)."""
    if size not in SIZES:
        raise ValueError(f"size: expected one of {SIZES}, got {size!r}")
    configs = PEERS[model]
    base = "assist2015" if preset.startswith("assist2015") else preset
    config = configs.get(base, configs["*"])
    ours = OUR_SIZE_ARGS[model] if size == "ours" else None
    if ours is None:
        kept = " (its own size at ours)" if size == "ours" else ""
        return replace(config, size=size_words(config.params) + kept)
    params = {**config.params, **ours}
    source = f"{config.source}, at our model's size ({size_words(ours)})"
    return replace(config, params=params, source=source, size=size_words(params))


def run_key(model: str, size: str) -> str:
    """The peer's run at `size`: its folder under a fold and its key in the tables (a
    peer that keeps its size at ours has one run)."""
    if size == "ours" and OUR_SIZE_ARGS[model] is None:
        size = "pykt"
    return f"{model}-{size}"


def run_name(key: str) -> str:
    """The table's name of a run key: 'AKT (our size)', 'AKT (pyKT's size)'."""
    model, size = key.rsplit("-", 1)
    words = "our size" if size == "ours" else "pyKT's size"
    return f"{NAMES[model]} ({words})"


RUN_KEYS = tuple(run_key(m, s) for m in PEERS for s in SIZES if run_key(m, s) == f"{m}-{s}")
