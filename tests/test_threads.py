"""embeval_report.threads: the limit applies inside the block only, and the cached controller sees libraries
loaded after it was first made."""
import numpy as np
from threadpoolctl import threadpool_info

from embeval_report.threads import blas_threads


def _blas_counts():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_one_thread_inside_the_block_and_the_count_restored_after():
    before = _blas_counts()
    with blas_threads(1):
        assert set(_blas_counts()) == {1}
    assert _blas_counts() == before


def test_a_library_loaded_after_the_first_use_is_limited_too():
    with blas_threads(1):
        pass
    import scipy.linalg  # noqa: F401  (scipy's own OpenBLAS, loaded now if it was not)

    with blas_threads(1):
        assert set(_blas_counts()) == {1}


def test_one_thread_gives_the_same_product_on_any_core_count():
    """The reason to run small long-sum products on one thread: the value is then the one-thread value."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((5000, 64)), rng.standard_normal((5000, 64))
    with blas_threads(1):
        ours = A.T @ B
    with threadpool_limits(1):
        ref = A.T @ B
    assert np.array_equal(ours, ref)
