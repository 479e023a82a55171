"""The Riiid-size rehearsal: every stage on a demo of the real train.csv's shape, each
timed and its peak memory measured in a fresh process, against the targets.

full_scale.py is the script (`python -m bench.rehearsal.full_scale`); stages.py runs
each stage (and is the child process that trains and builds batches); measure.py times
a stage's process tree and counts FLOPs; stream.py prepares 04's stream and the stand-in
competition API; projection.py projects the figures to one GPU; report.py prints the
tables.
"""
