"""What swapd shows about itself: the activity log (`activity_store.py`, `activity_query.py`) and
the Prometheus figures (`metrics.py`). The daemon keeps them all, fed by the proxies' reports, so
every proxy process answers alike."""
