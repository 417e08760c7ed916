"""The ground floor of ``sweep``: what every layer may import and what imports nothing of the
project: ``env`` (device, versions, commit), ``atomic`` (atomic writes), ``row`` (the results
row: its columns, units, stages and directions, declared once).

May import: the standard library and third-party packages only.
"""
