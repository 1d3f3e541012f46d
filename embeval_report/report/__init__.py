"""The report: run the chapters (:mod:`.runner`), record their numbers (:mod:`.recorder`), summarise
(:mod:`.summary`), show (:mod:`.display`, :mod:`.format`, :mod:`.plotting`) and render (:mod:`.render`)."""
