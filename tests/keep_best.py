"""checkpoint.keep_best (Lightning's ModelCheckpoint(monitor, save_top_k)): OUT/best/ holds
the weights at the K best monitored values.

keep_best.py

A linear classifier on 40 random rows, SGD at a rate high enough that the validation
loss goes up and down, a validation every 2 steps; threads 1.

- val_loss (min), K 3; val_acc (max, early stopping's monitor), K 3, whose 12 validation
  rows give ties (an equal later value does not displace a kept one: step 14's 0.5 stays,
  step 22's is not kept): the files are
  those the validation records rank first, each file's metadata the step, monitor and
  value of its record, the best one's tensors those of best.safetensors;
- a run stopped at step 12 and resumed to the end, and --resume A --out B from a copy
  of the finished run cut back to its checkpoint of step 12: the same files, byte for
  byte; that copy resumed in its folder to step 18 (its files past step 12 removed at
  the resume): those of a run to step 18;
- 2 ranks (DDP over MPI): the files of the 1-rank run of the same batches;
- with ASAN_TRAINC (make test's build/asan/trainc), the stop and resume under the
  sanitizers;
- keep_best without data.val: exit 1 naming the key.
"""
import json, os, shutil, subprocess, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check
import run_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "keep_best")
shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok


def data():
    r = np.random.default_rng(3)
    np.save(os.path.join(OUT, "x.npy"), r.standard_normal((40, 4)).astype(np.float32))
    np.save(os.path.join(OUT, "y.npy"), r.integers(0, 3, 40).astype(np.int32))
    np.save(os.path.join(OUT, "vx.npy"), r.standard_normal((12, 4)).astype(np.float32))
    np.save(os.path.join(OUT, "vy.npy"), r.integers(0, 3, 12).astype(np.int32))
    spec = {"trainc": 1, "model": {"name": "tiny", "inputs": {"x": {"shape": [4], "dtype": "f32"},
            "y": {"shape": [], "dtype": "i32", "classes": 3}}, "layers": [{"op": "linear", "out": 3}],
            "loss": {"op": "cross_entropy", "target": "y"}},
            "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}, "val": {"x": "vx.npy", "y": "vy.npy"}},
                      "batch_size": 4, "epochs": 3, "optimizer": {"type": "sgd", "lr": 3.0},
                      "loader": {"shuffle": True, "workers": 0}, "log_every": 1,
                      "validate": {"every_steps": 2},
                      "checkpoint": {"every_steps": 6, "keep": 10, "keep_best": 3}}}
    path = os.path.join(OUT, "t.json")
    json.dump(spec, open(path, "w"))
    return path


def run(*args, check_rc=True):
    p = subprocess.run(list(args), capture_output=True, text=True, cwd=OUT)
    if check_rc and p.returncode != 0:
        sys.exit("FAIL %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    return p


def expected(out, key, k, mode):
    """the steps the validation records rank among the k best (ties: the earlier)"""
    vals = [(r["step"], r[key]) for r in run_log.records(out) if key in r]
    sign = 1 if mode == "min" else -1
    return sorted(s for s, _ in sorted(vals, key=lambda sv: (sign * sv[1], sv[0]))[:k]), dict(vals)


def files(out):
    d = os.path.join(out, "best")
    return {int(f[5:13]): open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def ranked(exe, out, key, k, mode, *sets):
    run(exe, "--out", out, "--quiet", "--threads", "1", *sets)
    want, vals = expected(out, key, k, mode)
    got = files(out)
    metas_ok = True
    for step in got:
        _, meta = st_check.read(os.path.join(out, "best", "step_%08d.safetensors" % step))
        metas_ok &= (meta.get("step") == str(step) and meta.get("monitor") == key and
                     abs(float(meta["value"]) - vals[step]) <= 1e-6 * max(1, abs(vals[step])))
    best = st_check.load(os.path.join(out, "best.safetensors"))
    first = sorted(vals.items(), key=lambda sv: ((1 if mode == "min" else -1) * sv[1], sv[0]))[0][0]
    mine = st_check.load(os.path.join(out, "best", "step_%08d.safetensors" % first))
    same = all(np.array_equal(best[n], mine[n]) for n in best)
    ties = len(set(vals.values())) < len(vals)
    check(sorted(got) == want and metas_ok and same,
          "%s (%s), K %d: files of steps %s, the %d best of %d validations%s; metadata step, "
          "monitor, value; step %d's tensors those of best.safetensors"
          % (key, mode, k, want, k, len(vals), " (with ties)" if ties else "", first))
    return got


def resumed(exe, full, k_files):
    """stopped at 12 and resumed; a finished copy cut back to 12 and resumed; --out B"""
    a = os.path.join(OUT, "stopped")
    run(exe, "--out", a, "--quiet", "--threads", "1", "--set", "max_steps=12")
    run(exe, "--resume", a, "--quiet", "--threads", "1", "--set", "max_steps=null")
    check(files(a) == k_files, "stopped at step 12 and resumed: the same files, byte for byte")
    cut = os.path.join(OUT, "cut")
    shutil.copytree(full, cut)
    for c in os.listdir(os.path.join(cut, "checkpoints")):
        if int(c[5:]) > 12:
            shutil.rmtree(os.path.join(cut, "checkpoints", c))
    b = os.path.join(OUT, "elsewhere")
    run(exe, "--resume", cut, "--out", b, "--quiet", "--threads", "1")
    later = sorted(s for s in files(cut) if s > 12)
    short = os.path.join(OUT, "to18")
    run(exe, "--out", short, "--quiet", "--threads", "1", "--set", "max_steps=18")
    run(exe, "--resume", cut, "--quiet", "--threads", "1", "--set", "max_steps=18")
    check(files(b) == k_files and files(cut) == files(short),
          "a finished run cut back to its checkpoint of step 12 (files of steps %s past it): "
          "resumed with --out B, the same files; resumed in its folder to step 18, those of a "
          "run to 18 (steps %s)" % (later, sorted(files(short))))


def sanitized(path, k_files):
    """the stop and resume again under the sanitizers (make test's build/asan/trainc)"""
    asan = os.environ.get("ASAN_TRAINC")
    if not asan:
        return
    a, env = os.path.join(OUT, "asan"), dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
    base = [os.path.join(ROOT, asan), "run", path, "--quiet", "--threads", "1"]
    for more in (["--out", a, "--set", "max_steps=12"], ["--resume", a, "--set", "max_steps=null"]):
        p = subprocess.run(base + more, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            check(False, "the sanitized trainc: exit %d\n%s" % (p.returncode, p.stderr[-2000:]))
            return
    check(files(a) == k_files, "the same stopped and resumed under the sanitizers (%s run): the same files" % asan)


def ddp(path, one):
    exe = os.path.join(OUT, "tiny")
    out = os.path.join(OUT, "ddp")
    run("mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", exe, "--out", out,
        "--quiet", "--threads", "1", "--set", "batch_size=2")
    a, b = files(out), files(one)
    # (2 ranks x 2 rows sum in another order than 1 x 4: the values agree to rounding)
    close = sorted(a) == sorted(b) and all(
        np.allclose(st_check.load(os.path.join(out, "best", "step_%08d.safetensors" % s))[n],
                    st_check.load(os.path.join(one, "best", "step_%08d.safetensors" % s))[n],
                    rtol=1e-5, atol=1e-6) for s in a for n in st_check.load(os.path.join(one, "best.safetensors")))
    check(close, "2 ranks x 2 rows (DDP): files of steps %s, as 1 rank x 4's" % sorted(a))


def main():
    path = data()
    exe = os.path.join(OUT, "tiny")
    run(TRAINC, "build", path, "-o", exe)
    full = os.path.join(OUT, "loss")
    k_files = ranked(exe, full, "val_loss", 3, "min")
    ranked(exe, os.path.join(OUT, "acc"), "val_acc", 3, "max", "--set", "checkpoint.keep_best=3",
           "--set", "early_stopping.monitor=val_acc", "--set", "early_stopping.mode=max",
           "--set", "early_stopping.patience=1000")
    resumed(exe, full, k_files)
    sanitized(path, k_files)
    ddp(path, full)
    p = run(exe, "--out", os.path.join(OUT, "noval"), "--set", "data.val=null", check_rc=False)
    check(p.returncode == 1 and "checkpoint.keep_best needs data.val" in p.stderr,
          "keep_best without data.val: exit %d, %r" % (p.returncode, p.stderr.strip()[:90]))
    sys.exit(1 if failed else 0)


main()
