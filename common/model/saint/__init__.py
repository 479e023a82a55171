"""SAINT and SAINT+ (common.model.saint.model), their settings (config), attention,
caches and the passes that prime them: the architecture registered as "saint"
(common.model.registry)."""

from common.model.saint.config import MODEL_PRESETS, ModelConfig, preset_name
from common.model.saint.model import SAINT

__all__ = ["MODEL_PRESETS", "SAINT", "ModelConfig", "preset_name"]
