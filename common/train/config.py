"""03_train.py's settings: TrainConfig holds the optimisation, selection and run settings,
the architectures it trains (common.model.registry) and each one's config, in its
section (SAINT's ModelConfig in `model`, each other's in the section its registry entry
names: the LSTM's in `lstm`, ...; the Trainer fills in
their data-sized fields). Each field's metadata is its command-line flag and help
(common/cli.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from common import cli
from common.device import check_device, device_option, threads_option
from common.model.checkpoint import dict_differences
from common.model.registry import ARCH_NAMES, ARCHITECTURES
from common.model.saint import MODEL_PRESETS, ModelConfig, preset_name
from common.options import above, at_least, between, option, progress_option


@dataclass
class TrainConfig:
    fold: int = option(
        0, "the fold to train (validation rows: folds/fold{k}.npz)", range=at_least(0)
    )
    # the submission's model: README, "Training the submission"
    full_data: bool = option(
        False,
        "train on every question of every student into the run's full/ (no validation, no "
        "selection: best.pt is the last epoch); --epochs 0 takes the CV folds' median best "
        "epoch",
    )
    epochs: int = option(20, "most epochs (early stopping may end sooner)", range=at_least(0))
    batch_size: int = option(
        0,
        "windows' worth of trained questions per optimizer step (0: SAINT's 512, fewer "
        "when an epoch would take under 64 steps)",
        range=at_least(0),
    )
    micro_batch: int = option(
        0,
        "sequences per forward pass (0: parts of similar length, sized for the device)",
        range=at_least(0),
    )
    span: int = option(
        0,
        "questions trained on per training sequence, each after the model's receptive "
        "field of context (0: 4 receptive fields)",
        range=at_least(0),
    )
    lr: float = option(1e-3, "peak learning rate", range=above(0))
    # 0: a tenth of the run's steps, at most SAINT's 4,000 (which assumes Riiid's ~3,000
    # steps per epoch: on a small data set it would never end)
    warmup: int = option(
        0, "warm-up steps (0: a tenth of the run's steps, at most 4000)", range=at_least(0)
    )
    schedule: str = option(
        "noam", "noam (warm-up, then 1/sqrt(step)) or cosine", choices=("noam", "cosine")
    )
    weight_decay: float = option(0.01, "AdamW weight decay", range=at_least(0))
    grad_clip: float = option(1.0, "gradient norm clip", range=above(0))
    arch: tuple[str, ...] = option(
        ("saint",),
        "the architectures trained, each in turn (comma list): the first in the fold's "
        "folder, each other in its own folder inside it (fold{k}/<arch>/); from "
        + ", ".join(ARCH_NAMES),
    )
    # SAINT's (--d-model, ...)
    model: ModelConfig = field(
        default_factory=ModelConfig,
        metadata={
            "help": "a preset's name goes to 03's --model (saint, saint+), or to the model's "
            'decoder_features (saint: [], saint+: ["elapsed", "lag"])'
        },
    )
    # every other architecture's config, in the section its registry entry names (flags
    # behind its prefix: --lstm-d-model): a new architecture adds its entry only
    for _arch in ARCHITECTURES.values():
        if _arch.section != "model":
            __annotations__[_arch.section] = _arch.config
            vars()[_arch.section] = field(
                default_factory=_arch.config, metadata={"prefix": f"{_arch.section}-"}
            )
    del _arch
    tags: bool = option(
        False, "add the mean embedding of each question's tags (skills) to the encoder input"
    )
    seed: int = option(0, "seed of initialization, spans and dropout", range=at_least(0))
    device: str = device_option()
    threads: int = threads_option()
    amp: str = option(
        "auto",
        "autocast: auto is bf16 (or fp16) on CUDA, off on CPU",
        choices=("auto", "bf16", "fp16", "off"),
    )
    compile: bool = option(
        False, "torch.compile the training model (dynamic shapes; pays off on CUDA)"
    )
    resume: bool = option(
        False,
        "continue from the fold's newest epoch checkpoint (same config; a finished fold "
        "ends at once)",
    )
    patience: int = option(
        3, "epochs without a better selection AUC before stopping", range=at_least(0)
    )
    select_on: str = option(
        "inner",
        "early stopping and best.pt on an inner split of the training students (inner) "
        "or on the fold's validation rows, which 04 and 05 then score (fold: optimistic)",
        choices=("inner", "fold"),
    )
    inner_share: float = option(
        0.1,
        "share of the fold's training students in the inner validation split",
        range=between(0, 1, high_open=True),
    )
    valid_batch_size: int = option(256, "students per validation forward pass", range=at_least(1))
    progress: bool = progress_option()
    teacher: str | None = option(None, "checkpoint of a frozen teacher to distill from")
    distill_alpha: float = option(0.5, "weight of the teacher's soft targets", range=between(0, 1))
    distill_temperature: float = option(2.0, "distillation temperature", range=above(0))

    def __post_init__(self) -> None:
        self.arch = tuple(self.arch)
        unknown = [a for a in self.arch if a not in ARCHITECTURES]
        if unknown or not self.arch or len(set(self.arch)) < len(self.arch):
            raise ValueError(
                f"--arch: expected distinct names from {', '.join(ARCH_NAMES)}, got "
                f"{','.join(self.arch) or 'none'}"
            )
        if self.epochs < 0 or (self.epochs == 0 and not self.full_data):
            raise ValueError("--epochs must be >= 1 (0, from the CV folds, needs --full-data)")
        for arch in self.arch:
            if self.arch_section(arch).question_embedding == "rasch" and not self.tags:
                raise ValueError(
                    f"{arch}: question_embedding 'rasch' needs the questions' tags (--tags)"
                )
        if self.select_on == "inner" and self.inner_share == 0 and not self.full_data:
            raise ValueError(
                "--inner-share 0 leaves no inner split to select on: give a share in (0, 1), "
                "or --select-on fold"
            )
        check_device(self.device)

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        """From a dict as `to_dict` writes it (config.json, checkpoints); unknown keys are
        refused, in the nested model config too."""
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown TrainConfig keys {sorted(unknown)}")
        for arch in ARCHITECTURES.values():
            section = values.get(arch.section, {})
            if isinstance(section, dict):
                values = values | {arch.section: arch.config.from_dict(section)}
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def primary(self) -> str:
        """The architecture trained in the fold's own folder (the first of --arch)."""
        return self.arch[0]

    def arch_section(self, arch: str):
        """The config of architecture `arch` as set (its data-sized fields at 0)."""
        return getattr(self, ARCHITECTURES[arch].section)

    def model_config(
        self, n_questions: int, tag_shape: tuple[int, int] = (0, 1), arch: str | None = None
    ):
        """The config of `arch` (default: the primary) with what the data decides filled
        in: the question count, and tag_shape (n_tags, max_tags; common.model.tags.
        tag_shape) when `tags` is on."""
        n_tags, max_tags = tag_shape if self.tags else (0, 1)
        return replace(
            self.arch_section(arch or self.primary),
            n_questions=n_questions, n_tags=n_tags, max_tags=max_tags,
        )  # fmt: skip


# the settings that shape a run's trajectory (a resumed run with others differs from an
# uninterrupted one): a resume notes which differ from the checkpoint's
SHAPING = (
    "batch_size", "micro_batch", "span", "lr", "warmup", "schedule", "weight_decay",
    "grad_clip", "seed", "amp", "teacher", "distill_alpha", "distill_temperature",
    "select_on", "inner_share",
)  # fmt: skip


def shaping_changes(recorded: dict, config: TrainConfig) -> str:
    """'key: <checkpoint> vs <now>' for each shaping setting that differs; '' if none."""
    current = asdict(config)
    return dict_differences({k: recorded.get(k) for k in SHAPING}, {k: current[k] for k in SHAPING})


def add_train_flags(parser, shorthands=("--model", "--layers"), **options) -> None:
    """TrainConfig's flags (options: as cli.add_config_flags) and the shorthands named:
    --model (a preset of decoder features) and --layers (both sides)."""
    cli.add_config_flags(parser, TrainConfig, **options)
    if "--model" in shorthands:
        cli.add_shorthand(
            parser,
            "--model",
            lambda name: {"model.decoder_features": MODEL_PRESETS[name]},
            choices=sorted(MODEL_PRESETS),
            help="a preset of decoder features: saint (responses only) or saint+ (elapsed, "
            f"lag) (default: {preset_name(ModelConfig().decoder_features)})",
        )
    if "--layers" in shorthands:
        cli.add_shorthand(
            parser,
            "--layers",
            lambda n: {"model.encoder_layers": n, "model.decoder_layers": n},
            type=int,
            metavar="N",
            help="layers per side (sets --encoder-layers and --decoder-layers) (default: "
            f"{ModelConfig().encoder_layers})",
        )
