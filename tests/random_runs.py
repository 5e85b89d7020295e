"""random_runs.py: what tests/random_models.py and tests/random_gans.py share: the loop
over the drawn cases with its report, a trainc run, the resume check, and the fake GPU's
libraries and environment."""
import os, subprocess
import run_log   # a run's metrics.jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = ("time_s", "samples_per_s", "tokens_per_s")   # what two runs of the same numbers differ in


def run_cases(n, one, r, out, prefix, noun):
    """one(i, r) -> (desc, steps, problems) for i < n, a line each ("ok   m03 ..." or
    "FAIL m03 (...): OUT/m03/spec.json" and its first problems; a RuntimeError is a
    problem): the number that failed"""
    failed = 0
    for i in range(n):
        try:
            desc, steps, problems = one(i, r)
        except RuntimeError as e:
            desc, steps, problems = "%s %d" % (noun, i), 0, [str(e)]
        if problems:
            failed += 1
            print("FAIL %s%02d (%s): %s/%s%02d/spec.json" % (prefix, i, desc, os.path.relpath(out, ROOT),
                                                              prefix, i))
            for p in problems[:8]:
                print("       " + p)
        else:
            print("ok   %s%02d %s: %d steps" % (prefix, i, desc, steps))
    return failed


def train(trainc, spec_path, out, init, threads, recompute=None):
    """`trainc run` of the spec from --init into out (a RuntimeError if it fails)"""
    cmd = [trainc, "run", spec_path, "--init", init, "--out", out, "--quiet", "--threads", str(threads)]
    if recompute:
        cmd += ["--set", "recompute=" + recompute]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("trainc run failed (exit %d):\n%s" % (p.returncode, p.stderr[-3000:]))


def resumed(trainc, d, spec_path, init, threads, max_steps="null"):
    """The run in d/run stopped after its first step (a checkpoint there) and resumed with
    --resume (max_steps set back to `max_steps`): the straight run's records (timings
    aside) and its model.safetensors byte for byte. The problems found."""
    out = os.path.join(d, "resumed")
    first = [trainc, "run", spec_path, "--init", init, "--out", out, "--quiet", "--threads", str(threads),
             "--set", "max_steps=1", "--set", "checkpoint.every_steps=1"]
    rest = [trainc, "run", spec_path, "--resume", out, "--quiet", "--threads", str(threads),
            "--set", "max_steps=%s" % max_steps]
    for cmd in (first, rest):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return ["%s: exit %d\n%s" % ("the resume" if cmd is rest else "the first step", p.returncode,
                                         p.stderr[-2000:])]

    def kept(run):
        return [{k: v for k, v in x.items() if k not in TIMING} for x in run_log.records(run) if "event" not in x]
    straight = os.path.join(d, "run")
    problems = []
    a, b = kept(out), kept(straight)
    if a != b:
        k = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        problems.append("resumed after step 1: record %d is %s, the straight run's %s (of %d and %d)"
                        % (k + 1, a[k] if k < len(a) else None, b[k] if k < len(b) else None, len(a), len(b)))
    if open(os.path.join(out, "model.safetensors"), "rb").read() != \
            open(os.path.join(straight, "model.safetensors"), "rb").read():
        problems.append("resumed after step 1: model.safetensors differs from the straight run's")
    return problems


def fake_lib_ready(fake_lib):
    """the fake GPU's libraries in fake_lib, built there unless run_all.sh's are"""
    if not os.path.exists(os.path.join(fake_lib, "libcuda.so.1")):
        subprocess.run(["bash", os.path.join(ROOT, "tests", "fake_gpu", "build.sh"), fake_lib], check=True, cwd=ROOT)


def fake_env(fake_lib, cache):
    """the environment of a trainer on the fake GPU: its libraries first on the library
    path, the kernel cache in `cache`"""
    ld = os.environ.get("LD_LIBRARY_PATH")
    return dict(os.environ, LD_LIBRARY_PATH=fake_lib + (":" + ld if ld else ""), TRAINC_CACHE_DIR=cache)
