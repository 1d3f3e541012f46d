"""Presentation primitives the chapters show their results with: number and interval formatting
(:mod:`.format`), tables, callouts and figures in a notebook (:mod:`.display`), the figure style
(:mod:`.plotting`). Above the metrics, below the chapters: nothing here computes a metric."""
