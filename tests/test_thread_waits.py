"""The package asks OpenMP's and OpenBLAS' threads to sleep between parallel regions (embeval_report/__init__.py),
unless the user chose a policy, a spin count or a timeout."""
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("given, expected", [({}, "PASSIVE"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),
                                             ({"GOMP_SPINCOUNT": "1000"}, None)])
def test_openmp_threads_sleep_between_regions_unless_the_user_chose(given, expected):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT")} | given
    code = ("import os, embeval_report, torch; print(os.environ.get('OMP_WAIT_POLICY'));"
            "print(torch.get_num_threads() >= 1)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(expected), "True"]


@pytest.mark.parametrize("given, expected", [({}, "4"), ({"OPENBLAS_THREAD_TIMEOUT": "20"}, "20")])
def test_openblas_threads_time_out_at_once_unless_the_user_chose(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"} | given
    code = "import os, embeval_report, numpy; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [expected]
