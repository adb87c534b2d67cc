"""Is what we serve still right: watchdogs, capture, shadow traffic, the quality gate, the eval
schedule."""
