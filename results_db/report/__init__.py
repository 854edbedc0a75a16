"""The report: figures (``figures/``), the HTML page (``html_report/``), a run's timeline as a Chrome
trace. Reads through ``store``, ``stats`` and ``analysis``; writes no SQL, imports neither ingest nor publish.
"""
