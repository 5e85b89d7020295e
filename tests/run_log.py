"""run_log.py: what the parity scripts read back from a trainc run's folder.

`records(run)` is every record of RUN/metrics.jsonl in order (train steps, validations,
events), `steps(run)` the training steps' records (those with a "loss" that are no
event), `losses(run)` their losses, as each script compares them with PyTorch's.
"""
import json
import os


def records(run):
    return [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]


def steps(run):
    return [r for r in records(run) if "loss" in r and "event" not in r]


def losses(run):
    return [r["loss"] for r in steps(run)]
