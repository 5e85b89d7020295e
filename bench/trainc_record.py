"""One JSON line from a trainc run's metrics.jsonl, for the GPU benchmarks' records.

tokens/s as BENCHMARKING.md times it: the tokens of the steps after WARM over the wall
time between the record at step WARM and the last one (both records are written after
the host has waited for their step's loss, so the device is synchronized at both clock
reads; log_every must divide WARM). Also the last training record's loss, the last
validation loss, trainc's allocated bytes and the device's used memory and context
after the first step.

usage: trainc_record.py METRICS.jsonl BATCH SEQ WARM LABEL [KEY=VALUE...]
  KEY=VALUE pairs are added to the line as strings (the trainer's name, a round).
"""
import json, sys


def record(path, batch, seq, warm, label, extra):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    start = next((r for r in rows if r.get("event") == "start"), {})
    train = [r for r in rows if "loss" in r and "step" in r and "event" not in r]
    val = [r for r in rows if "val_loss" in r]
    mem = next((r for r in rows if r.get("event") == "device_memory"), {})
    rec = {"impl": "trainc+" + start.get("precision", "?"), "label": label, "batch": batch}
    rec.update(extra)
    w = next((r for r in train if r["step"] == warm), None)
    last = train[-1] if train else None
    if w is None or last is None or last["step"] <= warm:
        rec["error"] = "no record at step %d and after it in %s" % (warm, path)
        return rec
    rec.update(tokens_per_s=round((last["step"] - warm) * batch * seq / (last["time_s"] - w["time_s"]), 1),
               timed_steps=last["step"] - warm, timed_wall_s=round(last["time_s"] - w["time_s"], 3),
               final_loss=last["loss"], val_loss=val[-1]["val_loss"] if val else None,
               device_bytes=start.get("device_bytes"), used_bytes=mem.get("used_bytes"),
               context_bytes=mem.get("context_bytes"))
    return rec


if __name__ == "__main__":
    a = sys.argv[1:]
    extra = dict(kv.split("=", 1) for kv in a[5:])
    try:
        r = record(a[0], int(a[1]), int(a[2]), int(a[3]), a[4], extra)
    except (OSError, ValueError, KeyError) as e:
        r = {"impl": "trainc", "label": a[4], "error": repr(e)}
        r.update(extra)
    print(json.dumps(r))
