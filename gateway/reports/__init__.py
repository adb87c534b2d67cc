"""The reports read back from the store: cost, health, shadow agreement, the metric reference.

The top floor with the CLI: a report may read every stage below it.
"""
