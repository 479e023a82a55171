"""The trees and the blend: gradient-boosted trees over past-event features (boosting,
their arrays in forest), the blend of the models with them (blending) and the files
beside a checkpoint that hold them (blend_bundle)."""
