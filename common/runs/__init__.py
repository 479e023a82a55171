"""Runs: a folder per experiment, the runs table, out-of-fold predictions and the
provenance a report opens its second part with."""
