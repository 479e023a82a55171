"""The package every numbered script calls. One sub-package per stage, imports running
only down (tests/test_imports.py):

    report/   stage 5: evaluation, baselines, the trees and the blend, report
    stream/   stage 4: online state, emulated API, the API loop, Kaggle export and notebook
    train/    stage 3: config, plan, trainer, what a training run writes
    runs/     run folders, the runs table, out-of-fold predictions, provenance
    model/    SAINT / SAINT+, attention, caches, checkpoints, prediction
    inputs/   stage 0: the demo generator and the public-data-set converters
    data/     stages 1 and 2: schema, preprocessing, arrays, features, folds

and a ground floor here that every stage may use: errors, options, cli, files, layout,
metrics, device, tables.
"""
