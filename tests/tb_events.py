"""TensorBoard's view of a run (runtime/tboard.c) read by TensorBoard itself.

mlp_fashion for 40 steps (a record every 2, validation every 10): every record of the
events file reads through TensorBoard's record reader (its CRC-32C checks), and
EventAccumulator's scalars are metrics.jsonl's train and validation records, each
number but the step under its name at its step (as float32). Then the same run
crashed after step 25 (its last checkpoint, step 25's, removed: as a SIGKILL between
the records and the checkpoint leaves it) and resumed from step 20 into its folder,
and into another (--resume A --out B): TensorBoard shows each step once, the records
of the uninterrupted run (the resumed session's file starts with a SessionLog START
at step 21, so the first session's points from there on are dropped).

Run with the TensorBoard venv's python (TB_PYTHON, `make deps`): exits 77 (skipped)
without `tensorboard`.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
except ImportError:
    print("skip tensorboard: no tensorboard package (make deps puts it in .venv/tb)")
    sys.exit(77)
import numpy as np  # noqa: E402

TRAINC = os.environ.get("TRAINC", "build/trainc")
OUT = "build/tests/tensorboard"
SETS = ["--set", "log_every=2", "--set", "validate.every_steps=10", "--set", "checkpoint.every_steps=5",
        "--set", "checkpoint.keep=10", "--threads", "1"]
EXACT = ("loss", "lr", "grad_norm", "val_loss", "val_acc", "epoch")   # the same in a resumed run


def run(*args):
    p = subprocess.run([TRAINC, *args], capture_output=True, text=True)
    assert p.returncode == 0, (args, p.stderr[-2000:])


def records(d):
    """metrics.jsonl's train and validation records: {name: {step: value}}"""
    out = {}
    for line in open(os.path.join(d, "metrics.jsonl")):
        r = json.loads(line)
        if "event" in r:
            continue
        for k, v in r.items():
            if k != "step" and isinstance(v, (int, float)):
                out.setdefault(k, {}).setdefault(r["step"], []).append(float(np.float32(v)))
    return out


def raw_events(path):
    """every record of an events file through TensorBoard's reader (CRC-32C checked)"""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    events = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return events
        events.append(event_pb2.Event.FromString(reader.record()))


def scalars(d):
    """TensorBoard's view of the folder: {tag: {step: [values]}}"""
    ea = EventAccumulator(d, size_guidance={"scalars": 0})
    ea.Reload()
    out = {}
    for tag in ea.Tags()["scalars"]:
        for e in ea.Scalars(tag):
            out.setdefault(tag, {}).setdefault(e.step, []).append(e.value)
    return out


def check_files(d, sessions):
    """the folder's events files: one a session, each beginning with the file version and
    a SessionLog START, then a summary a record"""
    files = sorted(glob.glob(os.path.join(d, "events.out.tfevents.*")))
    assert len(files) == sessions, files
    n = 0
    for f in files:
        ev = raw_events(f)
        assert ev[0].file_version == "brain.Event:2", ev[0]
        assert ev[1].session_log.status == event_pb2.SessionLog.START, ev[1]
        assert all(e.HasField("summary") for e in ev[2:]), ev[2:]
        n += len(ev) - 2
    return files, n


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    spec = "specs/mlp_fashion.json"
    ref = os.path.join(OUT, "ref")
    run("run", spec, "--out", ref, "--quiet", "--set", "max_steps=40", *SETS)
    want = records(ref)
    (f,), n = check_files(ref, 1)
    assert n == sum(1 for line in open(os.path.join(ref, "metrics.jsonl")) if '"event"' not in line), n
    got = scalars(ref)
    assert got == want, (sorted(got), sorted(want))
    assert sorted(want["val_loss"]) == [10, 20, 30, 40] and len(want["loss"]) == 20, want
    print("ok   %s: %d records CRC-checked by TensorBoard's reader; its scalars (%s) are "
          "metrics.jsonl's" % (os.path.basename(f), n, ", ".join(sorted(got))))

    # the crash: step 25's records written, its checkpoint not (removed), then resumed
    a = os.path.join(OUT, "a")
    run("run", spec, "--out", a, "--quiet", "--set", "max_steps=25", *SETS)
    shutil.rmtree(os.path.join(a, "checkpoints", "step_00000025"))
    b = os.path.join(OUT, "b")
    shutil.copytree(a, os.path.join(OUT, "a_copy"), symlinks=True)
    run("run", spec, "--resume", os.path.join(OUT, "a_copy"), "--out", b, "--quiet",
        "--set", "max_steps=40")
    run("run", spec, "--resume", a, "--quiet", "--set", "max_steps=40")
    for d, what in ((a, "--resume A"), (b, "--resume A --out B")):
        files, n = check_files(d, 2)
        got = scalars(d)
        mine = records(d)
        assert got == mine, (what, {t: (got.get(t), mine.get(t)) for t in set(got) | set(mine)
                                    if got.get(t) != mine.get(t)})
        for t in EXACT:
            assert got[t] == want[t], (what, t, got[t], want[t])
        assert sorted(got["loss"]) == sorted(want["loss"]), (what, sorted(got["loss"]))
        print("ok   crashed after step 25 and %s from step 20: %d events files; TensorBoard shows "
              "each step once, the uninterrupted run's %s" % (what, len(files), ", ".join(EXACT)))
    print("tensorboard: all checks passed")


if __name__ == "__main__":
    main()
