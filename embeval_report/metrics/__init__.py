"""The metrics: pure computation and result records, one module per concern.

Each module declares its metrics once in ``SPECS`` (:class:`~.spec.MetricSpec`: name, label,
direction, formula, reference, range, verdict bands from :mod:`.thresholds`, chance level, unit)
and computes them with the chunked kernels of :mod:`embeval_report.kernels` and the intervals of
:mod:`embeval_report.stats`. Nothing here imports from presentation (:mod:`embeval_report.report`,
:mod:`embeval_report.chapters`, matplotlib).
"""
