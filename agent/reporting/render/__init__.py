"""A :class:`agent.reporting.model.Report` in every format `gpuwatch report` offers.

Layout: :mod:`.values` rounds and spells each figure (the only place that does), :mod:`.fields`
names every figure of the report by its JSON key, :mod:`.sections` arranges them in titled
tables; one module per format lays those out (:mod:`.table`, :mod:`.json_format`,
:mod:`.csv_format`, :mod:`.markdown`, :mod:`.html_format`, with charts from :mod:`.svg`), and
:mod:`.dispatch` picks one by name. Every format therefore shows the same figures with the same
rounding.
"""
