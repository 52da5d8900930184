"""The scheduler's domain model: plain types (`types.py`) parsed once from Kubernetes objects
(`parse.py`, the webhook's validation), jobs (`jobs.py`), resource vectors (`resources.py`) and why a pod
waits (`reasons.py`).
"""
