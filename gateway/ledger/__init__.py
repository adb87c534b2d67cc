"""What was served and what it cost: the record, its store and spool, metrics, reports."""
