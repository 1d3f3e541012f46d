"""The package asks OpenMP's threads to sleep between parallel regions (embeval_report/__init__.py), unless the
user chose a policy or a spin count."""
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("given, expected", [({}, "PASSIVE"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),
                                             ({"GOMP_SPINCOUNT": "1000"}, None)])
def test_openmp_threads_sleep_between_regions_unless_the_user_chose(given, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")} | given
    code = ("import os, embeval_report, torch; print(os.environ.get('OMP_WAIT_POLICY'));"
            "print(torch.get_num_threads() >= 1)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(expected), "True"]
