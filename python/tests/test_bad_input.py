"""Random wrong arguments to every public function of kiln.core, kiln.nn and kiln.optimizers
(``bad_input_fuzz.py``, run as a subprocess so that a crash, abort or hang is caught and names the
call that caused it): each call returns or raises one of the exceptions mlx raises."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_bad_arguments_raise_python_exceptions_never_crash(tmp_path, on_cpu):
    calls = int(os.environ.get("KILN_FUZZ_CALLS", "6000"))
    trail = tmp_path / "trail.txt"
    fuzzer = Path(__file__).with_name("bad_input_fuzz.py")
    try:
        proc = subprocess.run(
            [sys.executable, str(fuzzer), "--calls", str(calls), "--seed", os.environ.get("KILN_FUZZ_SEED", "0"), "--trail", str(trail)],
            capture_output=True, text=True, timeout=900,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the fuzzer hung during: {trail.read_text().splitlines()[-1:]}")
    if proc.returncode not in (0, 1):
        pytest.fail(f"the fuzzer crashed (exit {proc.returncode}) during: {trail.read_text().splitlines()[-1:]}\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout)
    assert not report["findings"], "\n".join(report["findings"][:40])
    # Both outcomes are reached, or the arguments test nothing.
    assert report["raised"] > calls // 4 and report["returned"] > calls // 50, report
