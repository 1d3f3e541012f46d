"""tests/no_silent_skips.py: under CI a skip for a missing installed library fails; the drift checks' optional
peers still skip; without CI nothing changes. Each case runs pytest in a subprocess on throwaway test files."""
import os
import re
import subprocess
import sys
from pathlib import Path

import no_silent_skips

TESTS = Path(__file__).resolve().parent

FILES = {
    "test_module_level.py": "import pytest\nnot_there = pytest.importorskip('no_such_module_30')\n\n"
                            "def test_a():\n    pass\n",
    "test_in_test.py": "import pytest\n\ndef test_b():\n    pytest.importorskip('no_such_module_30.sub')\n\n"
                       "def test_c():\n    pytest.importorskip('kiez.no_such_submodule')\n\n"
                       "def test_d():\n    pytest.skip('no GPU here')\n\ndef test_e():\n    pass\n",
}


def run(tmp_path, ci, *files):
    for name in files:
        (tmp_path / name).write_text(FILES[name])
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    if ci is not None:
        env["CI"] = ci
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no_silent_skips", "-p", "no:cacheprovider", "-rA",
                          "--rootdir", str(tmp_path), *files], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    return out.returncode, out.stdout


def counts(stdout):
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", stdout.splitlines()[-1])}


def test_ci_is_on_for_any_value_but_the_false_ones(monkeypatch):
    for value, on in (("1", True), ("true", True), ("yes", True), (" TRUE ", True), ("", False), ("0", False),
                      ("false", False), ("No", False), ("off", False)):
        monkeypatch.setenv("CI", value)
        assert no_silent_skips.ci_enabled() is on, value
    monkeypatch.delenv("CI")
    assert not no_silent_skips.ci_enabled()


def test_without_ci_skips_stay_skips(tmp_path):
    rc, out = run(tmp_path, None, "test_module_level.py", "test_in_test.py")
    assert rc == 0 and counts(out) == {"passed": 1, "skipped": 4}, out


def test_under_ci_a_missing_library_fails_and_optional_peers_and_other_skips_do_not(tmp_path):
    rc, out = run(tmp_path, "1", "test_in_test.py")
    assert rc == 1 and counts(out) == {"failed": 1, "passed": 1, "skipped": 2}, out
    assert "test_b: could not import 'no_such_module_30.sub' under CI" in out
    assert re.search(r"SKIPPED .*could not import 'kiez.no_such_submodule'", out)  # an optional peer
    assert re.search(r"SKIPPED .*no GPU here", out)  # a skip for another reason
    rc, out = run(tmp_path, "1", "test_module_level.py")  # at collection: an error
    assert rc != 0 and "test_module_level.py: could not import 'no_such_module_30' under CI" in out, out
