"""The public knowledge-tracing benchmark: SAINT and its extensions on ASSISTments 2009 and
2015 through the numbered scripts, beside the published AUCs.

run.py is the script (`python -m bench.kt.run`); plans.py holds what it and its report
share (the data sets' plans, the models' flags, the training settings); report.py reads
the finished folds back and writes the section of bench/results/kt.txt.
"""
